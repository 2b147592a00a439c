/home/rk/1.8T/llama.cpp/build/bin/llama-server \
    --model   /var/model/gguf/Qwen3.6-27B-NO-MTP_Q4_K_M_unsloth.gguf \
    --mmproj  /var/model/gguf/Qwen3.6-27B-MTP_unsloth/mmproj-F32.gguf \
    --alias "Qwen3.6-27B" \
    --port 8008 \
    --host 0.0.0.0 \
    --split-mode tensor \
    --ctx-size 262144 \
    --fit off
