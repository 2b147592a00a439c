# required but ignored
export ANTHROPIC_AUTH_TOKEN=ollama  
# required but ignored
export ANTHROPIC_API_KEY=""
export ANTHROPIC_BASE_URL=http://localhost:11434
