./llama.cpp/build/bin/llama-cli -t 8 -tb 16 -m ./models/Qwen2.5-14B-Instruct-1M-IQ4_XS.gguf -c -1 -ctk q8_0 -ctv q8_0 -fa -ngl 999

./llama.cpp/build/bin/llama-server -t 8 -tb 16 --host 192.168.1.140 --port 20480 -m ./models/Qwen2.5-14B-Instruct-1M-IQ4_XS.gguf -c -1 -ctk q8_0 -ctv q8_0 -fa -ngl 999
