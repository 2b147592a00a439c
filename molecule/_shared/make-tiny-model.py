#!/usr/bin/env python3
"""Write a tiny random-weight llama GGUF for tests (about 8 MB, loads in a fraction of a second).

    make-tiny-model.py VOCAB.gguf OUT.gguf [--seed N] [--context-length N]

VOCAB.gguf is one of llama.cpp's ``models/ggml-vocab-*.gguf`` files (SentencePiece llama vocab
expected); its ``tokenizer.*`` keys are copied. The model gets a Qwen/ChatML-style chat template that
renders tools, so prompts have realistic sizes.

The weights are random except for one planted direction: every token embedding carries a constant
component in dimension 0, the token "OK" also one in dimension 1, and the output layer reads only
those two dimensions for "OK" and end-of-sequence. Whatever the prompt, the model answers "OK" and
then stops, so a client that asks for 64000 tokens still gets a short answer. The output is
deterministic for a given seed: the same bytes (and sha256) on every machine.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD = 64
N_HEAD = 2  # head_dim 32: quantized KV cache types need >= 32
N_LAYER = 2
N_FF = 128

CHAT_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""


def copy_tokenizer(reader: GGUFReader, writer: GGUFWriter) -> tuple[int, int]:
    """Copy every tokenizer.* key; return (vocab size, id of the token "OK")."""
    tokens: list[str] = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                value = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
                if key == "tokenizer.ggml.tokens":
                    tokens = value
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(key, value)
        elif vtype == GGUFValueType.STRING:
            writer.add_key_value(key, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype)
        else:
            writer.add_key_value(key, field.parts[field.data[0]].tolist()[0], vtype)
    if not tokens:
        sys.exit("no tokenizer.ggml.tokens in the vocab file")
    ok_id = tokens.index("OK") if "OK" in tokens else tokens.index("▁OK")
    return len(tokens), ok_id


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vocab", help="a llama.cpp models/ggml-vocab-*.gguf file (llama SentencePiece)")
    ap.add_argument("out", help="where to write the model")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--context-length", type=int, default=131072,
                    help="training context; llama-server caps each slot at it (default 131072)")
    ap.add_argument("--name", default="llamafleet tiny test model")
    args = ap.parse_args()

    reader = GGUFReader(args.vocab)
    rng = np.random.default_rng(args.seed)
    writer = GGUFWriter(args.out, "llama")
    writer.add_name(args.name)
    writer.add_context_length(args.context_length)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly F16
    n_vocab, ok_id = copy_tokenizer(reader, writer)
    eos_id = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    writer.add_vocab_size(n_vocab)
    writer.add_chat_template(CHAT_TEMPLATE)

    def rand(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float16)

    # Planted direction (see the module docstring). After RMSNorm, dim 0 is ~8 for ordinary tokens;
    # for "OK" dims 0 and 1 are ~5.7. Logits: ordinary -> OK 64 vs EOS 32; after "OK" -> OK 0 vs EOS 22.6.
    embd = rand(n_vocab, N_EMBD)
    embd[:, 0] = 1.0
    embd[:, 1] = 0.0
    embd[ok_id, 1] = 1.0
    out = rand(n_vocab, N_EMBD)
    out[:, 0:2] = 0.0
    out[ok_id, 0], out[ok_id, 1] = 8.0, -8.0
    out[eos_id, 0], out[eos_id, 1] = 4.0, 0.0
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", out)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{t}.weight", rand(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", rand(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", rand(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", rand(N_EMBD, N_FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
