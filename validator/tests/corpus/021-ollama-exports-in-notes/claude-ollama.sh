# Install Ollama
brew install ollama

OR download from website
https://ollama.com/download/mac

ollama --version
curl http://localhost:11434

ollama list
ollama run qwen3-coder:30b


---

# Install Claude Code
curl -fsSL https://claude.ai/install.sh | bash
export ANTHROPIC_AUTH_TOKEN=ollama

export ANTHROPIC_BASE_URL=http://localhost:11434
claude --model qwen3-coder:30b

OR run with env variables inline
ANTHROPIC_AUTH_TOKEN=ollama ANTHROPIC_BASE_URL=http://localhost:11434 claude --model qwen3-coder:30b
