#!/usr/bin/env python3
"""Small byte-level BPE vocabularies for the tokenizer goldens.

    python3 make-vocabs.py train          # remakes vocabs/*.merges from corpus.txt
    python3 make-vocabs.py gguf OUT_DIR   # writes OUT_DIR/<name>.gguf

One vocabulary per pre-tokenizer KVIR supports (VOCABS below). `train`
learns merges on corpus.txt (English, numbers, white space, punctuation,
accents, Cyrillic, Greek, CJK, Hangul, Arabic, Devanagari, Thai, emoji,
code) split into words by a rough GPT-2-like rule, and writes them, in rank
order, to vocabs/NAME.merges (committed: training is deterministic, but the
goldens are made from these files). Extra tokens avoid the names llama.cpp
retypes by their text (EOT, EOG and FIM names such as <|eot_id|> it makes
CONTROL whatever the file says; KVIR keeps the file's types): the goldens
compare the algorithms, not that heuristic. `gguf` writes vocabulary-only GGUF files
(no tensors) with tokenizer.ggml.model = gpt2, the name as
tokenizer.ggml.pre, and each vocabulary's special tokens, ids and flags:
the build makes them from the committed merges (test/unit/core/CMakeLists.txt),
and make-goldens.sh gives the same files to llama.cpp.

Token ids: the 256 byte-alphabet tokens in GPT-2's order, then the merge
results in rank order, then extra tokens (normal ones that no merge makes,
user-defined and control ones); "specials_first" puts the extra tokens
first, as Falcon's vocabulary has them.
"""
import os
import struct
import sys
import unicodedata
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED = 1, 2, 3, 4, 5

# name: merges to learn, extra tokens (text, type), special ids by token
# text, add_bos, where the extras go.
VOCABS = {
    "llama-bpe": dict(
        merges=1500,
        extra=[(" supercalifragilistic", NORMAL), ("abracadabra", NORMAL),
               ("<|begin_of_text|>", CONTROL), ("<|end_of_text|>", CONTROL),
               ("<|start_header_id|>", CONTROL), ("<|end_header_id|>", CONTROL),
               ("<|eot_id|>", CONTROL), ("<|reserved_special_token_0|>", CONTROL)],
        bos="<|begin_of_text|>", eos="<|end_of_text|>", add_bos=True),
    "qwen2": dict(
        merges=1200,
        extra=[("<|endoftext|>", CONTROL), ("<|im_start|>", CONTROL),
               ("<|im_end|>", CONTROL), ("<think>", USER_DEFINED),
               ("</think>", USER_DEFINED), ("<tool_call>", USER_DEFINED)],
        bos="<|endoftext|>", eos="<|im_end|>", pad="<|endoftext|>",
        add_bos=False),
    "gpt-2": dict(
        merges=800, extra=[("<|endoftext|>", CONTROL)],
        bos="<|endoftext|>", eos="<|endoftext|>"),
    "deepseek-llm": dict(
        merges=1000,
        extra=[("<｜begin▁of▁sentence｜>", CONTROL),
               ("<｜end▁of▁sentence｜>", CONTROL), ("<|User|>", USER_DEFINED),
               ("<|Assistant|>", USER_DEFINED)],
        bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>",
        add_bos=True),
    "deepseek-coder": dict(
        merges=600,
        extra=[("<｜begin▁of▁sentence｜>", CONTROL),
               ("<｜end▁of▁sentence｜>", CONTROL),
               ("<｜tool▁calls▁begin｜>", USER_DEFINED),
               ("<｜tool▁sep｜>", USER_DEFINED), ("<|code|>", USER_DEFINED)],
        bos="<｜begin▁of▁sentence｜>", eos="<｜end▁of▁sentence｜>",
        add_bos=True),
    "falcon": dict(
        merges=700, specials_first=True,
        extra=[(">>TITLE<<", CONTROL), (">>ABSTRACT<<", CONTROL),
               (">>INTRODUCTION<<", CONTROL), (">>SUMMARY<<", CONTROL),
               (">>COMMENT<<", CONTROL), (">>ANSWER<<", CONTROL),
               (">>QUESTION<<", CONTROL), (">>DOMAIN<<", CONTROL),
               (">>PREFIX<<", CONTROL), (">>SUFFIX<<", CONTROL),
               (">>MIDDLE<<", CONTROL), ("<|endoftext|>", CONTROL)],
        bos="<|endoftext|>", eos="<|endoftext|>"),
    "starcoder": dict(
        merges=900,
        extra=[("<|endoftext|>", CONTROL), ("<fim_prefix>", CONTROL),
               ("<fim_middle>", CONTROL), ("<fim_suffix>", CONTROL),
               ("<fim_pad>", CONTROL), ("<filename>", CONTROL),
               ("<unk>", UNKNOWN), ("<empty_output>", UNUSED)],
        bos="<|endoftext|>", eos="<|endoftext|>", unk="<unk>"),
    "default": dict(
        merges=500,
        extra=[("<|endoftext|>", CONTROL), ("<|padding|>", CONTROL)],
        bos="<|endoftext|>", eos="<|endoftext|>", pad="<|padding|>"),
}


def byte_alphabet():
    """GPT-2's bytes_to_unicode, as (bytes in id order, byte -> char)."""
    printable = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    order = printable[:]
    chars = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            order.append(b)
            n += 1
    return order, chars


def kind(c):
    cat = unicodedata.category(c)
    if c.isspace():
        return "s"
    return cat[0] if cat[0] in "LN" else "o"


def rough_words(text):
    """A GPT-2-like split (' ?letters', ' ?digits', ' ?other', spaces),
    close enough to train on: the merges only have to be plausible."""
    words, i = [], 0
    while i < len(text):
        j = i
        if text[j] == " " and j + 1 < len(text) and kind(text[j + 1]) != "s":
            j += 1
        k = kind(text[j])
        j += 1
        while j < len(text) and kind(text[j]) == k:
            j += 1
        words.append(text[i:j])
        i = j
    return words


def train(n_merges, text):
    _, chars = byte_alphabet()
    counts = Counter(rough_words(text))
    words = [([chars[b] for b in w.encode("utf-8")], c)
             for w, c in counts.items()]
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for syms, c in words:
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        for syms, _ in words:
            i = 0
            while i + 1 < len(syms):
                if syms[i] == best[0] and syms[i + 1] == best[1]:
                    syms[i:i + 2] = [joined]
                i += 1
    return merges


def merges_path(name):
    return os.path.join(HERE, "vocabs", name + ".merges")


def read_merges(name):
    with open(merges_path(name), encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split(" ", 1)) for line in f]


def spell(text):
    _, chars = byte_alphabet()
    return "".join(chars[b] for b in text.encode("utf-8"))


def vocabulary(name):
    """(tokens, types, merges, ids) of vocabulary `name`."""
    spec = VOCABS[name]
    order, chars = byte_alphabet()
    merges = read_merges(name)
    base = [chars[b] for b in order]
    seen = set(base)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            base.append(a + b)
    extra = [(spell(t) if ty == NORMAL else t, ty) for t, ty in spec["extra"]]
    extra = [(t, ty) for t, ty in extra if t not in seen]
    body = [(t, NORMAL) for t in base]
    entries = extra + body if spec.get("specials_first") else body + extra
    tokens = [t for t, _ in entries]
    types = [ty for _, ty in entries]
    ids = {}
    for key in ("bos", "eos", "unk", "pad"):
        if key in spec:
            ids[key] = tokens.index(spec[key])
    return tokens, types, merges, ids


class Writer:
    def __init__(self):
        self.out = bytearray()
        self.n = 0

    def string(self, s):
        b = s.encode("utf-8") if isinstance(s, str) else s
        self.out += struct.pack("<Q", len(b)) + b

    def key(self, name, type_):
        self.n += 1
        self.string(name)
        self.out += struct.pack("<I", type_)

    def u32(self, name, v):
        self.key(name, 4)
        self.out += struct.pack("<I", v)

    def f32(self, name, v):
        self.key(name, 6)
        self.out += struct.pack("<f", v)

    def boolean(self, name, v):
        self.key(name, 7)
        self.out += struct.pack("<B", 1 if v else 0)

    def text(self, name, v):
        self.key(name, 8)
        self.string(v)

    def strings(self, name, items):
        self.key(name, 9)
        self.out += struct.pack("<IQ", 8, len(items))
        for s in items:
            self.string(s)

    def i32s(self, name, items):
        self.key(name, 9)
        self.out += struct.pack("<IQ", 5, len(items))
        self.out += struct.pack("<%di" % len(items), *items)


def write_gguf(name, path):
    tokens, types, merges, ids = vocabulary(name)
    spec = VOCABS[name]
    w = Writer()
    w.text("general.architecture", "llama")
    w.text("general.name", "kvir-test-" + name)
    # llama.cpp reads the hyperparameters even of a vocabulary-only file.
    w.u32("llama.context_length", 2048)
    w.u32("llama.embedding_length", 64)
    w.u32("llama.block_count", 1)
    w.u32("llama.feed_forward_length", 128)
    w.u32("llama.attention.head_count", 4)
    w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.u32("llama.vocab_size", len(tokens))
    w.text("tokenizer.ggml.model", "gpt2")
    w.text("tokenizer.ggml.pre", name)
    w.strings("tokenizer.ggml.tokens", tokens)
    w.i32s("tokenizer.ggml.token_type", types)
    w.strings("tokenizer.ggml.merges", ["%s %s" % m for m in merges])
    for key, gguf in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                      ("unk", "unknown_token_id"), ("pad", "padding_token_id")):
        if key in ids:
            w.u32("tokenizer.ggml." + gguf, ids[key])
    w.boolean("tokenizer.ggml.add_bos_token", spec.get("add_bos", False))
    w.boolean("tokenizer.ggml.add_eos_token", False)
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, w.n)
    with open(path, "wb") as f:
        f.write(head + bytes(w.out))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "train":
        with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8") as f:
            text = f.read()
        os.makedirs(os.path.join(HERE, "vocabs"), exist_ok=True)
        for name, spec in VOCABS.items():
            merges = train(spec["merges"], text)
            with open(merges_path(name), "w", encoding="utf-8") as f:
                for a, b in merges:
                    f.write("%s %s\n" % (a, b))
            print("make-vocabs: %s: %d merges" % (name, len(merges)))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "gguf":
        os.makedirs(sys.argv[2], exist_ok=True)
        for name in VOCABS:
            write_gguf(name, os.path.join(sys.argv[2], name + ".gguf"))
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
