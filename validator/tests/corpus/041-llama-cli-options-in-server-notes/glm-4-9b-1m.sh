./llama-server -m /llm_models/glm-4-9b-chat-GGUF/glm-4-9b-chat-1m.Q3_K_S.gguf --color -p "[gMASK]<|system|>\n你是一个智能助手<|user|>\n你好<|assistant|>\n" -t 8 --keep -1  -n -1 -ngl 36  -i --port 8080 --host 0.0.0.0

