"""The pitfall catalogue, compiled from rules.yaml by tools/gen_catalogue.py."""

# fmt: off
# ruff: noqa: RUF001
from typing import Any

SOURCE_SIZE = 52349
SOURCE_CRC32 = 3440834231
CATALOGUE: dict[str, Any] = {'rules': [{'id': 'LS001',
            'name': 'cache-ram-disabled',
            'severity': 'error',
            'scope': 'server',
            'message': '{option} disables the cross-request prompt cache: a prompt evicted from '
                       "its slot (e.g. by Claude Code's side requests) is re-read in full",
            'why': '--cache-ram is the MiB of host RAM kept for prompts that leave a slot. 0 '
                   'turns the cache off, so every side request that takes the slot throws the '
                   "main conversation's KV away and the next turn re-reads the whole prompt "
                   '(94,000 tokens: ~28 s instead of ~0.1 s).',
            'fix': 'Remove the option (default 8192 MiB) or give it a size, e.g. --cache-ram '
                   '16384.',
            'references': ['llama.cpp common/arg.cpp (--cache-ram)',
                           'https://github.com/ggml-org/llama.cpp/pull/16391']},
           {'id': 'LS002',
            'name': 'cache-ram-unbounded',
            'severity': 'warning',
            'scope': 'server',
            'message': '{option}: no limit upstream; a prompt cache entry for a 220k-token prompt '
                       'can take ~14 GiB of host RAM',
            'why': "-1 removes the prompt cache's size limit in upstream llama.cpp (in the "
                   'TurboQuant fork it means half of the free RAM). Long Claude Code sessions '
                   'fill it until the host swaps or the OOM killer ends llama-server.',
            'fix': 'Give an explicit size that fits the host, e.g. --cache-ram 16384 (MiB).',
            'references': ['llama.cpp common/arg.cpp (--cache-ram)', 'TurboQuant fork PR #350']},
           {'id': 'LS003',
            'name': 'parallel-splits-context',
            'severity': 'warning',
            'scope': 'server',
            'message': '{option}: {detail}',
            'why': 'An explicit -np N turns the unified KV cache off (it is only on by default '
                   'when -np is auto), so each slot gets ctx/N tokens. Each slot also keeps its '
                   'own recurrent state on hybrid models (~62.8 MiB per slot for '
                   'Qwen3.5/3.6-35B-A3B). One Claude Code user needs one slot with the whole '
                   'context.',
            'fix': 'Use -np 1 for one user, or keep several slots with --kv-unified so each '
                   'request can use the full context.',
            'references': ['llama.cpp tools/server/server.cpp, src/llama-context.cpp',
                           'https://github.com/ggml-org/llama.cpp/pull/19559']},
           {'id': 'LS004',
            'name': 'request-context-too-small',
            'severity': 'error',
            'scope': 'server',
            'message': 'each request gets {per_slot} tokens of context ({detail}); Claude Code '
                       'needs at least {needed}',
            'why': "Claude Code's system prompt and tool definitions alone are ~20K tokens; with "
                   'the conversation it needs a per-request context of at least 32768 tokens, and '
                   "more for real work. Requests beyond the slot's context fail or get truncated.",
            'fix': 'Raise -c, or lower -np, or use --kv-unified so one request can use the whole '
                   'context.',
            'references': ['llama.cpp tools/server/server.cpp (slot n_ctx)']},
           {'id': 'LS005',
            'name': 'mmproj-breaks-cache',
            'severity': 'error',
            'scope': 'server',
            'message': '{option} on {build}: loading a projector disables context checkpoints and '
                       'the RAM prompt cache before b8153',
            'why': 'Before build b8152/b8153 a loaded multimodal projector turned off context '
                   'checkpoints and the RAM prompt cache: every turn of a long session re-reads '
                   'the prompt. It always disables --cache-reuse (KV shifting).',
            'fix': 'Use a build >= b8153, or drop --mmproj when images are not needed.',
            'needs': ['version'],
            'references': ['https://github.com/ggml-org/llama.cpp/pull/17045',
                           'https://github.com/ggml-org/llama.cpp/pull/19849',
                           'https://github.com/ggml-org/llama.cpp/pull/19877']},
           {'id': 'LS006',
            'name': 'cache-reuse-zero',
            'severity': 'info',
            'scope': 'server',
            'message': '{option} turns KV-shift reuse off (it is the default); 0 does not mean '
                       'unlimited',
            'why': '--cache-reuse is the minimum chunk size for KV-shift reuse; 0 (the default) '
                   'disables it. A widely read guide says 0 means "unlimited": it does not. Plain '
                   'prefix reuse works either way.',
            'fix': 'Drop the option, or set a chunk size such as --cache-reuse 256 to enable KV '
                   'shifting.',
            'references': ['llama.cpp common/arg.cpp (--cache-reuse)',
                           'llama.cpp tools/server/server-context.cpp']},
           {'id': 'LS007',
            'name': 'exposed-without-api-key',
            'severity': 'error',
            'scope': 'server',
            'message': 'listens on {host} (not loopback) without --api-key or --api-key-file',
            'why': 'llama-server accepts every request when no key is set. On a non-loopback '
                   'address anyone on the network can use the GPU, read /slots and fill the '
                   'prompt cache.',
            'fix': 'Add --api-key-file /etc/llamafleet/NAME.key (root-readable) or listen on '
                   '127.0.0.1.',
            'references': ['llama.cpp tools/server/server-http.cpp (API key middleware)']},
           {'id': 'LS008',
            'name': 'quantized-v-without-flash-attn',
            'severity': 'error',
            'scope': 'server',
            'message': 'V cache type {vtype} with {option}: a quantized V cache needs flash '
                       'attention',
            'why': 'llama.cpp refuses to create a quantized V cache when flash attention is off; '
                   'the server does not start.',
            'fix': 'Use --flash-attn on (or auto, the default), or an f16/bf16 V cache.',
            'references': ['llama.cpp src/llama-context.cpp']},
           {'id': 'LS009',
            'name': 'turbo-cache-unsupported',
            'severity': 'error',
            'scope': 'server',
            'message': '{option}: {detail}',
            'why': 'The turbo2/turbo3/turbo4 and tq5_0/tq6_0 cache types exist only in the '
                   "TurboQuant fork's feature branch; upstream llama.cpp (and the fork's master) "
                   'stop with "Unsupported cache type".',
            'fix': "Build the fork's feature/turboquant-kv-cache branch, or use q8_0/q4_0 cache "
                   'types on this build.',
            'needs': ['help'],
            'references': ['TurboQuant fork docs/KV-cache-quantization.md']},
           {'id': 'LS010',
            'name': 'symmetric-turbo-k',
            'severity': 'warning',
            'scope': 'server',
            'message': '{option}: a turbo K cache loses accuracy; the fork recommends -ctk q8_0 '
                       'with a turbo V',
            'why': 'K carries the attention scores and degrades faster than V under 2-4 bit '
                   'quantization. The fork recommends -ctk q8_0 -ctv turbo3 and may silently '
                   'rewrite a turbo K to q8_0 on large-GQA models (TURBO_AUTO_ASYMMETRIC), '
                   'changing the memory you planned for.',
            'fix': 'Use -ctk q8_0 -ctv turbo3 (or turbo4).',
            'references': ['TurboQuant fork docs/KV-cache-quantization.md']},
           {'id': 'LS011',
            'name': 'fit-silently-disabled',
            'severity': 'info',
            'scope': 'server',
            'message': '--fit is {fit_state} but {option} is set: fit does nothing when layers or '
                       'tensors are placed by hand',
            'why': '--fit (default on) adjusts unset arguments to the device memory, but aborts '
                   'with only a warning when -ngl, --tensor-split, -ot, --cpu-moe or --n-cpu-moe '
                   'is given. The config looks auto-fitted and is not.',
            'fix': 'Either drop the manual placement and let --fit work, or say --fit off to make '
                   'it explicit.',
            'references': ['llama.cpp common/fit.cpp']},
           {'id': 'LS012',
            'name': 'ctx-above-training',
            'severity': 'warning',
            'scope': 'server',
            'message': "{option} is above the model's training context ({n_ctx_train} tokens); "
                       'the server caps each slot at {n_ctx_train}',
            'why': "llama-server caps a slot's context at the model's n_ctx_train; beyond it "
                   'quality falls unless RoPE scaling is configured.',
            'fix': 'Use -c {n_ctx_train} or less, or configure RoPE/YaRN scaling deliberately.',
            'needs': ['model'],
            'references': ['llama.cpp tools/server/server-context.cpp']},
           {'id': 'LS013',
            'name': 'batch-below-ubatch',
            'severity': 'error',
            'scope': 'server',
            'message': 'batch size {batch} is smaller than ubatch size {ubatch}{detail}',
            'why': 'The physical batch (-ub) cannot exceed the logical batch (-b); llama.cpp '
                   'clamps -ub to -b, so the configured value is not what runs.',
            'fix': 'Set -b >= -ub, e.g. -b 4096 -ub 4096 (or -b 2048 -ub 512, the defaults).',
            'references': ['llama.cpp src/llama-context.cpp (n_ubatch = min(n_batch, n_ubatch))']},
           {'id': 'LS014',
            'name': 'unknown-flag',
            'severity': 'error',
            'scope': 'server',
            'message': '{option} {detail}',
            'why': 'llama-server exits at start-up on an unknown option (`error: invalid '
                   'argument`); options change between builds (e.g. --mlock became --load-mode '
                   'mlock upstream).',
            'fix': '{hint}',
            'references': ['llama.cpp common/arg.cpp'],
            'examples': {'pass': ['--mlock on the fork']}},
           {'id': 'LS015',
            'name': 'swa-full-on-hybrid',
            'severity': 'info',
            'scope': 'server',
            'message': '--swa-full does nothing for {arch} (hybrid/recurrent model)',
            'why': '--swa-full keeps the full sliding-window cache so SWA models can reuse '
                   'prefixes; hybrid and recurrent models (Qwen3.5/3.6, Qwen3-Next) have no SWA '
                   'layers and checkpoint their state instead.',
            'fix': 'Remove --swa-full.',
            'needs': ['model'],
            'references': ['https://github.com/ggml-org/llama.cpp/issues/19794']},
           {'id': 'LS016',
            'name': 'does-not-fit-vram',
            'severity': 'error',
            'scope': 'server',
            'message': 'estimated GPU memory {total_mib:.0f} MiB is above {vram_mib:.0f} MiB VRAM '
                       'minus {margin_mib:.0f} MiB margin ({detail})',
            'why': 'llama-server fails at start-up (cudaMalloc out of memory) or, with --fit on, '
                   'silently shrinks what you asked for. The estimate adds weights on the GPU, K '
                   'and V caches, recurrent state per slot and compute buffers (context '
                   'checkpoints stay in host RAM); see `llamafleet plan`.',
            'fix': 'Run `llamafleet plan --suggest` for this model and GPU; lower -c, use cheaper '
                   'KV types, or move experts to the CPU with --n-cpu-moe.',
            'needs': ['model', 'gpu'],
            'references': ['llamafleet docs: planner arithmetic']},
           {'id': 'LS017',
            'name': 'threads-above-cores',
            'severity': 'warning',
            'scope': 'server',
            'message': "{option} is above the host's {cores} physical cores; oversubscribed "
                       'threads slow generation',
            'why': "llama.cpp's CPU threads spin; more threads than physical cores contend with "
                   'each other and with the GPU feeder thread.',
            'fix': 'Use -t {cores} or fewer (or leave it unset: llama.cpp picks the physical core '
                   'count).',
            'needs': ['cpu'],
            'references': ['llama.cpp common/common.cpp (cpu_get_num_math)']},
           {'id': 'LS018',
            'name': 'mmproj-offload-without-mmproj',
            'severity': 'info',
            'scope': 'server',
            'message': '{option} without --mmproj has no effect; it is about the vision '
                       'projector, not MoE experts',
            'why': '--no-mmproj-offload keeps the multimodal projector on the CPU. A widely read '
                   'guide says it keeps experts off the GPU: it does not. Experts move with '
                   '--cpu-moe / --n-cpu-moe N.',
            'fix': "Remove it; use --n-cpu-moe N to keep N layers' experts on the CPU.",
            'references': ['llama.cpp common/arg.cpp (--mmproj-offload)']},
           {'id': 'LS019',
            'name': 'turbo-env-not-needed',
            'severity': 'info',
            'scope': 'server',
            'message': 'LLAMA_KV_CACHE_TURBO is set: no build reads it; the cache types are '
                       'chosen with -ctk/-ctv',
            'why': 'Old TurboQuant recipes export LLAMA_KV_CACHE_TURBO; the fork selects turbo '
                   'caches only through --cache-type-k/-v. The variable hides the real '
                   'configuration from readers.',
            'fix': 'Remove LLAMA_KV_CACHE_TURBO and set -ctk q8_0 -ctv turbo3.',
            'references': ['TurboQuant fork docs/KV-cache-quantization.md']},
           {'id': 'LS020',
            'name': 'invalid-value',
            'severity': 'error',
            'scope': 'server',
            'message': '{detail}',
            'why': 'llama-server exits at start-up on a value it cannot parse; with a service '
                   'manager this becomes a restart loop.',
            'fix': '{hint}',
            'references': ['llama.cpp common/arg.cpp']},
           {'id': 'LS021',
            'name': 'chat-template-rejects-late-system',
            'severity': 'error',
            'scope': 'server',
            'message': '{origin} raises "{exception}" on the system message Claude Code sends '
                       'after the prompt: llama-server answers HTTP 500 to every Claude Code '
                       'request',
            'why': 'Claude Code (2.1.197) sends, after the user\'s prompt, a message with "role": '
                   '"system" (the agent types and the skills list). llama-server\'s Anthropic '
                   'endpoint folds only the top-level system field and passes that message to the '
                   'chat template unchanged. The official Qwen3.5/Qwen3.6 templates raise "System '
                   'message must be at the beginning." on it: every request fails with HTTP 500, '
                   'Claude Code retries ten times (~3 minutes) and exits 1.',
            'fix': 'Serve a template that renders the message in place: `llamafleet template fix '
                   'MODEL.gguf -o chat-template.jinja` rewrites the guard (only that); start '
                   'llama-server with --jinja --chat-template-file chat-template.jinja (the '
                   "llama_server role does this itself where the model's template raises: "
                   'llama_server_chat_template_fix, on by default).',
            'needs': ['model'],
            'references': ['llamafleet measurement: Claude Code 2.1.197 against llama-server '
                           '(docs page)',
                           'llama.cpp tools/server/server-common.cpp (Anthropic messages), '
                           'common/chat.cpp, common/jinja',
                           "the fork's models/templates/Qwen3.5-4B.jinja (line 85)"],
            'needs_note': 'or a readable --chat-template-file',
            'rationale': "Claude Code 2.1.197 sends, after the user's prompt, a message with "
                         '`"role": "system"` holding the\n'
                         'agent types and the skills list (~6,000 characters, ~1,600 tokens; it '
                         'comes with the beta flag\n'
                         '`mid-conversation-system-2026-04-07`, which '
                         '`CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1` does not\n'
                         "remove). llama-server's Anthropic endpoint (`/v1/messages`) folds only "
                         'the top-level `system` field\n'
                         'into a first system message; a `role: system` entry inside `messages` '
                         'is passed to the chat template\n'
                         'unchanged.\n'
                         '\n'
                         'The official Qwen3.5 and Qwen3.6 templates end their message loop with\n'
                         '\n'
                         '```jinja\n'
                         '{%- if message.role == "system" %}\n'
                         '    {%- if not loop.first %}\n'
                         "        {{- raise_exception('System message must be at the beginning.') "
                         '}}\n'
                         '    {%- endif %}\n'
                         '```\n'
                         '\n'
                         "so llama-server (upstream build 612d308 and the fork's 9079 alike) "
                         'answers HTTP 500\n'
                         '(`Jinja Exception: System message must be at the beginning.`) to every '
                         'Claude Code request.\n'
                         'Claude Code retries ten times (~3 minutes) and exits 1. Nothing in the '
                         "server's start-up shows it:\n"
                         'the template is fine for a plain chat.\n',
            'details': [{'title': 'The three behaviours',
                         'text': 'What a template does with that late system message, measured '
                                 'with Claude Code 2.1.197 against a\n'
                                 'real llama-server (CPU, tiny model, the client settings the '
                                 '`claude_code` role writes):\n'
                                 '\n'
                                 '| template | what happens | run 2 (new session) | run 3 '
                                 '(`--continue`) |\n'
                                 '|---|---|---|---|\n'
                                 '| renders it in place (Qwen3-Coder, Qwen2.5, ChatML, or a '
                                 'raising template with its guard rewritten) | works; the model '
                                 'sees the agent list | **92.1 %** of the prompt from the cache '
                                 '(20962 tok, 1647 evaluated) | **99.8 %** |\n'
                                 '| raises (official Qwen3.5/Qwen3.6): **LS021** | HTTP 500 on '
                                 'every request, ten retries, exit 1 | – | – |\n'
                                 '| drops it (some re-quantized Qwen3.6 GGUFs): **LS022** | '
                                 'works, but the model never sees the agent list | 99.8 % (a '
                                 'false figure) | 99.8 % |\n'
                                 '\n'
                                 'Measured again with the official Qwen3.5 template as the '
                                 '`llama_server` role serves it (guard\n'
                                 'rewritten; the TurboQuant fork, build 9079, `-ctk q8_0 -ctv '
                                 'turbo3`, the claude Molecule scenario):\n'
                                 "a new session **92.0 %**, the same session's next turn **99.8 "
                                 '%**; served as it ships, every request\n'
                                 'answered HTTP 500 and the preflight refuses it with this rule.\n'
                                 '\n'
                                 'A new session stops at 92 % because the new prompt and that '
                                 'message are new; everything before them\n'
                                 'is reused. A template that renders it as a user turn in place '
                                 'also works, with the same reuse.\n'
                                 '\n'
                                 "llamafleet renders the server's template (the model's "
                                 '`tokenizer.chat_template.tool_use`, else\n'
                                 '`tokenizer.chat_template`, or '
                                 '`--chat-template-file`/`--chat-template`) with jinja2 in a '
                                 'sandbox,\n'
                                 "set up as llama.cpp's engine (trim/lstrip blocks, "
                                 '`raise_exception`, `tojson`, `strftime_now`, loop\n'
                                 "controls), with a conversation shaped like Claude Code's: the "
                                 'folded system prompt, two tools, the\n'
                                 "user's prompt, the late system message, an assistant tool call "
                                 'and its result. The 55 templates in\n'
                                 "the fork's own `models/templates` (build 9079), checked so: 36 "
                                 'render it in place; Qwen3.5-4B,\n'
                                 'Apertus-8B, Mistral-Nemo and Ministral-3 raise; Bielik, '
                                 'SmolLM3, MiniMax-M2, Nemotron-Nano-v2,\n'
                                 'Reka-Edge and gpt-oss drop it; the DeepSeek ones, Solar-Open '
                                 'and rwkv-world move it before the\n'
                                 "user's prompt (LS022); gemma-2 and firefunction-v2 cannot "
                                 'render a Claude Code conversation at all\n'
                                 '(LS023).\n'}],
            'fix_details': 'Serve a template that renders the message in place. `llamafleet '
                           'template fix` rewrites only the\n'
                           "guard: the `{{- raise_exception('System message must be at the "
                           "beginning.') }}` inside\n"
                           '`{%- if not loop.first %}` becomes a ChatML turn for that message, '
                           'where it stands:\n'
                           '\n'
                           '```sh\n'
                           'llamafleet template fix q.gguf -o chat-template.jinja    # or a '
                           '.jinja file\n'
                           'llamafleet template check chat-template.jinja             # ok: '
                           'renders the late system message in place\n'
                           'llama-server -m q.gguf -c 131072 --jinja --chat-template-file '
                           'chat-template.jinja\n'
                           '```\n'
                           '\n'
                           '```jinja\n'
                           '{%- if not loop.first %}\n'
                           '    {%- if message.content is string %}{%- set _lf_late_system = '
                           'message.content %}{%- else %}{%- set _lf_late_system = '
                           "message.content | selectattr('text') | map(attribute='text') | "
                           "join('') %}{%- endif %}{{- '<|im_start|>system\\n' + _lf_late_system "
                           "| trim + '<|im_end|>\\n' -}}\n"
                           '{%- endif %}\n'
                           '```\n'
                           '\n'
                           'Everything else renders exactly as before (the first system message, '
                           'user turns, tool calls and\n'
                           "results). Checked against the fork's llama-server (build 9079): its "
                           '`/apply-template` output for the\n'
                           "fixed Qwen3.5 template equals llamafleet's rendering byte for byte, "
                           'and the original answers HTTP\n'
                           '500. The `llama_server` role does this at deploy time: where the '
                           "model's own template raises\n"
                           '(`llama_server_chat_template_fix`, on by default), it writes the '
                           'fixed copy to\n'
                           '`/etc/llamafleet/chat-templates/<instance>.jinja` (root-only), hands '
                           'it to the service as a systemd\n'
                           'credential (`--chat-template-file %d/chat-template`), records its\n'
                           'sha256 in the unit (a new template restarts the instance) and checks '
                           'the unit again with the copy;\n'
                           "`chat_template_fix: false` on an instance serves the model's template "
                           'as it is, and the preflight\n'
                           'then refuses it with this rule.\n',
            'suppress_details': 'It is deliberate when no Claude Code client uses this server.\n'},
           {'id': 'LS022',
            'name': 'chat-template-drops-late-system',
            'severity': 'warning',
            'scope': 'server',
            'message': '{origin} does not render the system message Claude Code sends after the '
                       'prompt where it was sent: {detail}',
            'why': 'Claude Code sends the agent types and the skills list as a "role": "system" '
                   "message after the user's prompt. A template that leaves it out (or moves it "
                   'into the first system message) renders without error, so nothing looks wrong: '
                   'the model cannot delegate to agents or use skills, and a new session appears '
                   'to reuse 99.8 % of its prompt where a template that renders the message in '
                   'place reuses 92.1 % (that message and the new prompt are new).',
            'fix': "Serve a template that renders every message where it was sent (the model's "
                   'official template with its guard rewritten: `llamafleet template fix`, or one '
                   "such as Qwen3-Coder's), with --jinja --chat-template-file FILE.",
            'needs': ['model'],
            'references': ['llamafleet measurement: Claude Code 2.1.197 against llama-server '
                           '(docs page)'],
            'needs_note': 'or a readable --chat-template-file',
            'rationale': "Claude Code 2.1.197 sends, after the user's prompt, a message with "
                         '`"role": "system"` holding the\n'
                         'agent types and the skills list; llama-server passes it to the chat '
                         'template unchanged. A template\n'
                         'that leaves it out renders without an error, so nothing looks wrong: '
                         'the model cannot delegate to\n'
                         'agents or use skills. Some re-quantized Qwen3.6 GGUFs carry such a '
                         'template. A template that moves\n'
                         'it (into the first system message, as the DeepSeek templates gather '
                         'every system message, or before\n'
                         'the conversation) shows the list out of order.\n'
                         '\n'
                         'The cache figures lie too. With a template that drops the message, a '
                         'new session seemed to reuse\n'
                         '99.8 % of its prompt; with one that renders it in place the honest '
                         'figure is 92.1 %: the new prompt\n'
                         'and that message (~1,600 tokens) are new each session.\n',
            'details': [{'title': 'The three behaviours',
                         'text': 'Measured with Claude Code 2.1.197 against a real llama-server '
                                 '(CPU, tiny model, the client\n'
                                 'settings the `claude_code` role writes):\n'
                                 '\n'
                                 '| template | what happens | run 2 (new session) | run 3 '
                                 '(`--continue`) |\n'
                                 '|---|---|---|---|\n'
                                 '| renders it in place (Qwen3-Coder, Qwen2.5, ChatML, a raising '
                                 'template with its guard rewritten) | works; the model sees the '
                                 'agent list | **92.1 %** (20962 tok, 1647 evaluated) | **99.8 '
                                 '%** |\n'
                                 '| raises (official Qwen3.5/Qwen3.6): LS021 | HTTP 500 on every '
                                 'request; Claude Code retries ten times (~3 min) and exits 1 | – '
                                 '| – |\n'
                                 '| drops it: **LS022** | works, but the model never sees the '
                                 'agent list | 99.8 % (false) | 99.8 % |\n'
                                 '\n'
                                 "Test cache reuse with the model's real template: one that drops "
                                 'or moves messages gives false\n'
                                 'numbers. See `llamafleet explain LS021` for how the template is '
                                 "rendered and which of llama.cpp's\n"
                                 'bundled templates do what.\n'}],
            'fix_details': 'Serve a template that renders every message where it was sent: the '
                           "model's official template (with\n"
                           'its guard rewritten by `llamafleet template fix` when it raises), or '
                           "one such as Qwen3-Coder's:\n"
                           '\n'
                           '```sh\n'
                           'llamafleet template check chat-template.jinja    # ok: renders the '
                           'late system message in place\n'
                           'llama-server -m q.gguf -c 131072 --jinja --chat-template-file '
                           'chat-template.jinja\n'
                           '```\n'},
           {'id': 'LS023',
            'name': 'chat-template-unrenderable',
            'severity': 'error',
            'scope': 'server',
            'message': '{origin} cannot be rendered with a Claude Code conversation ({reason}): '
                       "llama-server refuses it at start-up or fails Claude Code's requests",
            'why': 'llama-server renders every request through the chat template (with --jinja, '
                   'the default). A template with a syntax error stops the server at start-up; '
                   'one that fails on a conversation with tools, a tool call and a tool result '
                   'fails every Claude Code request with an error. llamafleet renders it with '
                   "jinja2 as llama.cpp's engine renders it, in a sandbox.",
            'fix': "Use the model's official template (--chat-template-file FILE), or fix the "
                   'template; `llamafleet template check FILE` shows the failure.',
            'needs': ['model'],
            'references': ['llama.cpp common/jinja (the template engine), common/chat.cpp'],
            'needs_note': 'or a readable --chat-template-file',
            'rationale': 'llama-server renders every chat request through the chat template (with '
                         '`--jinja`, the default). A\n'
                         'template with a syntax error stops the server at start-up (`failed to '
                         'initialize chat template`);\n'
                         'one that fails on a conversation with tools, a tool call and a tool '
                         'result (a template without a\n'
                         'tool role, one that needs a helper or variable llama.cpp does not '
                         'provide) fails every Claude Code\n'
                         'request with HTTP 500, and Claude Code retries ten times (~3 minutes), '
                         'then exits 1.\n'
                         '\n'
                         'llamafleet renders the template with jinja2 in a sandbox, set up as '
                         "llama.cpp's engine (see\n"
                         "`llamafleet explain LS021`), first without Claude Code's late system "
                         'message: this rule is about a\n'
                         'template that fails even then. One that fails only on the late message '
                         'is LS021.\n',
            'details': [{'title': 'The three behaviours',
                         'text': 'For a template that renders, what it does with the system '
                                 'message Claude Code 2.1.197 sends after\n'
                                 "the user's prompt decides the rest (measured against a real "
                                 'llama-server, CPU, tiny model):\n'
                                 '\n'
                                 '| template | what happens | run 2 (new session) | run 3 '
                                 '(`--continue`) |\n'
                                 '|---|---|---|---|\n'
                                 '| renders it in place | works | **92.1 %** of the prompt from '
                                 'the cache | **99.8 %** |\n'
                                 '| raises (official Qwen3.5/Qwen3.6): LS021 | HTTP 500 on every '
                                 'request | – | – |\n'
                                 '| drops it: LS022 | works, the model never sees the agent list '
                                 '| 99.8 % (false) | 99.8 % |\n'}],
            'fix_details': "Use the model's official template, or fix this one; `llamafleet "
                           'template check FILE` shows the\n'
                           'failure (FILE: the template, the GGUF or its `llamafleet inspect` '
                           'JSON):\n'
                           '\n'
                           '```sh\n'
                           'llamafleet template check q.gguf\n'
                           'llama-server -m q.gguf -c 131072 --jinja --chat-template-file '
                           'chat-template.jinja\n'
                           '```\n',
            'suppress_details': 'A template that llama.cpp renders but this check cannot (a '
                                "construct of llama.cpp's engine that\n"
                                'jinja2 lacks) is a false alarm: suppress it with the reason.\n'},
           {'id': 'CC001',
            'name': 'attribution-header-on',
            'severity': 'error',
            'scope': 'client',
            'message': 'Claude Code sends a per-prompt billing header to {base_url}: set '
                       'env.CLAUDE_CODE_ATTRIBUTION_HEADER to "0"',
            'why': 'System block 0 of every request is `x-anthropic-billing-header: '
                   'cc_version=...; ...` with a hash of the first user message: it changes with '
                   "every new prompt at character ~47, so the server's prefix cache matches "
                   'almost nothing and re-reads the whole ~20K-token prompt.',
            'fix': 'Add "CLAUDE_CODE_ATTRIBUTION_HEADER": "0" to the "env" block of '
                   'settings.json.',
            'references': ['llamafleet measurement: Claude Code 2.1.197 against llama-server '
                           '(docs page)'],
            'details': [{'title': 'Measured',
                         'text': 'Claude Code 2.1.197 against a real llama-server (CPU, tiny '
                                 'model): two consecutive `claude -p`\n'
                                 'runs with different prompts, a tracked file edited between '
                                 "them. Share of run 2's main prompt\n"
                                 "served from the server's cache:\n"
                                 '\n'
                                 '| client settings | server | run 2 prompt | reused | prompt '
                                 'eval run 1 → run 2 |\n'
                                 '|---|---|---|---|---|\n'
                                 '| defaults | `-np 1 --cache-ram 8192` | 22305 tok | 0.1 % | '
                                 '2816 → 2831 ms |\n'
                                 '| `CLAUDE_CODE_ATTRIBUTION_HEADER=0` only | same | 22269 | 0.1 '
                                 '% | 3177 → 2856 ms |\n'
                                 '| header off + `includeGitInstructions: false` + '
                                 '`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` + fixed model '
                                 'names | same | 19345 | 99.8 % | 2236 → 100 ms |\n'
                                 '| same | 4 auto slots, `--cache-ram 0` | 19366 | 99.8 % | 2286 '
                                 '→ 74 ms |\n'
                                 '\n'
                                 'Only the three client fixes together make the prefix '
                                 'byte-stable: 2236 ms of prompt evaluation\n'
                                 'becomes 100 ms. On a real 94,000-token session that is 28 s '
                                 'against 0.1 s per turn.\n'}]},
           {'id': 'CC002',
            'name': 'git-status-in-prompt',
            'severity': 'warning',
            'scope': 'client',
            'message': 'the git status snapshot is in the system prompt{detail}',
            'why': 'The end of the system prompt holds a gitStatus snapshot that changes with '
                   'every repository change, and it sits before the tools in the rendered prompt: '
                   'the cached prefix ends there. Measured with the header already off: 0.1 % of '
                   'a 22K-token prompt reused.',
            'fix': 'Set "includeGitInstructions": false in settings.json (or env '
                   'CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1).',
            'references': ['llamafleet measurement: Claude Code 2.1.197 against llama-server '
                           '(docs page)'],
            'details': [{'title': 'Measured',
                         'text': 'Claude Code 2.1.197 against a real llama-server (CPU, tiny '
                                 'model): two consecutive `claude -p`\n'
                                 'runs with different prompts, a tracked file edited between '
                                 "them. Share of run 2's main prompt\n"
                                 "served from the server's cache:\n"
                                 '\n'
                                 '| client settings | server | run 2 prompt | reused | prompt '
                                 'eval run 1 → run 2 |\n'
                                 '|---|---|---|---|---|\n'
                                 '| defaults | `-np 1 --cache-ram 8192` | 22305 tok | 0.1 % | '
                                 '2816 → 2831 ms |\n'
                                 '| `CLAUDE_CODE_ATTRIBUTION_HEADER=0` only | same | 22269 | 0.1 '
                                 '% | 3177 → 2856 ms |\n'
                                 '| header off + `includeGitInstructions: false` + '
                                 '`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` + fixed model '
                                 'names | same | 19345 | 99.8 % | 2236 → 100 ms |\n'
                                 '| same | 4 auto slots, `--cache-ram 0` | 19366 | 99.8 % | 2286 '
                                 '→ 74 ms |\n'
                                 '\n'
                                 'Only the three client fixes together make the prefix '
                                 'byte-stable: 2236 ms of prompt evaluation\n'
                                 'becomes 100 ms. On a real 94,000-token session that is 28 s '
                                 'against 0.1 s per turn.\n'},
                        {'title': 'Why the header alone is not enough',
                         'text': 'The git status sits before the tools in the rendered prompt, so '
                                 'the shared prefix ends at the first\n'
                                 'changed line of `gitStatus:`. This rule is an **error** when '
                                 "the base URL is not Anthropic's and\n"
                                 "**info** against Anthropic's own API, where the server side "
                                 "caching is not the user's problem.\n"}]},
           {'id': 'CC003',
            'name': 'env-key-at-top-level',
            'severity': 'error',
            'scope': 'client',
            'message': '{key} at the top level of settings.json is ignored; only the "env" block '
                       'counts{detail}',
            'why': 'Claude Code reads environment settings only from the "env" object. A '
                   'top-level ANTHROPIC_BASE_URL is ignored: the CLI goes to the public Anthropic '
                   'API and sends your key there.',
            'fix': 'Move "{key}" into the "env" object (the claude_code role does this with a '
                   'backup).',
            'references': ['https://docs.anthropic.com/en/docs/claude-code/settings']},
           {'id': 'CC004',
            'name': 'base-url-v1-suffix',
            'severity': 'error',
            'scope': 'client',
            'message': 'ANTHROPIC_BASE_URL {base_url} ends in /v1: Claude Code requests '
                       '/v1/v1/messages (404)',
            'why': 'Claude Code appends /v1/messages to the base URL itself.',
            'fix': 'Use the server root, e.g. {suggested}.',
            'references': ['llamafleet measurement: Claude Code 2.1.197 request paths']},
           {'id': 'CC005',
            'name': 'base-url-without-credentials',
            'severity': 'error',
            'scope': 'client',
            'message': 'ANTHROPIC_BASE_URL is set but no ANTHROPIC_AUTH_TOKEN, ANTHROPIC_API_KEY '
                       'or apiKeyHelper: Claude Code prints "Not logged in" and exits',
            'why': 'Claude Code needs a credential before it sends any request; '
                   'ANTHROPIC_AUTH_TOKEN is sent as Authorization: Bearer, ANTHROPIC_API_KEY as '
                   'x-api-key (llama-server accepts both).',
            'fix': 'Add "ANTHROPIC_AUTH_TOKEN": "<the server\'s API key>" to the env block (mode '
                   '0600 file).',
            'references': ['llama.cpp tools/server/server-http.cpp']},
           {'id': 'CC006',
            'name': 'nonessential-traffic-differs',
            'severity': 'warning',
            'scope': 'client',
            'message': 'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC is {value} here but {other} in '
                       '{other_file}: the tool list, and so the prompt prefix, differs',
            'why': 'The variable removes a whole tool from the prompt. Clients that share a '
                   "server with different values send different prefixes and evict each other's "
                   'cache.',
            'fix': 'Set the same value everywhere, e.g. '
                   '"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1" in managed settings.',
            'references': ['llamafleet measurement: Claude Code 2.1.197 (docs page)']},
           {'id': 'CC007',
            'name': 'settings-invalid',
            'severity': 'error',
            'scope': 'client',
            'message': '{detail}',
            'why': 'Claude Code ignores a settings file it cannot parse (or a key of the wrong '
                   'type), so none of its env settings apply and requests go to the public API.',
            'fix': '{hint}',
            'references': ['https://docs.anthropic.com/en/docs/claude-code/settings']},
           {'id': 'CC008',
            'name': 'token-file-readable',
            'severity': 'warning',
            'scope': 'client',
            'message': 'holds {key} but is readable by {who} (mode {mode})',
            'why': 'The token gives access to the server (and to the Anthropic API for '
                   'ANTHROPIC_API_KEY).',
            'fix': 'chmod 600 {file}',
            'references': ['llamafleet security notes']},
           {'id': 'CC009',
            'name': 'title-request-takes-slot',
            'severity': 'warning',
            'scope': 'client',
            'message': "Claude Code's session-title side request goes to {base_url} before the "
                       'main request{detail}',
            'why': 'Unless CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, every session first sends '
                   'a short title request (no tools, ~450 tokens) with the main model (or '
                   'ANTHROPIC_DEFAULT_HAIKU_MODEL). On a server with one slot it takes that slot '
                   'first, and the RAM prompt cache declines to restore a saved prompt of which '
                   'less than 25 % would be kept: the main prompt is re-read.',
            'fix': 'Set env CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1" fleet-wide, or give the '
                   'server several slots with a unified KV cache (-np 2+ --kv-unified, or the '
                   'default auto).',
            'references': ['llamafleet measurement: Claude Code 2.1.197 against llama-server '
                           '(docs page)'],
            'details': [{'title': 'Measured',
                         'text': 'Claude Code 2.1.197 against a real llama-server (CPU, tiny '
                                 'model): two consecutive `claude -p`\n'
                                 'runs with different prompts, a tracked file edited between '
                                 "them. Share of run 2's main prompt\n"
                                 "served from the server's cache:\n"
                                 '\n'
                                 '| client settings | server | run 2 prompt | reused | prompt '
                                 'eval run 1 → run 2 |\n'
                                 '|---|---|---|---|---|\n'
                                 '| defaults | `-np 1 --cache-ram 8192` | 22305 tok | 0.1 % | '
                                 '2816 → 2831 ms |\n'
                                 '| `CLAUDE_CODE_ATTRIBUTION_HEADER=0` only | same | 22269 | 0.1 '
                                 '% | 3177 → 2856 ms |\n'
                                 '| header off + `includeGitInstructions: false` + '
                                 '`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` + fixed model '
                                 'names | same | 19345 | 99.8 % | 2236 → 100 ms |\n'
                                 '| same | 4 auto slots, `--cache-ram 0` | 19366 | 99.8 % | 2286 '
                                 '→ 74 ms |\n'
                                 '\n'
                                 'Only the three client fixes together make the prefix '
                                 'byte-stable: 2236 ms of prompt evaluation\n'
                                 'becomes 100 ms. On a real 94,000-token session that is 28 s '
                                 'against 0.1 s per turn.\n'},
                        {'title': 'Why a single slot makes it an error',
                         'text': 'The session-title side request (no tools, ~450 tokens) reaches '
                                 'the server first and takes the only\n'
                                 'slot; the main request then finds its slot holding the title '
                                 'prompt, and the RAM prompt cache\n'
                                 'declines to restore a saved prompt of which less than 25 % '
                                 'would be kept. With several slots\n'
                                 '(unified KV), a new prompt sharing < 10 % with every slot goes '
                                 'to an empty slot, so the main prompt\n'
                                 'survives.\n'
                                 '\n'
                                 'Remedies, either is enough:\n'
                                 '\n'
                                 '1. `"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"` in every '
                                 "client's env (best in\n"
                                 '   `/etc/claude-code/managed-settings.json`, so it is the same '
                                 'on every machine: see CC006);\n'
                                 '2. more slots with a unified KV cache: leave `-np` at auto (4 '
                                 'slots, unified) or use\n'
                                 '   `-np 2 --kv-unified`.\n'
                                 '\n'
                                 'Setting `ANTHROPIC_DEFAULT_HAIKU_MODEL` changes the model name '
                                 'in the side request, not where it goes:\n'
                                 'a single-model llama-server serves it on the same slots.\n'}]},
           {'id': 'CC010',
            'name': 'key-over-plain-http',
            'severity': 'error',
            'scope': 'client',
            'message': 'ANTHROPIC_BASE_URL {base_url} is plain http to {host}, which is not '
                       'loopback, and the client sends {key}: the key and every prompt cross the '
                       'network unencrypted',
            'why': 'Claude Code sends its key in every request (Authorization: Bearer or '
                   'X-Api-Key) together with the whole prompt: the system prompt, the files it '
                   'read, the command output and the answers. Over http anyone on the path '
                   '(another host on the network, a switch, a Wi-Fi access point) reads them, can '
                   'reuse the key against the server, and can change the answers, which Claude '
                   'Code then acts on. Loopback traffic (localhost, 127.0.0.0/8, ::1) never '
                   'leaves the machine.',
            'fix': 'Serve the instance over TLS (llama_server_tls, or llama-server '
                   '--ssl-key-file/--ssl-cert-file) and set ANTHROPIC_BASE_URL to {https_url}, '
                   "trusting the server's CA with env NODE_EXTRA_CA_CERTS=<CA file> (the "
                   'claude_code role installs the CA and sets it); or reach the server through an '
                   'SSH tunnel to a loopback address.',
            'references': ['llamafleet security notes',
                           'https://nodejs.org/api/cli.html#node_extra_ca_certsfile'],
            'rationale': 'Claude Code sends its key with every request (`Authorization: Bearer` '
                         'for `ANTHROPIC_AUTH_TOKEN`,\n'
                         "`X-Api-Key` for `ANTHROPIC_API_KEY` or an `apiKeyHelper`'s key) "
                         'together with the whole prompt: the\n'
                         'system prompt, every file it read, command output and the answers so '
                         'far. Over `http://` anyone on\n'
                         'the path (another host on the network, a switch, a Wi-Fi access point) '
                         'can read all of it, reuse the\n'
                         'key against the server, and change the answers, which Claude Code then '
                         'acts on (it runs commands\n'
                         'and edits files on the strength of them).\n'
                         '\n'
                         'Traffic to a loopback address (`localhost`, `127.0.0.0/8`, `::1`) never '
                         'leaves the machine, so a\n'
                         "client on the server's own host may use `http://127.0.0.1:PORT`. A "
                         'client without a key is not\n'
                         'reported here (CC005 and XC002 are about that).\n',
            'fix_details': 'Serve the instance over TLS and point the client at `https://`:\n'
                           '\n'
                           '- with the `llama_server` role: leave `llama_server_tls` at `auto` '
                           '(TLS for every instance that\n'
                           "  does not listen on loopback) or set the instance's `tls: true`; the "
                           'role makes a CA and a\n'
                           '  certificate for the instance;\n'
                           '- by hand: `llama-server --ssl-key-file key.pem --ssl-cert-file '
                           'cert.pem` (llama.cpp built with\n'
                           '  OpenSSL, `-DLLAMA_OPENSSL=ON`).\n'
                           '\n'
                           'Claude Code is a Node.js program: it trusts a private CA through '
                           '`NODE_EXTRA_CA_CERTS`, which may be\n'
                           "set in the settings' `env`. The `claude_code` role installs the "
                           "server's CA as\n"
                           '`/etc/llamafleet/ca/<server>-<instance>.pem` and sets both entries.\n'
                           '\n'
                           'Without TLS, reach the server through a tunnel that ends on loopback, '
                           'e.g.\n'
                           '`ssh -N -L 8080:127.0.0.1:8080 gpu-01` and '
                           '`ANTHROPIC_BASE_URL=http://127.0.0.1:8080`.\n',
            'suppress_details': 'It is deliberate on an isolated network you trust. The '
                                '`claude_code` role refuses such a\n'
                                'target unless `claude_code_allow_plain_http` is true, and then '
                                'skips this rule in its own check.\n',
            'examples': {'pass': ['https', 'loopback address']}},
           {'id': 'XC001',
            'name': 'client-server-mismatch',
            'severity': 'error',
            'scope': 'cross',
            'message': 'ANTHROPIC_BASE_URL {base_url} does not point at the server checked with '
                       'it ({servers})',
            'why': 'The client talks to another address or port than the server it is configured '
                   'for, or uses http:// against a server that serves TLS '
                   '(--ssl-key-file/--ssl-cert-file) or https:// against one that does not: its '
                   'requests fail, or reach a different server.',
            'fix': '{remedy}',
            'needs': ['server'],
            'references': ['llamafleet'],
            'rationale': 'The client talks to another address or port than the server it is '
                         'configured for, or uses\n'
                         '`http://` against a server that serves TLS (`--ssl-key-file` and '
                         '`--ssl-cert-file`) or `https://`\n'
                         'against one that does not: its requests fail, or reach a different '
                         'server. An `https://` URL without\n'
                         'a port means port 443, `http://` port 80.\n',
            'fix_details': "Set ANTHROPIC_BASE_URL to the server's address and port, e.g. "
                           '`http://127.0.0.1:8080` (no `/v1`).\n'
                           '\n'
                           "When the server listens on a loopback address only and the client's "
                           'URL names another address, no\n'
                           "URL reaches it from that machine: run Claude Code on the server's "
                           'host with\n'
                           '`ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`, or make the server listen '
                           'on an address the client\n'
                           'reaches (`--host`, with `--api-key-file`) and point the URL there. '
                           '`playbooks/audit.yml` checks each\n'
                           "user's settings with the units of the server their URL names, so it "
                           'reports this across hosts.\n'
                           '\n'
                           'When the address and port match but the scheme does not, use the '
                           "server's scheme: `https://` for a\n"
                           'server with a certificate (and trust its CA: `NODE_EXTRA_CA_CERTS=<CA '
                           "file>` in the settings' `env`;\n"
                           'the `claude_code` role installs the CA and sets it), `http://` for '
                           'one without (or give it a\n'
                           'certificate: `llama_server_tls`).\n'},
           {'id': 'XC002',
            'name': 'client-missing-server-key',
            'severity': 'error',
            'scope': 'cross',
            'message': '{server} requires an API key but the client {detail}',
            'why': 'llama-server answers 401 to requests without the key (Authorization: Bearer '
                   'or X-Api-Key).',
            'fix': "Set env.ANTHROPIC_AUTH_TOKEN to the server's key (the claude_code role reads "
                   'it from the llama_server role).',
            'needs': ['server'],
            'references': ['llama.cpp tools/server/server-http.cpp'],
            'rationale': 'llama-server answers 401 to requests without the key (Authorization: '
                         'Bearer or X-Api-Key).\n'
                         '\n'
                         'A key in a file (`--api-key-file PATH`, or a systemd credential '
                         '`LoadCredential=api-key:PATH` read\n'
                         'as `%d/api-key`) is compared only when the check may open it: the '
                         'validator opens no file named\n'
                         'inside its inputs unless told to, since a unit may come from another '
                         'machine. Give\n'
                         '`--referenced-dir DIR` (the file is read as `DIR/<basename>`, e.g. a '
                         'directory of key copies) or\n'
                         '`--read-referenced` (the path as named, on this machine). Without '
                         'either, a server with a key file\n'
                         'and a client that sends some key is not reported; a client that sends '
                         'no key still is.\n',
            'examples': {'pass': ['same key']}},
           {'id': 'XC003',
            'name': 'compact-window-above-slot',
            'severity': 'warning',
            'scope': 'cross',
            'message': 'the client {what}, but {server} gives each request {slot} tokens '
                       '({slot_detail}): once the conversation outgrows the slot, every request '
                       'is rejected',
            'why': 'Claude Code 2.1.197 assumes a 200K-token window for a model it does not know '
                   '(every llama-server alias) and, without CLAUDE_CODE_AUTO_COMPACT_WINDOW, '
                   'compacts only when the API answers "prompt is too long", which llama-server '
                   'never says: it answers "request (N tokens) exceeds the available context '
                   'size". With the variable (raised to 100,000 when lower) it compacts 33,000 '
                   'tokens below min(200,000, the variable). A server whose slot is smaller than '
                   'that window rejects every request of a conversation that outgrew the slot, '
                   'and /compact cannot help then (the summary request is just as long): only '
                   '/clear does.',
            'fix': '{remedy}',
            'needs': ['server'],
            'references': ['Claude Code 2.1.197 (autocompact window: '
                           'CLAUDE_CODE_AUTO_COMPACT_WINDOW, autoCompactWindow)',
                           'llama.cpp tools/server/server-context.cpp '
                           '(exceed_context_size_error), src/llama-context.cpp (n_ctx_seq)'],
            'rationale': "A llama-server instance gives each request at most one slot's context, "
                         "llama.cpp's `n_ctx_seq`:\n"
                         '`--ctx-size` (padded to 256) when the slots share a unified KV cache '
                         '(the default when `-np` is\n'
                         'auto, or `--kv-unified`), else `--ctx-size / --parallel` (padded to '
                         '256). `-c 0` or no `-c` is the\n'
                         "model's training context (only known when the model's facts are given; "
                         '`--fit` may then shrink\n'
                         'it), and a slot is capped at the training context when that is known '
                         '(upstream caps it; the\n'
                         'TurboQuant fork keeps the larger slot and relies on rope scaling). The '
                         'validator counts it as the\n'
                         "planner does (`llamafleet plan`: `n_ctx_seq`). The project's 16 GB "
                         'plan, `-c 180224` with four\n'
                         'auto slots sharing the cache, gives each request 180,224 tokens; `-c '
                         '204800 -np 4` without\n'
                         '`--kv-unified` gives 51,200. A request longer than the slot is refused '
                         'with HTTP 400, `request (N\n'
                         'tokens) exceeds the available context size (M tokens), try increasing '
                         'it`.\n'
                         '\n'
                         'Claude Code decides when to compact (summarise) a conversation from its '
                         'own idea of the window,\n'
                         "not from the server's. Read in Claude Code 2.1.197 (the version the "
                         '`claude_code` role pins):\n'
                         '\n'
                         '- For a model it does not know (every llama-server alias) the window is '
                         '**200,000 tokens**.\n'
                         '- Without `CLAUDE_CODE_AUTO_COMPACT_WINDOW` (or the `autoCompactWindow` '
                         'setting) it does not\n'
                         '  compact ahead of time: it waits for the API to answer `prompt is too '
                         'long`. llama-server never\n'
                         '  answers that, so the conversation grows until the server refuses '
                         'every request. `/compact` does\n'
                         '  not help then (the summary request carries the whole conversation, so '
                         'it is refused too): only\n'
                         "  `/clear` does, and the session's context is lost.\n"
                         '- With `CLAUDE_CODE_AUTO_COMPACT_WINDOW=N` the window is `min(200000, '
                         'N)`, where N is parsed like\n'
                         "  JavaScript's `parseInt` (0, negative or not a number: ignored), "
                         '**raised to 100,000** when lower\n'
                         '  and capped at 1,000,000. The environment variable wins over the '
                         '`autoCompactWindow` setting (an\n'
                         '  integer from 100,000 to 1,000,000, else ignored) and over '
                         '`/autocompact`.\n'
                         '- It compacts **33,000 tokens below the window**: min(max output '
                         'tokens, 20,000) kept for the\n'
                         '  summary plus a 13,000-token buffer. So it never compacts before '
                         '67,000 tokens.\n'
                         '- Its answers ask for `max_tokens` 32,000 for a model it does not know '
                         '(up to 64,000 on other\n'
                         "  models); llama-server caps a request's output at what is left of the "
                         'slot.\n'
                         '\n'
                         'This rule compares the window Claude Code will use with the slot of the '
                         'server the client points\n'
                         'at (matched by address and port, as XC001 and XC002 do): a window above '
                         'the slot lets the\n'
                         'conversation outgrow the slot before Claude Code compacts it. '
                         '`DISABLE_AUTO_COMPACT`,\n'
                         '`DISABLE_COMPACT` or `"autoCompactEnabled": false` switch compaction '
                         'off; without it Claude Code\n'
                         'stops a conversation short of its own 200,000-token window, so that is '
                         'reported when the slot is\n'
                         'smaller.\n'
                         '\n'
                         'A safe window is the slot less room for the answer: the `claude_code` '
                         'role writes\n'
                         '`CLAUDE_CODE_AUTO_COMPACT_WINDOW` = slot − `claude_code_output_reserve` '
                         '(32,000: one full answer of\n'
                         'a model Claude Code does not know), at least 100,000 (what Claude Code '
                         'takes anyway), by default\n'
                         '(`claude_code_auto_compact_window: auto`), from the per-slot context of '
                         'the instance the user is\n'
                         'pointed at. When Claude Code compacts, at least the reserve is then '
                         'free in the slot (and, for a\n'
                         'window above 100,000, its own 33,000-token margin more, for the tool '
                         'output of the turn that\n'
                         'crosses the threshold). A slot below 100,000 tokens cannot hold Claude '
                         "Code's smallest window: the\n"
                         "role refuses it, and this rule's fix asks for a larger slot.\n"
                         '\n'
                         '**Severity: warning, not error.** Every request works until a '
                         'conversation outgrows the slot, so\n'
                         'short sessions never see it, while XC001 and XC002 break the first '
                         'request. The window also follows\n'
                         'the Claude Code version (a later one may know the model or change its '
                         'constants) and a slot capped\n'
                         'at the training context differs between builds, so this is a '
                         'prediction, not a certainty. Long\n'
                         'agentic sessions do reach it: treat it as an error for a fleet '
                         '(`--fail-on warning`, or\n'
                         '`severity: {XC003: error}` in `.llamafleet.yaml`).\n',
            'fix_details': 'Set `env.CLAUDE_CODE_AUTO_COMPACT_WINDOW` to the slot less 32,000 '
                           'tokens for the answer, at least\n'
                           '100,000 (Claude Code raises a smaller value to 100,000 anyway); with '
                           'the `claude_code` role leave\n'
                           '`claude_code_auto_compact_window: auto` (the default) and it does so '
                           'for the instance each user is\n'
                           'pointed at. Or give each request a larger slot: a larger `-c`, `-np '
                           '1`, or `--kv-unified` so each\n'
                           'request may use the whole cache. A slot below 100,000 tokens needs '
                           'that: Claude Code takes no window\n'
                           'below 100,000 and compacts 33,000 below it, so never before 67,000 '
                           'tokens.\n'
                           '\n'
                           'For a slot of 131,072 tokens that is 131,072 − 32,000 = 99,072, '
                           'written as the 100,000 Claude\n'
                           'Code takes: it compacts near 67,000 tokens, far inside the slot (the '
                           'example below).\n'},
           {'id': 'SD001',
            'name': 'mlock-without-limit',
            'severity': 'error',
            'scope': 'unit',
            'message': '{option} in a unit without LimitMEMLOCK=infinity: mlock fails and the '
                       'model stays swappable',
            'why': 'Without CAP_IPC_LOCK a service is limited by RLIMIT_MEMLOCK (usually 8 MiB); '
                   'llama-server prints `failed to mlock ... Try increasing RLIMIT_MEMLOCK` and '
                   'runs unlocked.',
            'fix': 'Add LimitMEMLOCK=infinity to [Service].',
            'references': ['systemd.exec(5)']},
           {'id': 'SD002',
            'name': 'unit-runs-as-root',
            'severity': 'warning',
            'scope': 'unit',
            'message': 'the unit has no User= (or User=root): llama-server runs as root',
            'why': 'llama-server parses untrusted prompts, templates and files; as root a bug is '
                   'a host compromise.',
            'fix': 'Add User=llama (a system user) or DynamicUser=yes.',
            'references': ['systemd.exec(5)']},
           {'id': 'SD003',
            'name': 'unit-without-restart',
            'severity': 'warning',
            'scope': 'unit',
            'message': 'the unit has no Restart= policy: a crash leaves the server down',
            'why': 'llama-server can crash under load (e.g. GPU OOM); without Restart= it stays '
                   'down until someone notices.',
            'fix': 'Add Restart=on-failure and RestartSec=5.',
            'references': ['systemd.service(5)']},
           {'id': 'SD004',
            'name': 'unit-escapes-sandbox',
            'severity': 'error',
            'scope': 'unit',
            'message': 'the unit escapes its sandbox: {directive} on line {line} {detail}',
            'why': "A unit's sandbox holds only if nothing after it takes it back: an Exec*= "
                   'command prefixed with + (or ! / !!) runs as root outside the sandbox, a later '
                   'NoNewPrivileges=no, ProtectSystem=no, PrivateDevices=no, User=root or a '
                   'non-empty CapabilityBoundingSet= undoes the hardening set before it, and '
                   'AmbientCapabilities= hands capabilities to the service. A second [Service] '
                   '(or [Unit]/[Install]) header is what a value with a newline leaves when it is '
                   'rendered into a unit: everything after it was injected.',
            'fix': 'Remove {key} from the unit (for the llama_server role: from '
                   'llama_server_unit_extra); if a privileged step is really needed, put it in a '
                   'drop-in you own (/etc/systemd/system/<unit>.d/*.conf), not in the generated '
                   'unit.',
            'references': ['systemd.service(5) (ExecStart= prefixes)', 'systemd.exec(5)'],
            'rationale': "A unit's sandbox holds only if nothing in the unit takes it back. SD004 "
                         'reports:\n'
                         '\n'
                         '- an `Exec*=` command (`ExecCondition=`, `ExecStartPre=`, `ExecStart=`, '
                         '`ExecStartPost=`,\n'
                         '  `ExecReload=`, `ExecStop=`, `ExecStopPost=`) with the prefix `+` '
                         '(runs as root with full\n'
                         '  privileges, outside every sandboxing option), `!` or `!!` (runs '
                         "without the unit's `User=` and\n"
                         '  capability limits);\n'
                         '- a second `[Service]` (or `[Unit]`, `[Install]`, any section) header '
                         'in one file: systemd merges\n'
                         '  it silently, and it is the shape a rendered value with a newline '
                         'leaves behind;\n'
                         '- hardening undone by a later line: `NoNewPrivileges=no` (or any of '
                         '`PrivateTmp=`,\n'
                         '  `ProtectKernel*=`, `ProtectControlGroups=`, `ProtectClock=`, '
                         '`ProtectHostname=`,\n'
                         '  `RestrictRealtime=`, `RestrictSUIDSGID=`, `LockPersonality=`, '
                         '`MemoryDenyWriteExecute=`,\n'
                         '  `RestrictNamespaces=` set to no or reset with an empty value) after '
                         'it was on;\n'
                         '  `ProtectSystem=`/`ProtectHome=` lowered after a stronger value; '
                         '`PrivateDevices=no` after\n'
                         '  `yes` unless `DevicePolicy=closed|strict` or `DeviceAllow=` narrows '
                         'the devices;\n'
                         '  `CapabilityBoundingSet=` with capabilities after the empty set; '
                         '`User=root` (or `User=`)\n'
                         '  after a non-root user;\n'
                         "- `AmbientCapabilities=` that is not empty in the end: the service's "
                         'processes get those\n'
                         '  capabilities.\n'
                         '\n'
                         'In systemd the last assignment wins, so one extra line after the '
                         'hardening block undoes it.\n'
                         'The `llama_server` role therefore renders `llama_server_unit_extra` '
                         'before its hardening block,\n'
                         'refuses values with control characters, and its preflight runs this '
                         'rule on the rendered unit.\n'
                         '\n'
                         '### The injection this rule was written for\n'
                         '\n'
                         "The role put a model's sha256 from `metadata.json` into a comment line. "
                         'A `metadata.json` whose\n'
                         '`sha256` was `"0123…\\n[Service]\\nExecStartPre=+/bin/sh -c \'id > '
                         '/root/pwned\'"` rendered as:\n'
                         '\n'
                         '```ini\n'
                         '# model: /srv/models/q/q.gguf sha256 0123…\n'
                         '[Service]\n'
                         "ExecStartPre=+/bin/sh -c 'id > /root/pwned'\n"
                         '[Unit]\n'
                         'Description=llama-server main (q.gguf)\n'
                         '...\n'
                         '```\n'
                         '\n'
                         'The comment ended at the newline; systemd read a `[Service]` section '
                         'with a command run as root\n'
                         'before the sandboxed server. SD004 reports both the second `[Service]` '
                         'header and the `+` prefix.\n',
            'fix_details': 'Remove the directive from the unit (for the `llama_server` role: '
                           'from\n'
                           '`llama_server_unit_extra`); if a privileged step is really needed, '
                           'put it in a drop-in you own\n'
                           '(`/etc/systemd/system/<unit>.d/*.conf`), not in the generated unit.\n',
            'examples': {'fail': ['an extra line after the hardening']}},
           {'id': 'BD001',
            'name': 'cuda-arch-mismatch',
            'severity': 'warning',
            'scope': 'build',
            'message': "the build's CUDA architectures ({archs}) do not include the GPU's compute "
                       'capability {cc} (sm_{sm}){detail}',
            'why': "Kernels not built for the GPU's architecture are JIT-compiled from PTX at "
                   'start-up (slow, sometimes missing); across a major version they do not run at '
                   'all.',
            'fix': 'Rebuild with -DCMAKE_CUDA_ARCHITECTURES={sm} (the llama_cpp role derives it '
                   'from nvidia-smi).',
            'needs': ['build', 'gpu'],
            'references': ['CUDA C++ Programming Guide: compute capabilities']},
           {'id': 'LF001',
            'name': 'suppression-without-reason',
            'severity': 'warning',
            'scope': 'meta',
            'message': 'suppression of {ids} has no reason',
            'why': 'A silenced pitfall without a reason cannot be reviewed later.',
            'fix': 'Write the reason after the bracket: # llamafleet: ignore[{ids}] why it is '
                   'safe here',
            'references': ['llamafleet docs: suppressions']},
           {'id': 'LF002',
            'name': 'input-not-understood',
            'severity': 'error',
            'scope': 'meta',
            'message': '{detail}',
            'why': 'A file that cannot be read as a llama-server command, unit or settings file '
                   'cannot be checked; silently skipping it would hide every pitfall in it.',
            'fix': '{hint}',
            'references': ['llamafleet docs: inputs']}]}
