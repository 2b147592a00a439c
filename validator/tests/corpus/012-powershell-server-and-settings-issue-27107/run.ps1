.\llama-server.exe -hf unsloth/Qwen3.8-27B-GGUF `
  --jinja `
  --alias local-model `
  --api-key local-key `
  --chat-template-file "F:\lab\llama\claude.jinja" `
  --host 127.0.0.1 --port 8080
