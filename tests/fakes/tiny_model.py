"""A tiny GGUF model with a scripted, reproducible voice, for real llama.cpp servers in the tests.

Real servers (llama.cpp's ``llama-server``, ``llama-cpp-python``) need a model file, and a real
model is gigabytes. This module writes one of a few hundred thousand parameters whose weights
are set by hand so that greedy decoding says one of a few fixed scripts: a plain answer, a
Qwen3-Coder XML tool call to ``get_weather`` or ``exec_command`` (the tool Codex runs commands
with), an answer after a tool result, tool-call markup in three dialects for servers that run
no tool parser, and a thought (``<think>`` ... ``</think>``, then an answer). Everything else
about the file is ordinary: a GPT-2 byte-level BPE vocabulary, a chat template (Qwen3-Coder style, so llama-server picks its Qwen3-Coder tool-call
parser and grammar), a llama architecture of one layer.

How the weights pick a script:

- Every script's tokens are multi-character tokens no merge builds, so a prompt never contains
  them, except those of the plain answer and the thought (``PREFILLABLE``), which are matched in
  prompts as themselves (USER_DEFINED, as ``<tool_call>`` is). Each has an identity dimension in
  the embedding, and the output matrix maps it to its successor in the script: a bigram chain,
  ending in ``<|im_end|>``.
- The chat template puts one selector token at the very start of the prompt, chosen from the
  request: ``<|sel_after_tool|>`` when the last message is a tool result, ``<|sel_text|>`` when
  the last user message says "hello", ``<|sel_markup_DIALECT|>`` when the system message says
  ``markup=DIALECT``, ``<|sel_reasoning|>`` when the last user message says "think" (and not
  "hello"), ``<|sel_call_NAME|>`` when a known tool is declared, else ``<|sel_text|>``.
  The one attention head attends from every position to
  the selector (its key is the only non-zero one; the query and key live in a dimension RoPE
  leaves alone), and copies the selector's identity into the residual stream.
- The output matrix maps the selector to its script's first token, and gives the tokens of that
  script a small bonus, which decides between scripts that share a token (``<tool_call>``).
  The chain weight outweighs both, so a script, once started, runs to its end.

The prompt ends with ``<|im_start|>assistant`` and a newline (the generation prompt); the newline
byte token starts the selected script. A prompt that ends with an assistant prefill of the first
pieces of a ``PREFILLABLE`` script (a continuation: llama-server renders the prefill after the
generation prompt, ``"<think>\n"`` + the thought so far for the thought) ends with one of its
tokens, whose chain weight outweighs the selector's: the model goes on where the prefill stops
rather than starting its script again.

The template renders an assistant message's ``reasoning_content`` Qwen3's way (a ``<think>``
block before its content): with ``<think>`` in its source, llama-server's Qwen3-Coder parser reads
the thought's block and streams it as ``reasoning_content``, with no extra flag.

With one slot and greedy sampling, answers are exact, so tests compare what crossfeed returns with
what the server itself returns for the same request.

``python -m tests.fakes.tiny_model PATH`` writes the file (``.ci/build-llama.sh`` calls it).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

# The scripts, as token texts. A text may appear in several scripts (the selector bonus decides
# its successor) but only once within a script.
WEATHER_CALL = [
    "<tool_call>",
    "\n<function=get_weather>\n",
    "<parameter=city>\n",
    "Paris",
    "\n</parameter>\n",
    "</function>\n",
    "</tool_call>",
]
COMMAND = "echo crossfeed-$((6*7))"
EXEC_CALL = [
    "<tool_call>",
    "\n<function=exec_command>\n",
    "<parameter=cmd>\n",
    COMMAND,
    "\n</parameter>\n",
    "</function>\n",
    "</tool_call>",
]
# A thought, then its answer (a last user message saying THINK_TRIGGER).
REASONING = [
    "<think>\n",
    "Counting",
    " sheep",
    " before",
    " answering",
    " slowly.\n",
    "</think>\n\n",
    "Seven",
    " it",
    " is",
    " then.",
]
SCRIPTS: dict[str, list[str]] = {
    "text": ["Hello", " from", " a", " tiny", " model", " served", " by", " llama", ".cpp", "."],
    "after_tool": ["The", " tool", " answered", ";", " all", " done", "!"],
    "call_get_weather": WEATHER_CALL,
    "call_exec_command": EXEC_CALL,
    "markup_qwen3": WEATHER_CALL,
    "markup_hermes": [
        "Checking",
        " the",
        " weather",
        ".\n",
        "<tool_call>",
        '\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
        "</tool_call>",
    ],
    "markup_mistral": ["[TOOL_CALLS]", "get_weather", "[ARGS]", '{"city": "Paris"}'],
    "reasoning": REASONING,
}
# A server that forces a named tool with a JSON grammar of its arguments (llama-cpp-python) rejects
# the XML script's first token; the next best, the arguments as one token, fits the grammar.
FORCED_ARGS = {"get_weather": '{"city": "Paris"}', "exec_command": '{"cmd": "' + COMMAND + '"}'}
# The scripts a prefill of their beginning continues (their tokens are matched in prompts).
PREFILLABLE = ("text", "reasoning")
TEXT_ANSWER = "".join(SCRIPTS["text"])
AFTER_TOOL_ANSWER = "".join(SCRIPTS["after_tool"])
_CLOSE = REASONING.index("</think>\n\n")
THOUGHT = "".join(REASONING[1:_CLOSE])  # the reasoning, as llama-server's parser reads the block
THOUGHT_ANSWER = "".join(REASONING[_CLOSE + 1 :])
THINK_TRIGGER = "think"  # a last user message saying it (and not "hello") selects the reasoning script
TOOLS_KNOWN = ("get_weather", "exec_command")
MARKUP = ("qwen3", "hermes", "mistral")

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_TOKENS = ("<tool_call>", "</tool_call>")

CHAT_TEMPLATE = (
    "{% set ns = namespace(sel='<|sel_text|>') %}"
    "{% if tools %}{% for t in tools %}"
    "{% if ns.sel == '<|sel_text|>' and t.function.name in " + repr(list(TOOLS_KNOWN)) + " %}"
    "{% set ns.sel = '<|sel_call_' ~ t.function.name ~ '|>' %}"
    "{% endif %}{% endfor %}{% endif %}"
    "{% if messages and messages[0].role == 'system' and messages[0].content is string %}"
    + "".join(
        "{% if 'markup=" + m + "' in messages[0].content %}{% set ns.sel = '<|sel_markup_" + m + "|>' %}{% endif %}"
        for m in MARKUP
    )
    + "{% endif %}"
    "{% if messages and messages[-1].role == 'user' and messages[-1].content is string"
    " and '" + THINK_TRIGGER + "' in messages[-1].content %}{% set ns.sel = '<|sel_reasoning|>' %}{% endif %}"
    "{% if messages and messages[-1].role == 'user' and messages[-1].content is string"
    " and ('hello' in messages[-1].content or 'Hello' in messages[-1].content) %}"
    "{% set ns.sel = '<|sel_text|>' %}{% endif %}"
    "{% if messages and messages[-1].role == 'tool' %}{% set ns.sel = '<|sel_after_tool|>' %}{% endif %}"
    "{{ ns.sel }}"
    "{% if tools %}"
    "<|im_start|>system\n# Tools\n<tools>"
    "{% for t in tools %}\n<function><name>{{ t.function.name }}</name>"
    "{% if t.function.parameters is mapping and t.function.parameters.properties is mapping %}"
    "{% for pname in t.function.parameters.properties %}<parameter="
    "{{ pname }}>{% endfor %}"
    "{% endif %}</function>{% endfor %}\n</tools>\n"
    "To call a function, reply with <tool_call>\n<function=name>\n<parameter=arg>\nvalue\n"
    "</parameter>\n</function>\n</tool_call><|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'assistant' %}"
    "<|im_start|>assistant\n"
    "{% if message.reasoning_content is string and message.reasoning_content %}"
    "<think>\n{{ message.reasoning_content }}\n</think>\n\n{% endif %}"
    "{% if message.content is string %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}"
    "{% set call = tc.function if tc.function else tc %}"
    "\n<tool_call>\n<function={{ call.name }}>\n"
    "{% if call.arguments is mapping %}{% for k, v in call.arguments.items() %}"
    "<parameter={{ k }}>\n{{ v if v is string else (v | tojson) }}\n</parameter>\n"
    "{% endfor %}{% else %}{{ call.arguments }}\n{% endif %}"
    "</function>\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message.content if message.content is string else '' }}"
    "\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content if message.content is string else '' }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

N_EMBD = 128
# The selector's copy, once normalised, about as large as a token's identity (both RMS-normed).
SEL_SCALE = 0.15
N_FF = 32
CONTEXT = 131072


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table: the printable form each byte takes in a BPE vocabulary."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = dict.fromkeys(range(256), "")
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


BYTES = _byte_symbols()
MERGE = "t h"


def _encode(text: str) -> str:
    return "".join(BYTES[b] for b in text.encode())


class Vocab:
    """Token texts (in byte-symbol form), their types, and where the scripted ones sit."""

    def __init__(self) -> None:
        self.tokens: list[str] = list(BYTES)
        self.types: list[int] = [1] * 256  # NORMAL
        self.ids: dict[str, int] = {}
        for special in (IM_START, IM_END, "<|endoftext|>", *self.selectors()):
            self._add(special, special, 3)  # CONTROL
        for tag in TOOL_TOKENS:
            self._add(tag, tag, 4)  # USER_DEFINED: matched in prompts as themselves (as Qwen's are)
        for piece in (p for name in PREFILLABLE for p in SCRIPTS[name]):
            if piece not in self.ids and len(piece.encode()) > 1:  # a single byte: its byte token
                self._add(piece, piece, 4)  # USER_DEFINED: a prompt holding the piece holds the token
        for script in [*SCRIPTS.values(), list(FORCED_ARGS.values())]:
            for piece in script:
                symbol = _encode(piece)
                if piece in self.ids:
                    continue
                if symbol in self.tokens:  # a single byte: its byte token says it
                    self.ids[piece] = self.tokens.index(symbol)
                else:
                    self._add(piece, symbol, 1)
        self._add("th", MERGE.replace(" ", ""), 1)  # the one merge a BPE vocabulary must have

    @staticmethod
    def selectors() -> list[str]:
        return [f"<|sel_{name}|>" for name in SCRIPTS]

    def _add(self, text: str, symbol: str, kind: int) -> None:
        self.ids[text] = len(self.tokens)
        self.tokens.append(symbol)
        self.types.append(kind)

    def byte(self, char: str) -> int:
        return BYTES.index(_encode(char))


def build_weights(vocab: Vocab) -> dict[str, object]:
    import numpy as np

    n_vocab = len(vocab.tokens)
    names = list(SCRIPTS)
    # Residual dimensions: 0 constant; 1 "is a selector"; then one per selector (its identity),
    # one per selector copied by attention, one per scripted token, one for the start newline.
    CONST, FLAG, HEAD = 0, 1, N_EMBD - 2  # HEAD: the query/key dimension, past RoPE's reach
    sel_in = {n: 2 + i for i, n in enumerate(names)}
    sel_out = {n: 2 + len(names) + i for i, n in enumerate(names)}
    scripted = sorted({vocab.ids[p] for s in [*SCRIPTS.values(), FORCED_ARGS.values()] for p in s})
    ident = {tok: 2 + 2 * len(names) + i for i, tok in enumerate(scripted)}
    start = 2 + 2 * len(names) + len(scripted)
    assert start < HEAD, "the model is too small for its scripts"

    embd = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    embd[:, CONST] = 1.0
    for n in names:
        row = vocab.ids[f"<|sel_{n}|>"]
        embd[row, FLAG] = 1.0
        embd[row, sel_in[n]] = 1.0
    for tok, dim in ident.items():
        embd[tok, dim] = 1.0
    embd[vocab.byte("\n"), start] = 1.0

    wq = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    wk = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    wv = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    wo = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    wq[HEAD, CONST] = 8.0
    wk[HEAD, FLAG] = 8.0
    for n in names:
        wv[sel_in[n], sel_in[n]] = 1.0
        wo[sel_out[n], sel_in[n]] = SEL_SCALE

    out = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    eos = vocab.ids[IM_END]
    text_first = vocab.ids[SCRIPTS["text"][0]]
    out[text_first, start] = 2.0  # no selector at all: the plain answer
    for n, script in SCRIPTS.items():
        toks = [vocab.ids[p] for p in script] + [eos]
        out[toks[0], sel_out[n]] += 10.0
        for a, b in itertools.pairwise(toks):
            out[b, ident[a]] = 20.0
            out[b, sel_out[n]] += 3.0
    for name, args in FORCED_ARGS.items():
        out[vocab.ids[args], sel_out[f"call_{name}"]] += 5.0  # under the first token, over the bonus
        out[eos, ident[vocab.ids[args]]] = 20.0
    ones = np.ones(N_EMBD, dtype=np.float32)
    return {
        "token_embd.weight": embd,
        "output_norm.weight": ones,
        "output.weight": out,
        "blk.0.attn_norm.weight": ones.copy(),
        "blk.0.attn_q.weight": wq,
        "blk.0.attn_k.weight": wk,
        "blk.0.attn_v.weight": wv,
        "blk.0.attn_output.weight": wo,
        "blk.0.ffn_norm.weight": ones.copy(),
        "blk.0.ffn_gate.weight": np.zeros((N_FF, N_EMBD), dtype=np.float32),
        "blk.0.ffn_up.weight": np.zeros((N_FF, N_EMBD), dtype=np.float32),
        "blk.0.ffn_down.weight": np.zeros((N_EMBD, N_FF), dtype=np.float32),
    }


def write_model(path: Path) -> Path:
    import gguf

    vocab = Vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("crossfeed-tiny-scripted")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(1e12)
    w.add_rope_dimension_count(N_EMBD)
    w.add_vocab_size(len(vocab.tokens))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    w.add_token_merges([MERGE])
    w.add_bos_token_id(vocab.ids["<|endoftext|>"])
    w.add_eos_token_id(vocab.ids[IM_END])
    w.add_pad_token_id(vocab.ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, array in build_weights(vocab).items():
        w.add_tensor(name, array)  # type: ignore[arg-type]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf")
    print(write_model(target))
