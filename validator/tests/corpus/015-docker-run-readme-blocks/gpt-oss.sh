# llama-server -hf ggml-org/gpt-oss-20b-GGUF  --ctx-size 0 --jinja -ub 2048 -b 2048
docker run --rm -it --gpus all --network=host \
  -v ./.cache:/root/.cache \
  ghcr.io/ggml-org/llama.cpp:server-cuda \
    -hf ggml-org/gpt-oss-20b-GGUF \
    --ctx-size 0 --jinja -ub 2048 -b 2048
