export ANTHROPIC_BASE_URL="http://0.0.0.0:4000"
export ANTHROPIC_AUTH_TOKEN="dummy"
claude --model openai/qwen3-coder-30b-a3b-instruct

export ANTHROPIC_BASE_URL="http://0.0.0.0:4000"
export ANTHROPIC_AUTH_TOKEN="dummy"
claude --model gpt-oss-120b
