docker run --rm -it --gpus all --network=host \
  -v ./.cache:/root/.cache \
  ghcr.io/ggml-org/llama.cpp:server-cuda \
    -hf unsloth/Nemotron-3-Nano-30B-A3B-GGUF:UD-Q4_K_XL \
    --host 0.0.0.0 \
    --port 30000 \
    --n-gpu-layers 99 \
    --ctx-size 8192 \
    --threads 8 \
    --jinja
