#!/usr/bin/env python3
# ruff: noqa: E501  (the chat template below is data: its lines are as long as the template needs)
"""Write a tiny random-weight GGUF for tests (~6.5 MB, loads in a fraction of a second).

    make-tiny-model.py OUT.gguf [--arch llama|qwen35moe] [--gqa-ratio N]
                       [--chat-template-file FILE] [--seed N] [--context-length N]

No input file is needed: the script builds its own SentencePiece-style vocabulary
(``tokenizer.ggml.model = "llama"``): ``<unk>``, ``<s>``, ``</s>``, the 256 byte-fallback tokens
``<0x00>``..``<0xFF>``, pieces for common English words (with a leading space ``▁``, without it and
capitalised, plus plural/-ed/-ing forms), technical words, suffixes, code/JSON punctuation,
whitespace runs and digit pairs, and the ChatML control tokens ``<|im_start|>``/``<|im_end|>``.
Every prefix of every piece is also a piece, so llama.cpp's SPM bigram merging (which only merges
two adjacent symbols whose concatenation is in the vocabulary, highest score first) always reaches
the full piece. Scores are the piece length, so longer merges win. 38331 tokens. Measured with
the fork's llama-server /tokenize on 5000-character samples (this vocabulary / the 32K llama SPM
vocabulary): GPL-3 prose 4.19 / 4.08 and 4.49 / 4.37 chars per token, the project README 3.23 /
3.21, indented JSON 2.77 / 2.04, compact JSON 3.25 / 2.45, CMake's v143_CL.json 3.40 / 2.72.
Token embeddings and the output matrix are Q8_0, so the llama file is ~6.3 MB.

``--arch llama`` (default): 2 layers, n_embd 64, head_dim 32, 2 KV heads; ``--gqa-ratio N`` gives
2*N query heads (n_head / n_head_kv = N; head_dim stays 32, so ``attention.key_length`` is written),
e.g. 6 to trigger the TurboQuant fork's automatic q8_0 K for symmetric turbo K/V.
The weights are random except for one planted direction: every token embedding carries a constant
component in dimension 0, the token "OK" also one in dimension 1, and the output layer reads only
those two dimensions for "OK" and end-of-sequence. Whatever the prompt, the model answers "OK" and
then stops, so a client that asks for 64000 tokens still gets a short answer.

``--arch qwen35moe``: the hybrid architecture of Qwen3.5/3.6-35B-A3B as llama.cpp defines it
(src/llama-model.cpp, src/models/qwen35moe.cpp): 8 blocks, every 4th full attention (16 query
heads, 2 KV heads, head_dim 64, gated Q, Q/K norms, IMRoPE over 16 dims), the others gated
delta-net layers (conv kernel 4, 2 key heads and 4 value heads of 128, i.e. ssm.inner_size 512),
every block a MoE FFN with 4 experts (2 used) plus a gated shared expert; tied embeddings.
Head ratio 8 (as the real model) triggers the fork's automatic q8_0 K for symmetric turbo types,
and 8 blocks its "Boundary V" for a turbo2 V. Random weights: it loads and serves, its output is
noise.

The output is deterministic for a given seed and options: the same bytes (and sha256) on every
machine with the same gguf-py (0.19.0 here) and numpy's default generator (PCG64).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

SP = "\u2581"  # SentencePiece's space marker

# Common English words, roughly by frequency (each also gets its capitalised form and, for
# lower-case alphabetic words, plural, -ed and -ing forms).
WORDS = """
the of and to a in is it you that he was for on are with as I his they be at one have this from or
had by not word but what some we can out other were all there when up use your how said an each she
which do their time if will way about many then them write would like so these her long make thing
see him two has look more day could go come did number sound no most people my over know water than
call first who may down side been now find any new work part take get place made live where after
back little only round man year came show every good me give our under name very through just form
sentence great think say help low line differ turn cause much mean before move right boy old too
same tell does set three want air well also play small end put home read hand port large spell add
even land here must big high such follow act why ask men change went light kind off need house
picture try us again animal point mother world near build self earth father head stand own page
should country found answer school grow study still learn plant cover food sun four between state
keep eye never last let thought city tree cross farm hard start might story saw far sea draw left
late run don't while press close night real life few north open seem together next white children
begin got walk example ease paper group always music those both mark often letter until mile river
car feet care second book carry took science eat room friend began idea fish mountain stop once
base hear horse cut sure watch color face wood main enough plain girl usual young ready above ever
red list though feel talk bird soon body dog family direct pose leave song measure door product
black short numeral class wind question happen complete ship area half rock order fire south
problem piece told knew pass since top whole king space heard best hour better true during hundred
five remember step early hold west ground interest reach fast verb sing listen six table travel
less morning ten simple several vowel toward war lay against pattern slow center love person money
serve appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall
lead cry dark machine note wait plan figure star box noun field rest correct able pound done beauty
drive stood contain front teach week final gave green oh quick develop ocean warm free minute
strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel
full force blue object decide surface deep moon island foot system busy test record boat common
gold possible plane stead dry wonder laugh thousand ago ran check game shape equate hot miss
brought heat snow tire bring yes distant fill east paint language among grand ball yet wave drop
heart am present heavy dance engine position arm wide sail material size vary settle speak weight
general ice matter circle pair include divide syllable felt perhaps pick sudden count square reason
length represent art subject region energy hunt probable bed brother egg ride cell believe fraction
forest sit race window store summer train sleep prove lone leg exercise wall catch mount wish sky
board joy winter sat written wild instrument kept glass grass cow job edge sign visit past soft fun
bright gas weather month million bear finish happy hope flower clothe strange gone jump baby eight
village meet root buy raise solve metal whether push seven paragraph third shall held hair describe
cook floor either result burn hill safe cat century consider type law bit coast copy phrase silent
tall sand soil roll temperature finger industry value fight lie beat excite natural view sense ear
else quite broke case middle kill son lake moment scale loud spring observe child straight
consonant nation dictionary milk speed method organ pay age section dress cloud surprise quiet
stone tiny climb cool design poor lot experiment bottom key iron single stick flat twenty skin
smile crease hole trade melody trip office receive row mouth exact symbol die least trouble shout
except wrote seed tone join suggest clean break lady yard rise bad blow oil blood touch grew cent
mix team wire cost lost brown wear garden equal sent choose fell fit flow fair bank collect save
control decimal gentle woman captain practice separate difficult doctor please protect noon whose
locate ring character insect caught period indicate radio spoke atom human history effect electric
expect crop modern element hit student corner party supply bone rail imagine provide agree thus
capital won't chair danger fruit rich thick soldier process operate guess necessary sharp wing
create neighbor wash bat rather crowd corn compare poem string bell depend meat rub tube famous
dollar stream fear sight thin triangle planet hurry chief colony clock mine tie enter major fresh
search send yellow gun allow print dead spot desert suit current lift rose arrive master track
parent shore division sheet substance favor connect post spend chord fat glad original share
station dad bread charge proper bar offer segment slave duck instant market degree populate chick
dear enemy reply drink occur support speech nature range steam motion path liquid log meant
quotient teeth shell neck oxygen sugar death pretty skill women season solution magnet silver thank
branch match suffix especially fig afraid huge sister steel discuss forward similar guide
experience score apple bought led pitch coat mass card band rope slip win dream evening condition
feed tool total basic smell valley nor double seat continue block chart hat sell success company
subtract event particular deal swim term opposite wife shoe shoulder spread arrange camp invent
cotton born determine quart nine truck noise level chance gather shop stretch throw shine property
column molecule select wrong gray repeat require broad prepare salt nose plural anger claim
continent its it's i'm i've i'd i'll you're you've you'll we're we've they're they've he's she's
that's there's what's let's isn't aren't wasn't weren't hasn't haven't hadn't doesn't didn't can't
couldn't wouldn't shouldn't however therefore because although within without around across along
upon into onto towards beyond below further used uses using user users useful usually makes making
takes taking taken gives giving given gets getting gotten runs running sets setting puts putting
keeps keeping finds finding shows showing shown calls calling called works working worked needs
needed needing wants wanted wanting tries tried trying asks asked asking seems seemed feels become
becomes became leaves leaving means meaning begins beginning begun helps helped helping changes
changed changing follows followed following includes included including provides provided providing
allows allowed allowing adds added adding creates created creating reads reading writes writing
opens opened opening closes closed closing starts started starting stops stopped stopping return
returns returned returning moves moved moving requires required requiring contains contained
containing apply applies applied applying remove removes removed removing checks checked checking
load loads loaded loading saves saved saving sends sending receives received receiving builds built
building tests tested testing install installs installed installing update updates updated updating
define defines defined defining describes described describing report reports reported reporting
considers considered considering expects expected expecting continues continued continuing produces
produced producing supports supported supporting happens happened happening appears appeared
appearing develops developed developing involve involves involved involving remain remains remained
remaining suggests suggested suggesting reaches reached reaching decides decided deciding explain
explains explained explaining understand understands understood understanding represents
represented representing determines determined determining improve improves improved improving
reduce reduces reduced reducing increase increases increased increasing limit limits limited
limiting depends depended depending exist exists existed existing refer refers referred referring
generate generates generated generating modify modifies modified modifying distribute distributes
distributed distributing convey conveys conveyed conveying license licenses licensed licensing
copies copied copying permit permits permitted permission government program service information
business development community education health research rate policy member action society
relationship data president economy issue software hardware computer network internet source code
file files lines text version versions release freedom rights terms conditions legal public private
covered copyright copyrighted notices patent patents warranty warranties liability damages
distribution recipient recipients modification modifications forms sections products device devices
manner medium parties agreement contract entire important different available social national
political local international personal significant recent previous specific various likely easy
additional incorrect valid invalid empty default optional actual absent active inactive enabled
disabled unable false ability absolutely academic accept accepted access according account accurate
achieve acquire activity actually address adequate adjust administration admit adopt adult advance
advantage advice affect afford agency agent aim alone already alternative amount analysis analyze
announce annual another anyone anything anyway apparent approach appropriate approve argue arise
article artist aspect assess assign assist associate assume attach attack attempt attend attitude
attract audience author authority automatic average avoid award aware away background balance basis
battle beautiful behavior benefit beside bill billion blame brief budget burden buyer campaign
candidate capable capacity career careful carefully category central challenge chapter
characteristic cheap choice citizen civil classic client closely collection college combination
combine comfortable command comment commercial commission commit committee communication compute
concept concern conclude conference confirm conflict congress connection consequence conservative
constant construct consumer contact context contribute convert conversation corporate council
couple courage court credit crime crisis criteria critical culture customer cycle damage debate
decade decision declare decline defense deficiency definitely deliver demand democratic demonstrate
deny department deposit depth deserve despite detail detect dialog dialogue dimension direction
director discover discovery discussion disease display distance distinct document domain draft
drawing due duty economic edition editor effective efficient effort election emerge emphasis employ
employee enable encourage engineer engineering ensure environmental episode equipment error
essential establish estimate evaluate evidence exactly examine excellent exchange executive expand
expensive expert explore express extend extent external extra extreme facility factor fail failure
fairly faith familiar feature federal fee feedback financial firm fix focus foreign former frame
framework frequency frequent fully function fund fundamental future gain generally generation
global goal grant guarantee handle hardly heavily highly hospital identify identity ignore image
impact implement implementation imply impossible improvement incident income independent individual
influence initial initiative instance instead institution instruction insurance intend intention
internal interpret interview introduce introduction invest investigate investment item itself
journal judge justice knowledge label labor lack largely later latter launch layer leader
leadership learning legislation lesson library link literature loss maintain majority manage
management manager manual margin massive maximum maybe media medical meeting membership mention
message military mission mistake mode moderate monitor mostly movement multiple namely narrow
native negative nobody normal normally novel nowhere obtain obvious obviously occasion occupy
official online operation opinion opportunity option ordinary organization otherwise outcome
outside overall owner package participant partner passage patient payment peace percent perform
performance permanent phase physical plenty pointer popular portion positive potential practical
precisely prefer premium presence preserve pressure prevent previously price primary principle
prior priority probably procedure proceed professional profit progress project promise promote
prompt proof proposal propose prospect protection publish purchase purpose pursue quality quarter
quickly rapid rapidly rarely raw reader reality realize really recently recognize recommend
reference reflect regard regardless regular regulation reject relate relation relative relatively
relevant reliable relief rely remote repair replace request reserve resolve resource respect
respond responsibility responsible restrict retain reveal review revision risk role route routine
safety sample scene schedule scheme secret secure security seek selection senior sequence series
serious session severe shift shortly signal simply site situation slightly solid somebody somehow
someone something sometimes somewhat somewhere sort specify stable staff stage standard statement
statistics status steady storage strategy structure struggle style submit subsequent substantial
succeed successful sufficient summary supplier suppose surely survey survive suspect switch target
technical technique technology tend tendency theory thereby thirty title today tomorrow topic
tradition traditional traffic transfer transform transition treat treatment trend truly trust truth
typical typically ultimately unless unlike unlikely upper urban useless versus via victim video
virtual visible vision visual volume vote wage whatever whenever wherever whereas widely willing
witness worker worth yesterday
"""

# Programming, JSON/HTTP, shell and LLM-serving words (also in UPPER case).
TECH = """
function functions method methods class classes object objects module modules package packages
import imports export exports from return returns yield async await def self this super new delete
typeof instanceof const let var static public private protected final abstract interface implements
extends enum struct union template typename namespace using include define ifdef endif ifndef
pragma void int char bool float double long short unsigned signed auto true false null none nil
undefined nan inf string strings number numbers integer boolean array arrays list lists dict map
maps set sets tuple tuples vector matrix tensor tensors buffer buffers pointer pointers value
values key keys item items index indices element elements node nodes tree graph edge type types
name names id ids path paths dir directory directories folder folders file files content contents
text role roles user assistant system tool tools model models message messages input output inputs
outputs request requests response responses error errors warning warnings info debug trace log logs
logging level levels status code codes result results data config configuration settings setting
option options param params parameter parameters argument arguments args kwargs flag flags env
environment variable variables vars default defaults description properties property required
optional schema format formats version versions min max minimum maximum size sizes length count
total sum avg mean median token tokens prompt prompts completion completions chat stream streaming
delta choices choice temperature top seed context ctx cache caches cached batch batches slot slots
thread threads server servers client clients host hosts port ports address url urls uri http https
api endpoint endpoints header headers body query get post put patch head json yaml toml xml html
css javascript typescript python bash shell rust go java ruby perl linux unix windows macos docker
container containers image images volume volumes service services daemon process processes pid
signal kill timeout time times timestamp date dates memory ram gpu gpus cpu cpus cuda core cores
device devices layer layers weight weights bias norm attention heads embedding embeddings vocab
vocabulary quant quantized llama llamafleet ansible playbook playbooks task tasks handler handlers
inventory templates molecule scenario verify converge idempotence test tests testing pytest assert
asserts assertion fixture fixtures mock mocks git commit commits branch branches merge rebase push
pull clone checkout diff tag main master origin remote remotes upstream fork repository repo repos
issue issues npm pip install uninstall upgrade build builds make cmake compile compiler link linker
src lib bin usr etc tmp opt home root sudo chmod chown mkdir rm cp mv ls cat echo grep sed awk find
xargs curl wget ssh scp tar gzip zip unzip print printf println console fmt sprintf str repr len
range enumerate open read write close append extend insert pop remove sort sorted reverse filter
reduce lambda try except finally raise throw throws catch else elif while for break continue pass
if then do done case esac fi localhost 127 0 1 8080 443 80 utf utf8 ascii unicode bytes byte bits
bit README TODO FIXME NOTE API JSON HTTP HTTPS URL CPU GPU RAM CUDA SSH TLS SSL YAML CLI GGUF KV
MiB GiB MB GB KB Python JavaScript TypeScript Linux Ansible Docker GitHub Claude Code Anthropic
OpenAI
"""

# Word endings, so that unknown words split into few pieces.
SUFFIXES = """
s es ed d ing er ers est ly y ies ied ion ions tion tions sion sions ation ations ment ments ness
able ible al ally ial ity ities ive ives ous ful less ize ized izes izing ise ised ic ics ical ance
ence ant ent ents ist ists ism ure ures age ages ship ward wards wise like ee eer ery ory ary ty th
en ens ened ening ify ified ate ated ates ating ator ators or ors 's n't 're 've 'll 'd 'm
"""

# Code/JSON punctuation and whitespace combinations (every prefix is added as well).
PUNCT = (
    '":', '",', '":▁"', '",▁"', '"}', '"]', '},', '],', '{"', '[{', '}]', '}}', '{▁"', '▁"',
    '▁{', '▁[', '▁(', '▁-', '▁--', '()', '();', '):', '),', ');', '=>', '->', '==', '!=', '<=',
    '>=', '&&', '||', '::', '//', '/*', '*/', '...', '..', '\n\n', '"\n', ',\n', '{\n', '}\n',
    '[\n', ']\n', '.\n', ':\n', '```', '**', '##', '###', '</', '/>', '▁=', '▁==', '▁+', '▁*',
    '▁/', '▁<', '▁>', '▁|', '▁&', '▁#', '▁`', '`,', '`.', '.,', '",\n', '--', '"-', '"--', '["',
    '"],', '"},', '▁{"', '[{"', '":▁["', '":▁{"', '":▁[{"', '"},▁{"', '"],▁"', '"}],', '"}]',
    '▁["', '▁[{"', '▁},', '▁],', '▁}', '▁]', '__', '___', '---', '----', './', '../', '~/',
    '${', '{{', '\\n', '\\"', '<|', '|>',
)  # fmt: skip

CONTROL_TOKENS = ("<|im_start|>", "<|im_end|>")
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6

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


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))  # first occurrences, in order


def build_vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the embedded vocabulary (deterministic)."""
    pieces: list[str] = [SP, "\n", "\t"] + [chr(c) for c in range(0x21, 0x7F)]

    def add(piece: str) -> None:
        pieces.extend(piece[:i] for i in range(2, len(piece) + 1))

    words = _unique(WORDS.split())
    tech = _unique(TECH.split())
    for w in _unique(words + tech):
        add(SP + w)
        add(w)
        if w[:1].islower():
            cap = w[0].upper() + w[1:]
            add(SP + cap)
            add(cap)
    for w in words:
        if w.isalpha() and w.islower() and len(w) > 2 and not w.endswith("s"):
            stem = w[:-1] if w.endswith("e") else w
            add(SP + w + "s")
            add(SP + stem + "ed")
            add(SP + stem + "ing")
    for w in tech:
        if w.isalpha() and w.islower():
            add(w.upper())
            add(SP + w.upper())
    for s in SUFFIXES.split():
        add(s)
    for p in PUNCT:
        add(p)
    pieces.extend(SP * n for n in range(2, 17))  # indentation
    for n in range(1, 13):
        add("\n" + SP * n)
    for a in "0123456789":
        add(SP + a)
        for b in "0123456789":
            add(a + b)
    add("OK")
    pieces = _unique(pieces)

    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    reserved = set(specials) | set(byte_tokens) | set(CONTROL_TOKENS)
    pieces = [p for p in pieces if p not in reserved]
    tokens = specials + byte_tokens + pieces + list(CONTROL_TOKENS)
    scores = [0.0] * (len(specials) + 256) + [float(len(p)) for p in pieces]
    scores += [0.0] * len(CONTROL_TOKENS)
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    types += [TOKEN_NORMAL] * len(pieces) + [TOKEN_CONTROL] * len(CONTROL_TOKENS)
    return tokens, scores, types


def add_tokenizer(writer: GGUFWriter, chat_template: str) -> tuple[int, int, int]:
    """Write the tokenizer keys; return (vocab size, id of "OK", id of </s>)."""
    tokens, scores, types = build_vocab()
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(chat_template)
    writer.add_vocab_size(len(tokens))
    return len(tokens), tokens.index("OK"), 2


class Rand:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, *shape: int, std: float = 0.02) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float16)


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def add_q8_0(writer: GGUFWriter, name: str, data: np.ndarray) -> None:
    """A vocabulary-sized matrix as Q8_0 (half the bytes of F16; keeps the file small)."""
    q8 = GGMLQuantizationType.Q8_0
    writer.add_tensor(name, quantize(data.astype(np.float32), q8), raw_dtype=q8)


def write_llama(writer: GGUFWriter, rand: Rand, args: argparse.Namespace, template: str) -> None:
    n_embd, head_dim, n_head_kv, n_layer, n_ff = 64, 32, 2, 2, 128
    n_head = n_head_kv * args.gqa_ratio
    writer.add_context_length(args.context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly F16
    n_vocab, ok_id, eos_id = add_tokenizer(writer, template)

    # Planted direction (see the module docstring). After RMSNorm, dim 0 is ~8 for ordinary
    # tokens; for "OK" dims 0 and 1 are ~5.7. Logits: ordinary -> OK 64 vs EOS 32; after "OK" ->
    # OK 0 vs EOS 22.6.
    embd = rand(n_vocab, n_embd)
    embd[:, 0] = 1.0
    embd[:, 1] = 0.0
    embd[ok_id, 1] = 1.0
    out = rand(n_vocab, n_embd)
    out[:, 0:2] = 0.0
    out[ok_id, 0], out[ok_id, 1] = 8.0, -8.0
    out[eos_id, 0], out[eos_id, 1] = 4.0, 0.0
    add_q8_0(writer, "token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones(n_embd))
    add_q8_0(writer, "output.weight", out)
    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(n_embd))
        writer.add_tensor(f"blk.{i}.attn_q.weight", rand(q_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", rand(kv_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", rand(kv_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", rand(n_embd, q_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(n_embd))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", rand(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", rand(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", rand(n_embd, n_ff))


# qwen35moe geometry: full attention every INTERVAL-th layer, gated delta net in the others
Q35_EMBD, Q35_LAYERS, Q35_INTERVAL = 64, 8, 4
Q35_HEAD, Q35_HEAD_KV, Q35_HEAD_DIM, Q35_ROT = 16, 2, 64, 16
Q35_CONV, Q35_STATE, Q35_GROUPS, Q35_DT_RANK = 4, 128, 2, 4  # key heads x 128, value heads x 128
Q35_INNER = Q35_STATE * Q35_DT_RANK
Q35_CONV_DIM = 2 * Q35_GROUPS * Q35_STATE + Q35_INNER
Q35_EXPERTS, Q35_EXPERTS_USED, Q35_FF_EXP, Q35_FF_SHEXP = 4, 2, 32, 32


def _qwen35moe_hparams(writer: GGUFWriter, args: argparse.Namespace) -> None:
    writer.add_context_length(args.context_length)
    writer.add_embedding_length(Q35_EMBD)
    writer.add_block_count(Q35_LAYERS)
    writer.add_head_count(Q35_HEAD)
    writer.add_head_count_kv(Q35_HEAD_KV)
    writer.add_key_length(Q35_HEAD_DIM)
    writer.add_value_length(Q35_HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(Q35_ROT)
    writer.add_rope_freq_base(10000000.0)
    writer.add_rope_dimension_sections([3, 3, 2, 0])  # the real model: [11, 11, 10, 0] of 64
    writer.add_expert_count(Q35_EXPERTS)
    writer.add_expert_used_count(Q35_EXPERTS_USED)
    writer.add_expert_feed_forward_length(Q35_FF_EXP)
    writer.add_expert_shared_feed_forward_length(Q35_FF_SHEXP)
    writer.add_full_attention_interval(Q35_INTERVAL)
    writer.add_ssm_conv_kernel(Q35_CONV)
    writer.add_ssm_state_size(Q35_STATE)
    writer.add_ssm_group_count(Q35_GROUPS)
    writer.add_ssm_time_step_rank(Q35_DT_RANK)
    writer.add_ssm_inner_size(Q35_INNER)
    writer.add_file_type(1)


def _qwen35moe_attention(writer: GGUFWriter, rand: Rand, p: str) -> None:
    n_embd, n_head, n_head_kv, head_dim = Q35_EMBD, Q35_HEAD, Q35_HEAD_KV, Q35_HEAD_DIM
    writer.add_tensor(p + "attn_q.weight", rand(2 * n_head * head_dim, n_embd))
    writer.add_tensor(p + "attn_k.weight", rand(n_head_kv * head_dim, n_embd))
    writer.add_tensor(p + "attn_v.weight", rand(n_head_kv * head_dim, n_embd))
    writer.add_tensor(p + "attn_output.weight", rand(n_embd, n_head * head_dim))
    writer.add_tensor(p + "attn_q_norm.weight", ones(head_dim))
    writer.add_tensor(p + "attn_k_norm.weight", ones(head_dim))


def _qwen35moe_delta_net(writer: GGUFWriter, rand: Rand, p: str) -> None:
    n_embd, dt_rank = Q35_EMBD, Q35_DT_RANK
    writer.add_tensor(p + "attn_qkv.weight", rand(Q35_CONV_DIM, n_embd))
    writer.add_tensor(p + "attn_gate.weight", rand(Q35_INNER, n_embd))
    conv = (rand.rng.standard_normal((Q35_CONV_DIM, Q35_CONV)) * 0.1).astype(np.float32)
    writer.add_tensor(p + "ssm_conv1d.weight", conv)
    writer.add_tensor(p + "ssm_dt.bias", np.zeros(dt_rank, dtype=np.float32))
    writer.add_tensor(p + "ssm_a", -np.ones(dt_rank, dtype=np.float32))
    writer.add_tensor(p + "ssm_beta.weight", rand(dt_rank, n_embd))
    writer.add_tensor(p + "ssm_alpha.weight", rand(dt_rank, n_embd))
    writer.add_tensor(p + "ssm_norm.weight", ones(Q35_STATE))
    writer.add_tensor(p + "ssm_out.weight", rand(n_embd, Q35_INNER))


def _qwen35moe_experts(writer: GGUFWriter, rand: Rand, p: str) -> None:
    n_embd, n_expert, n_ff_exp, n_ff_shexp = Q35_EMBD, Q35_EXPERTS, Q35_FF_EXP, Q35_FF_SHEXP
    gate_inp = (rand.rng.standard_normal((n_expert, n_embd)) * 0.02).astype(np.float32)
    writer.add_tensor(p + "ffn_gate_inp.weight", gate_inp)
    writer.add_tensor(p + "ffn_gate_exps.weight", rand(n_expert, n_ff_exp, n_embd))
    writer.add_tensor(p + "ffn_up_exps.weight", rand(n_expert, n_ff_exp, n_embd))
    writer.add_tensor(p + "ffn_down_exps.weight", rand(n_expert, n_embd, n_ff_exp))
    writer.add_tensor(p + "ffn_gate_inp_shexp.weight", ones(n_embd) * 0.02)
    writer.add_tensor(p + "ffn_gate_shexp.weight", rand(n_ff_shexp, n_embd))
    writer.add_tensor(p + "ffn_up_shexp.weight", rand(n_ff_shexp, n_embd))
    writer.add_tensor(p + "ffn_down_shexp.weight", rand(n_embd, n_ff_shexp))


def write_qwen35moe(
    writer: GGUFWriter, rand: Rand, args: argparse.Namespace, template: str
) -> None:
    # numpy shapes are ggml's ne reversed: {n_embd, n} in llama-model.cpp is (n, n_embd) here
    _qwen35moe_hparams(writer, args)
    n_vocab, _, _ = add_tokenizer(writer, template)

    add_q8_0(writer, "token_embd.weight", rand(n_vocab, Q35_EMBD))  # tied: no output.weight
    writer.add_tensor("output_norm.weight", ones(Q35_EMBD))
    for i in range(Q35_LAYERS):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(Q35_EMBD))
        writer.add_tensor(p + "post_attention_norm.weight", ones(Q35_EMBD))
        if (i + 1) % Q35_INTERVAL == 0:  # full attention
            _qwen35moe_attention(writer, rand, p)
        else:  # gated delta net
            _qwen35moe_delta_net(writer, rand, p)
        _qwen35moe_experts(writer, rand, p)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("out", help="where to write the model")
    ap.add_argument("--arch", choices=("llama", "qwen35moe"), default="llama")
    ap.add_argument(
        "--gqa-ratio",
        type=int,
        default=1,
        help="llama only: query heads per KV head (2 KV heads of head_dim 32; default 1)",
    )
    ap.add_argument(
        "--chat-template-file",
        help="use this file's text as tokenizer.chat_template instead of the ChatML-style default",
    )
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument(
        "--context-length",
        type=int,
        default=131072,
        help="training context; llama-server caps each slot at it (default 131072)",
    )
    ap.add_argument("--name", default=None, help="general.name (default: by architecture)")
    args = ap.parse_args()
    if args.gqa_ratio < 1:
        ap.error("--gqa-ratio must be >= 1")
    if args.arch != "llama" and args.gqa_ratio != 1:
        ap.error("--gqa-ratio applies to --arch llama only")
    if args.context_length < 1:
        ap.error("--context-length must be >= 1")
    template = CHAT_TEMPLATE
    if args.chat_template_file:
        try:
            with open(args.chat_template_file, encoding="utf-8") as fh:
                template = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            ap.error(f"--chat-template-file: {exc}")

    writer = GGUFWriter(args.out, args.arch)
    writer.add_name(args.name or f"llamafleet tiny test model ({args.arch})")
    rand = Rand(args.seed)
    if args.arch == "llama":
        write_llama(writer, rand, args, template)
    else:
        write_qwen35moe(writer, rand, args, template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
