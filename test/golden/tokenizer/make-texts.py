#!/usr/bin/env python3
"""Writes texts.txt, the texts the tokenizer goldens encode.

    python3 make-texts.py

One text per line, escaped: \\n, \\r, \\t, \\\\ and \\xHH for other bytes
below 0x20, 0x7F and bytes that are not UTF-8 (test/unit reads them back
with the same rules). The first texts are written by hand (white space
runs, contractions, numbers, scripts, emoji, code, special tokens of every
vocabulary, bytes that are not UTF-8); the rest are seeded random mixes of
fragments from those pools, so that the same seed always gives the same
file.
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))

HAND = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", "\r\n",
    " \r\n\r\n ", "Hello world", " Hello world", "Hello World", " Hello World!",
    "Hello, world!", " this is 🦙.cpp", "w048 7tuijk dsdfhu",
    "нещо на Български", "កាន់តែពិសេសអាចខលចេញ",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "Hello", " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello",
    " (", "\n =", "' era", "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "!!!!!!", "3", "33", "333", "3333", "33333", "333333", "3333333",
    "33333333", "333333333", "Cửa Việt", " discards", "a\u00a0b", "a\u3000b",
    "It's", "IT'S", "it'S", "we're WE'RE we'Re", "I'd I'D you've YOU'VE",
    "she'll SHE'LL i'm I'M", "'s 't 're 've 'm 'll 'd", "''s", "'", "'x",
    "don't", "John's book", "abracadabra", " supercalifragilistic",
    "supercalifragilistic", "x supercalifragilistic!",
    "123456789", "1,234,567.89", "0.5 + 0.25 = 0.75", "½ ¾ ² ³ ①②③ Ⅻ ٣٤٥ ३४५",
    "૧૨૩ ๑๒๓ 一二三", "1st 2nd 3rd", "a1b2c3", "x=10;y=200;z=3000",
    "    indented\n\tcode\n", "trailing   ", "  leading", "mid   dle",
    "a \n b", "a  \n\n  b", "a\t\tb", "end\n", "\n\nstart",
    "!@#$%^&*()_+-=[]{}|;':\",./<>?`~", " $100 +5 <a> =b ^c ~d |e `f",
    "«quotes» „low” ‘single’ —dash– …", "¿Qué? ¡Sí!", "、。「」『』（）！？",
    "Le café crème brûlée", "Straße Größe", "naïve façade", "e\u0301cole",
    "ñ n\u0303", "Привет мир", "Καλημέρα κόσμε", "我想在苹果公司工作",
    "日本語のテキスト", "カタカナ ひらがな", "안녕하세요 세계", "مرحبا بالعالم",
    "नमस्ते दुनिया", "สวัสดีครับ", "𝓗𝓮𝓵𝓵𝓸 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𐐀𐐁 𐐨𐐩", "Ꭰ Ꮳ ꮿ",
    "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇩🇪", "❤️", "a😀b", " 😀 ",
    "def f(x):\n    return x * 2\n",
    "int main() { return 0; }",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "https://example.com/a/b?c=1&d=2#e", "user@example.org", "C:\\path\\to\\file",
    "<html><body>Hi</body></html>", "SELECT * FROM t WHERE x >= 10;",
    "\x00", "a\x00b", "\x01\x02\x1f\x7f", "bell\x07tab\tvt\x0bff\x0c",
    "\x1c\x1d\x1e\x1f", "a\x85b", "\u2028\u2029", "\u200b\u200d\u2060",
    "\ufeffBOM", "\ue000private", "\U0010ffff", "\U000e0001",
    "\u0378unassigned", "\u2000\u2001\u200a x", "\u1680ogham",
    # Special tokens of the vocabularies, alone and in text.
    "<|begin_of_text|>", "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|reserved_special_token_0|><|end_of_text|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<think>\nhmm\n</think>\n\nanswer", "<tool_call>{\"a\": 1}", "<|endoftext|>",
    "text<|endoftext|>more", "<|endoftext|><|endoftext|>", "<|im_start|",
    "<｜begin▁of▁sentence｜>Hi<｜end▁of▁sentence｜>", "<|User|>hi<|Assistant|>yo",
    "<｜tool▁calls▁begin｜>f<｜tool▁sep｜>{}<|code|>x = 1<|code|>",
    ">>TITLE<<A title>>ABSTRACT<<", ">>QUESTION<< why? >>ANSWER<< because",
    "<fim_prefix>def<fim_suffix>end<fim_middle>", "<filename>a.py\nx", "<unk>",
    "a <unk> b", "<empty_output>", "<|padding|>x", "< |im_start| >",
]

# Bytes that are not UTF-8 (stray continuation bytes, cut sequences, bytes
# that never occur); overlong forms and surrogates are left to the unit
# tests (llama.cpp decodes those as code points, KVIR replaces them).
INVALID = [b"\xff", b"a\x80b", b"\xe2\x82", b"caf\xc3", b"\xc3(", b"\xe2\x28\xa1",
           b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"\x80\x81\x82", b"ok\xfe\xff!",
           b"\xe6\x97\xa5\xe6\x9c", b"\xc2"]

POOLS = {
    "word": ["the", "The", "THE", "quick", "brown", "fox", "Lily", "park",
             "tree", "ball", "hello", "world", "program", "function",
             "naïve", "café", "Straße", "Über", "niño", "corazón", "Москва",
             "Привет", "программирование", "Αθήνα", "ευχαριστώ", "北京",
             "苹果公司", "東京タワー", "ありがとう", "한국어", "서울", "العربية",
             "हिन्दी", "ภาษาไทย", "abracadabra", "supercalifragilistic"],
    "number": ["0", "7", "42", "123", "2024", "65535", "3.14159", "1,000",
               "1e-5", "0x1F", "٣", "½", "²", "Ⅻ", "999999999"],
    "punct": [".", ",", "!", "?", "...", "!!!", "?!", ";", ":", "-", "--",
              "(", ")", "[", "]", "{", "}", "\"", "'", "`", "~", "^", "|",
              "$", "+", "<", ">", "=", "@", "#", "%", "&", "*", "_", "/",
              "\\", "。", "，", "！", "？", "«", "»", "—", "…", "•", "€", "→",
              "∑", "≤"],
    "space": [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n",
              "\n ", "\t\t", "    ", "\u00a0", "\u3000", "\u2003"],
    "emoji": ["😀", "🦙", "🚀", "✅", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🎉", "🇫🇷"],
    "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T",
                    "'RE", "'Ll", "n't"],
    "code": ["def", "return", "x += 1", "a[i]", "f(x)", "->", "==", "!=",
             "&&", "||", "/* */", "//", "#include", "0b1010", "i++",
             "self.x", "__init__", "snake_case", "camelCase"],
    "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
                "<|eot_id|>", "<|begin_of_text|>", "<｜end▁of▁sentence｜>",
                ">>TITLE<<", "<fim_prefix>", "<unk>", "<|User|>"],
}
WEIGHTS = {"word": 30, "number": 10, "punct": 12, "space": 25, "emoji": 4,
           "contraction": 5, "code": 6, "special": 3}


def escape(data):
    out = []
    for b in data:
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif b < 0x20 or b == 0x7F:
            out.append("\\x%02X" % b)
        else:
            out.append(None)  # placeholder: raw byte
    # Raw bytes that are not UTF-8 are escaped too.
    result = bytearray()
    for b, e in zip(data, out):
        if e is not None:
            result += e.encode()
        else:
            result.append(b)
    text = bytes(result).decode("utf-8", errors="surrogateescape")
    return "".join("\\x%02X" % (ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF
                   else c for c in text)


def main():
    rng = random.Random(20261201)
    texts = [t.encode("utf-8") for t in HAND] + INVALID
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] for k in kinds]
    while len(texts) < 600:
        parts = []
        for _ in range(rng.randint(1, 14)):
            k = rng.choices(kinds, weights)[0]
            parts.append(rng.choice(POOLS[k]))
        text = "".join(parts).encode("utf-8")
        if rng.random() < 0.03:
            at = rng.randint(0, len(text))
            text = text[:at] + bytes([rng.choice([0x80, 0xBF, 0xC3, 0xE2,
                                                  0xF0, 0xFF])]) + text[at:]
        texts.append(text)
    with open(os.path.join(HERE, "texts.txt"), "w", encoding="utf-8",
              newline="\n") as f:
        for t in texts:
            f.write(escape(t) + "\n")
    print("make-texts: %d texts" % len(texts))


if __name__ == "__main__":
    main()
