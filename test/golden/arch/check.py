#!/usr/bin/env python3
"""Holds KVIR to the architecture goldens (make-goldens.sh).

    check.py WORK_DIR

For each model of models.txt: writes its GGUF file as make-goldens.sh does
(make-vocabs.py, kv-convert; both on PATH or beside this file), runs the
token list of tokens.txt through kv-run with the generated CPU code and with
the oracle (--backend reference), and compares both with llama.cpp's logits
NAME.f32: max |difference| at most TOLERANCE and the same argmax at every
position. Prints one line per model and backend; exits 1 on a mismatch.
"""
import array
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# An f32 forward against llama.cpp's f32 forward (F32 weights): measured
# 1e-5 on the qwen2 model's logits (up to 35 in magnitude), 7e-7 on the
# Llama 3 model's (up to 2.3); the bound leaves room for summation order.
TOLERANCE = 1e-4


def floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def argmax(row):
    return max(range(len(row)), key=lambda i: row[i])


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    vocabs = os.path.join(work, "vocabs")
    subprocess.run([sys.executable,
                    os.path.join(HERE, "..", "tokenizer", "make-vocabs.py"),
                    "gguf", vocabs], check=True, stdout=subprocess.DEVNULL)
    tokens = os.path.join(HERE, "tokens.txt")
    n = len(open(tokens).read().split())
    ok = True
    for line in open(os.path.join(HERE, "models.txt")):
        if line.startswith("#") or not line.strip():
            continue
        name, vocab, spec = line.split()
        model = os.path.join(work, name + ".gguf")
        subprocess.run(["kv-convert", "synthetic:" + spec, model,
                        "--tokenizer", os.path.join(vocabs, vocab + ".gguf")],
                       check=True, stdout=subprocess.DEVNULL)
        golden = floats(os.path.join(HERE, name + ".f32"))
        width = len(golden) // n
        for backend in ("cpu", "reference"):
            out = os.path.join(work, name + "." + backend + ".f32")
            subprocess.run(["kv-run", "--model", model, "--tokens-file",
                            tokens, "--backend", backend, "--dump-logits",
                            out], check=True, stdout=subprocess.DEVNULL)
            got = floats(out)
            if len(got) != len(golden):
                print(f"{name} {backend}: {len(got)} logits, "
                      f"llama.cpp has {len(golden)}")
                ok = False
                continue
            diff = max(abs(a - b) for a, b in zip(got, golden))
            same = all(
                argmax(got[t * width:(t + 1) * width]) ==
                argmax(golden[t * width:(t + 1) * width]) for t in range(n))
            good = diff <= TOLERANCE and same
            ok = ok and good
            print(f"{name} {backend}: {n} positions x {width}, max |diff| "
                  f"{'within' if diff <= TOLERANCE else 'ABOVE'} "
                  f"{TOLERANCE:g}, argmax "
                  f"{'agrees' if same else 'DIFFERS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
