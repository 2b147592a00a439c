#export ANTHROPIC_LOG=debug
export ANTHROPIC_BASE_URL="http://localhost:4000"
export ANTHROPIC_AUTH_TOKEN=sk-1234

npm install -g @anthropic-ai/claude-code@latest
