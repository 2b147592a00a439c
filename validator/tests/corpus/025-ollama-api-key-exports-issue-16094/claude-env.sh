# set Claude code env vars
export ANTHROPIC_BASE_URL="http://127.0.0.1:11434"
# export ANTHROPIC_AUTH_TOKEN=ollama
export ANTHROPIC_API_KEY="sk-local"  # Required placeholder
export CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1
export ANTHROPIC_MODEL="gemma4"      
