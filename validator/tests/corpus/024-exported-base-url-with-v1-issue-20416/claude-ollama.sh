# Ollama is running and model is pulled
ollama pull qwen2.5-coder
ollama list  # shows qwen2.5-coder:latest

# Environment variables set
export ANTHROPIC_AUTH_TOKEN=ollama
export ANTHROPIC_BASE_URL=http://localhost:11434/v1

# Running Claude Code
claude --model qwen2.5-coder
