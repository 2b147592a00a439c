./build/bin/llama-server \
 -hf Qwen/Qwen3-Coder-Next-GGUF:Q8_0 \
 -a qwen/qwen3coder-next \
--jinja \
--host 0.0.0.0 \
--port 11434 \
--no-mmap \
-fa on \
-kvu
