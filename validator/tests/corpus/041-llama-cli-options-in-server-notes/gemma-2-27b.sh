./llama-server -m /llm_models/gemma-2-9b-GGUF/gemma-2-27b-it.Q4_K_S.gguf --color -p "<bos><start_of_turn>user
{你是一个智能的助手}<end_of_turn>
<start_of_turn>model
{好的，我会尽我所能解答您的问题}<end_of_turn>
<start_of_turn>user
{结合给予的资料，合理回答我的问题。如果给予的资料中没有与我的问题有关的信息，你就直接回答：抱歉，所给资料中没有相关信息，回答不了你的问题。}<end_of_turn>" -t 8 --keep -1 -ngl 36 -i --port 8080 --host 0.0.0.0