export API_KEY="sk-$(openssl rand -base64 36 | tr -dc 'a-zA-Z0-9' | head -c 48)"
echo "API_KEY: $API_KEY"
docker run --rm -it --gpus all --network=host \
  -v ./.cache:/root/.cache \
  j3soon/llama.cpp:server-cuda-spark \
    -hf unsloth/NVIDIA-Nemotron-3-Super-120B-A12B-GGUF:UD-Q4_K_XL \
    --ctx-size 0 --jinja -ub 2048 -b 2048 \
    --api-key "$API_KEY" \
    --port 30000
