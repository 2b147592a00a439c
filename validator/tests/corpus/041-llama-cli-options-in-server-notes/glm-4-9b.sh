./llama-server -m /llm_models/glm-4-9b-chat-GGUF/glm-4-9b-chat-IMat.Q3_K_S.gguf --color -p "[gMASK]<|system|>\n你是一个智能助手<|user|>\n你好<|assistant|>\n" -t 16 --keep -1 -c 1024 -b 1024 -n -1  -ngl 36  -i --port 8000

