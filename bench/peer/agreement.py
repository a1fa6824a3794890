#!/usr/bin/env python3
"""The arithmetic of llama-agreement.sh, on float32 dumps and model files.

  agreement.py logits A.f32 B.f32 VOCAB    max |a - b| and top-1 agreement
  agreement.py dequant KVIR.bin GGML.f32   weights that differ: KVIR's
                                           llama2.c dump (kv-convert) against
                                           llama-logits --dequantize
  agreement.py rms F32.bin Q.bin           RMS error of Q's weights, and
                                           relative to F32's RMS
  agreement.py formats FILE.gguf           how many matrices of each type
"""
import array
import collections
import math
import struct
import sys


def floats(path, skip=0):
    return array.array('f', open(path, 'rb').read()[skip:])


def logits(a_path, b_path, vocab):
    a, b, v = floats(a_path), floats(b_path), int(vocab)
    n = len(a) // v
    worst = max(abs(x - y) for x, y in zip(a, b))
    top = sum(1 for t in range(n)
              if max(range(v), key=lambda i: a[t * v + i]) ==
              max(range(v), key=lambda i: b[t * v + i]))
    print("%.2e, %d/%d" % (worst, top, n))


def llama2c_weights(path):
    """A llama2.c file's weights without its header and legacy RoPE tables,
    in its order (that of llama-logits --dequantize)."""
    data = open(path, 'rb').read()
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack(
        '<7i', data[:28])
    head = dim // heads
    kv_dim = kv_heads * head
    w = array.array('f', data[28:])
    before = (abs(vocab) * dim + layers * dim + 2 * layers * dim * dim +
              2 * layers * dim * kv_dim + layers * dim +
              3 * layers * dim * hidden + dim)
    tables = seq * head // 2 * 2
    return w[:before] + w[before + tables:]


def dequant(kvir_path, ggml_path):
    kvir, ggml = llama2c_weights(kvir_path), floats(ggml_path)
    if len(kvir) != len(ggml):
        print("sizes differ: %d vs %d" % (len(kvir), len(ggml)))
        return
    print(sum(1 for x, y in zip(kvir, ggml) if x != y))


def rms(f32_path, q_path):
    a, b = floats(f32_path, 28), floats(q_path, 28)
    err = sum((x - y) * (x - y) for x, y in zip(a, b))
    ref = sum(x * x for x in a)
    print("%.3e (%.2f%%)" % (math.sqrt(err / len(a)), 100 * math.sqrt(err / ref)))


def formats(path):
    names = {0: 'f32', 1: 'f16', 2: 'q4_0', 3: 'q4_1', 6: 'q5_0', 7: 'q5_1',
             8: 'q8_0', 12: 'q4_k', 13: 'q5_k', 14: 'q6_k', 30: 'bf16'}
    b = open(path, 'rb').read()
    pos = 8
    n_tensors, n_keys = struct.unpack_from('<QQ', b, pos)
    pos += 16
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8,
              12: 8}

    def skip(t):
        nonlocal pos
        if t in scalar:
            pos += scalar[t]
        elif t == 8:
            n, = struct.unpack_from('<Q', b, pos)
            pos += 8 + n
        elif t == 9:
            et, n = struct.unpack_from('<IQ', b, pos)
            pos += 12
            for _ in range(n):
                skip(et)

    for _ in range(n_keys):
        n, = struct.unpack_from('<Q', b, pos)
        pos += 8 + n
        t, = struct.unpack_from('<I', b, pos)
        pos += 4
        skip(t)
    count = collections.Counter()
    for _ in range(n_tensors):
        n, = struct.unpack_from('<Q', b, pos)
        pos += 8 + n
        dims, = struct.unpack_from('<I', b, pos)
        pos += 4 + 8 * dims
        t, = struct.unpack_from('<I', b, pos)
        pos += 12
        if dims == 2:
            count[names.get(t, str(t))] += 1
    print(', '.join('%d %s' % (c, k) for k, c in sorted(count.items())))


if __name__ == '__main__':
    {'logits': logits, 'dequant': dequant, 'rms': rms,
     'formats': formats}[sys.argv[1]](*sys.argv[2:])
