# Claude configuration
export ANTHROPIC_BASE_URL=http://litellm.ai.warpcode.co.uk
export ANTHROPIC_AUTH_TOKEN="$LITELLM_API_KEY"
export ANTHROPIC_MODEL="qwen3-coder"
export ANTHROPIC_SMALL_FAST_MODEL="gemini-2.5-flash"
