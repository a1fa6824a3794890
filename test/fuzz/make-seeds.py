#!/usr/bin/env python3
"""Writes the generated part of the fuzzers' seed corpora (corpus/<target>/).

The seeds are checked in; this script says where they came from and remakes
them: python3 test/fuzz/make-seeds.py. Hand-written seeds (kv programs copied
from examples/ and test/) are copied by it too. Crash inputs found later are
added by hand as corpus/<target>/crash-<what>, never by this script. The
GGUF seeds (*.gguf in corpus/model-loader and corpus/gguf) were made from the
tiny checkpoints below with kv-convert (F32 tied; Q8_0 with a separate
classifier) and are not remade here; so were those of the block formats, from
kv-convert's synthetic models:
  kv-convert synthetic:dim=256,hidden=1,layers=1,heads=1,kv_heads=1,vocab=2,seed=3
      dim256-q4_k_m.gguf --type q4_k_m      (Q4_K, Q6_K and F16)
  kv-convert synthetic:dim=32,hidden=32,layers=2,heads=2,kv_heads=1,vocab=8,seed=4,shared=0
      tiny-separate-q4_0.gguf --type q4_0
"""
import importlib
import os
import shutil
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def put(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq, shared=True):
    head = dim // heads
    kv_dim = kv_heads * head
    header = struct.pack("<7i", dim, hidden, layers, heads, kv_heads,
                         vocab if shared else -vocab, seq)
    counts = [vocab * dim, layers * dim, layers * dim * dim,
              layers * dim * kv_dim, layers * dim * kv_dim,
              layers * dim * dim, layers * dim, layers * hidden * dim,
              layers * dim * hidden, layers * hidden * dim, dim,
              seq * head // 2, seq * head // 2]
    if not shared:
        counts.append(vocab * dim)
    floats = []
    for i in range(sum(counts)):
        floats.append(((i * 37) % 17 - 8) / 16.0)
    return header + struct.pack("<%df" % len(floats), *floats)


def tokenizer_file(pieces, max_len=None):
    max_len = max_len or max(len(p) for p in pieces)
    out = struct.pack("<i", max_len)
    for i, p in enumerate(pieces):
        out += struct.pack("<fi", -float(i), len(p)) + p
    return out


# The llama2.c loader.
good = checkpoint(8, 16, 1, 2, 2, 8, 8)
put("model-loader", "tiny-shared", good)
put("model-loader", "tiny-separate-classifier",
    checkpoint(8, 16, 2, 2, 1, 8, 8, shared=False))
put("model-loader", "truncated", good[: len(good) // 2])
put("model-loader", "header-only", good[:28])
put("model-loader", "zero-dims", struct.pack("<7i", 0, 0, 0, 0, 0, 0, 0))

# The tokenizer: even first byte, a file; odd, a text to round-trip.
pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + \
    [("<0x%02X>" % b).encode() for b in range(256)] + \
    [b" ", b"e", b"t", b" t", b"he", b" the", b"a", b"n", b"an", b" a"]
put("tokenizer", "file-bytes-and-merges", b"\x00" + tokenizer_file(pieces))
put("tokenizer", "file-minimal", b"\x00" + tokenizer_file([b"a", b"b", b"c"]))
put("tokenizer", "file-cut", b"\x00" + tokenizer_file(pieces)[:50])
put("tokenizer", "text-story", b"\x01Once upon a time, there was a little girl named Lily.")
put("tokenizer", "text-utf8", "\x01Le caf\u00e9 \u65e5\u672c \U0001F600\n\t".encode())
put("tokenizer", "text-bytes", b"\x01 \x00\x80\xff  two  spaces")
# Byte-level BPE: 2, a GGUF vocabulary (the 256 byte tokens, a few merges,
# control and user-defined tokens), written with the goldens' GGUF writer;
# 3, texts for the llama-bpe test vocabulary.
sys.path.insert(0, os.path.join(root, "test", "golden", "tokenizer"))
vocabs = importlib.import_module("make-vocabs")
order, chars = vocabs.byte_alphabet()
bpe_tokens = [chars[b] for b in order] + ["\u0120t", "he", "\u0120the", "in"]
bpe_merges = ["\u0120 t", "h e", "\u0120t he", "i n"]
bpe = vocabs.Writer()
bpe.text("tokenizer.ggml.model", "gpt2")
bpe.text("tokenizer.ggml.pre", "llama-bpe")
bpe.strings("tokenizer.ggml.tokens",
            bpe_tokens + ["<|eot_id|>", "<|begin_of_text|>", "<tool>"])
bpe.i32s("tokenizer.ggml.token_type",
         [vocabs.NORMAL] * len(bpe_tokens) +
         [vocabs.CONTROL, vocabs.CONTROL, vocabs.USER_DEFINED])
bpe.strings("tokenizer.ggml.merges", bpe_merges)
bpe.u32("tokenizer.ggml.bos_token_id", len(bpe_tokens) + 1)
bpe.u32("tokenizer.ggml.eos_token_id", len(bpe_tokens))
put("tokenizer", "gguf-bpe",
    b"\x02GGUF" + struct.pack("<IQQ", 3, 0, bpe.n) + bytes(bpe.out))
put("tokenizer", "text-bpe-mix",
    "\x03It's 2024: caf\u00e9 \u041f\u0440\u0438\u0432\u0435\u0442 "
    "\u6211\u60f3 \U0001F999\n\n  x <|eot_id|>".encode())
put("tokenizer", "text-bpe-bytes", b"\x03a\x80\xe2\x82 \xf0\x9f\x98 \xff\t\r\n")

# The token-list parser.
for name, text in [("ids", "1 403 407 261 378\n"), ("spaces", "\t 7\n\n8  9 "),
                   ("negative", "1 -2 3"), ("words", "1 two 3"),
                   ("overflow", "2147483648"), ("empty", ""),
                   ("plus-hex", "+5 0x10 1e3")]:
    put("token-list", name, text)

# kv programs: the examples and the test inputs, valid and invalid.
sources = [os.path.join(root, "examples", f)
           for f in sorted(os.listdir(os.path.join(root, "examples")))
           if f.endswith(".mlir")]
for sub in ["test/Integration/CPU/Inputs", "test/Dialect", "test/Analysis",
            "test/Transforms"]:
    for dirpath, _, files in sorted(os.walk(os.path.join(root, sub))):
        sources += [os.path.join(dirpath, f) for f in sorted(files)
                    if f.endswith(".mlir") and
                    os.path.getsize(os.path.join(dirpath, f)) < 20000]
program_dir = os.path.join(here, "corpus", "program")
os.makedirs(program_dir, exist_ok=True)
for src in sources:
    shutil.copy(src, os.path.join(
        program_dir, os.path.relpath(src, root).replace("/", "_")))

# Generated programs: choice bytes (ExecFuzzer.cpp). Byte 0 picks the RoPE
# layout, byte 1 the seed, byte 2 compose (0 mod 4) or an edit.
for name, choices in [
        ("edit-exact", [0, 3, 1, 3, 1, 5, 7, 2, 0, 0, 0, 0, 0, 4, 0, 6, 9]),
        ("edit-cot-slice", [1, 4, 2, 4, 2, 3, 1, 0, 0, 8, 0, 1, 5, 0, 1]),
        ("edit-first-k", [0, 5, 3, 2, 0, 4, 2, 0, 0, 6, 2, 3, 1, 3]),
        ("edit-deviation", [1, 6, 1, 4, 1, 2, 6, 1, 0, 9, 4, 1, 1, 7, 2, 5]),
        ("edit-erratum", [0, 7, 2, 3, 0, 6, 4, 0, 3, 5, 5, 5, 2, 3, 4]),
        ("compose-plain", [0, 8, 0, 2, 5, 3, 0, 4, 0, 3]),
        ("compose-repair", [1, 9, 4, 2, 6, 7, 1, 3, 5, 2, 8, 3, 11, 2]),
]:
    put("exec", name, bytes(choices))
# Blobs of a block store (BlockBlobFuzzer.cpp): odd first byte, the valid
# blob cut to a length (2 bytes, 0xFFFF: whole) and XOR patches (offset 2
# bytes, value); even, raw bytes.
put("block-blob", "valid", b"\x01\xff\xff")
put("block-blob", "cut-256", b"\x01\x00\x01")
put("block-blob", "flip-header", b"\x01\xff\xff\x10\x00\x01")
put("block-blob", "flip-payload", b"\x01\xff\xff\x00\x02\x80")
put("block-blob", "raw-short", b"\x00KVBLOCK")
# Bodies of kv-serve's endpoints (ServeRequestFuzzer.cpp): the first byte
# picks the decoder (0 create, 1 append, 2 edit, 3 compose, 4 block,
# 5 generate, 6 completions, 7 chat), the rest is the body.
serve_seeds = [
    ("create", 0, '{"segments": [{"name": "system", "kind": "system", '
                  '"text": "You are terse.", "bos": true}, {"name": "city", '
                  '"kind": "fact", "tokens": [5, 6, 7]}, {"name": "answer", '
                  '"kind": "answer", "text": "x", "deps": ["city"]}]}'),
    ("append", 1, '{"name": "turn", "kind": "user", "text": "Caf\u00e9?"}'),
    ("edit-repair", 2, '{"segment": "city", "text": "Paris", '
                       '"strategy": "cot_slice", "repair": {"fraction": 0.15}}'),
    ("edit-erratum", 2, '{"segment": "city", "tokens": [9], "strategy": '
                        '"erratum", "correction": {"text": "No: Paris."}}'),
    ("compose", 3, '{"block": "manual", "name": "tools", "kind": "tool", '
                   '"deps": [], "repair": {"first_k": 4}}'),
    ("block", 4, '{"name": "manual", "text": "To search, say SEARCH."}'),
    ("generate", 5, '{"max_tokens": 8, "temperature": 0.7, "top_k": 40, '
                    '"top_p": 0.9, "seed": 3, "stop": ["\n"], "stream": true}'),
    ("completion", 6, '{"model": "m", "prompt": [1, 2, 3], "max_tokens": 4, '
                      '"n": 1, "logit_bias": {}, "stream_options": '
                      '{"include_usage": true}}'),
    ("chat", 7, '{"messages": [{"role": "system", "content": "S"}, {"role": '
                '"user", "content": [{"type": "text", "text": "Hi"}]}], '
                '"max_completion_tokens": 5}'),
]
for name, decoder, body in serve_seeds:
    put("serve-request", name, bytes([decoder]) + body.encode())
put("serve-request", "bad-utf8", b"\x00{\"segments\": [{\"name\": \"a\", "
    b"\"text\": \"\xc3\x28\"}]}")
put("serve-request", "deep", b"\x05" + b"[" * 40)
put("serve-request", "big-number", b"\x05{\"max_tokens\": 1e999}")
print("seeds written under", os.path.join(here, "corpus"))
