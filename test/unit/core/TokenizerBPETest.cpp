//===- TokenizerBPETest.cpp - Tests of the byte-level BPE tokenizer -------===//
//
// Byte-level BPE on vocabularies built in memory: the byte alphabet, merge
// ranks, ignore_merges, every pre-tokenizer's rules (through the internal
// splitter), Unicode categories, special tokens, streaming decode, bad
// vocabularies and texts, and GGUF (vocabulary-only files, merges read and
// written). Token ids against llama.cpp are TokenizerGoldenTest.cpp's job.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/tokenizer/PreTokenizer.h"
#include "runtime/core/tokenizer/Unicode.h"
#include "test/unit/core/GoldenTexts.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

using Tokens = std::vector<int32_t>;
using TokenizerRef =
    std::unique_ptr<kvrt_tokenizer, void (*)(kvrt_tokenizer *)>;

/// GPT-2's byte alphabet character of byte `b`, in UTF-8.
std::string spell(unsigned char b) {
  bool printable =
      (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  char32_t c = b;
  if (!printable) {
    c = 256;
    for (int x = 0; x < b; ++x)
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE))
        ++c;
  }
  std::string out;
  kvrt::unicode::appendUtf8(c, out);
  return out;
}

std::string spellText(const std::string &text) {
  std::string out;
  for (unsigned char b : text)
    out += spell(b);
  return out;
}

/// A vocabulary in memory: the 256 byte tokens (id = byte), then `extra`
/// tokens (spelled from plain text unless typed other than NORMAL), then
/// the results of `merges` (plain text pairs) in order.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::string pre = "gpt-2";
  int32_t unk = -1, bos = -1, eos = -1;

  Vocab() {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(spell(static_cast<unsigned char>(b)));
      types.push_back(KVRT_TOKEN_NORMAL);
    }
  }
  int32_t add(const std::string &text, int32_t type = KVRT_TOKEN_NORMAL) {
    tokens.push_back(type == KVRT_TOKEN_NORMAL ? spellText(text) : text);
    types.push_back(type);
    return static_cast<int32_t>(tokens.size()) - 1;
  }
  /// Adds the merge left+right (and its result token unless it exists).
  int32_t merge(const std::string &left, const std::string &right) {
    merges.push_back(spellText(left) + " " + spellText(right));
    std::string joined = spellText(left + right);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == joined)
        return static_cast<int32_t>(i);
    return add(left + right);
  }
  int32_t id(const std::string &text) const {
    std::string spelled = spellText(text);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == spelled || tokens[i] == text)
        return static_cast<int32_t>(i);
    return -1;
  }
  kvrt_status build(TokenizerRef &out) const {
    std::vector<const char *> t, m;
    std::vector<size_t> tl, ml;
    for (const std::string &s : tokens) {
      t.push_back(s.data());
      tl.push_back(s.size());
    }
    for (const std::string &s : merges) {
      m.push_back(s.data());
      ml.push_back(s.size());
    }
    kvrt_bpe_vocab v = {};
    v.tokens = t.data();
    v.token_lengths = tl.data();
    v.token_types = types.data();
    v.n_tokens = static_cast<int32_t>(tokens.size());
    v.merges = m.data();
    v.merge_lengths = ml.data();
    v.n_merges = static_cast<int32_t>(merges.size());
    v.pre_tokenizer = pre.c_str();
    v.unk_id = unk;
    v.bos_id = bos;
    v.eos_id = eos;
    v.pad_id = -1;
    kvrt_tokenizer *raw = nullptr;
    kvrt_status s = kvrt_tokenizer_create_bpe(&v, &raw);
    out.reset(raw);
    return s;
  }
  TokenizerRef make() const {
    TokenizerRef out(nullptr, kvrt_tokenizer_release);
    EXPECT_EQ(build(out), KVRT_OK) << kvrt_last_error();
    return out;
  }
};

Tokens encode(const kvrt_tokenizer *tok, const std::string &text,
              uint32_t flags = 0) {
  Tokens out;
  EXPECT_EQ(kvir::encode(tok, text, flags, out), KVRT_OK) << kvrt_last_error();
  return out;
}

std::string decode(const kvrt_tokenizer *tok, const Tokens &ids,
                   uint32_t flags = 0) {
  std::string out;
  EXPECT_EQ(kvir::decode(tok, ids, out, flags), KVRT_OK) << kvrt_last_error();
  return out;
}

Tokens bytesOf(const std::string &text) {
  Tokens out;
  for (unsigned char b : text)
    out.push_back(b);
  return out;
}

TEST(BPETest, EveryByteHasItsAlphabetToken) {
  Vocab v;
  TokenizerRef tok = v.make();
  EXPECT_EQ(kvrt_tokenizer_get_kind(tok.get()), KVRT_TOKENIZER_BYTE_BPE);
  std::string all;
  for (int b = 1; b < 256; ++b)
    if (b < 0x80) // ASCII: valid UTF-8 byte by byte
      all += static_cast<char>(b);
  EXPECT_EQ(encode(tok.get(), all), bytesOf(all));
  EXPECT_EQ(decode(tok.get(), bytesOf(all)), all);
  // Each byte token decodes to its byte, the 256 of them.
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(decode(tok.get(), {b}), std::string(1, static_cast<char>(b)));
  // Spaces and newlines are Ġ and Ċ; multi-byte characters are their bytes.
  EXPECT_EQ(v.tokens[' '], "\xC4\xA0");
  EXPECT_EQ(v.tokens['\n'], "\xC4\x8A");
  EXPECT_EQ(encode(tok.get(), "é"), (Tokens{0xC3, 0xA9}));
  EXPECT_EQ(encode(tok.get(), "🦙"), (Tokens{0xF0, 0x9F, 0xA6, 0x99}));
}

TEST(BPETest, MergesApplyByRankThenLeftmost) {
  Vocab v;
  v.merge("b", "c"); // rank 0
  v.merge("a", "b"); // rank 1
  int32_t bc = v.id("bc"), ab = v.id("ab");
  TokenizerRef tok = v.make();
  EXPECT_EQ(encode(tok.get(), "abc"), (Tokens{'a', bc}));
  EXPECT_EQ(encode(tok.get(), "abx"), (Tokens{ab, 'x'}));

  Vocab w;
  w.merge("a", "b"); // rank 0 now
  w.merge("b", "c");
  TokenizerRef tok2 = w.make();
  EXPECT_EQ(encode(tok2.get(), "abc"), (Tokens{w.id("ab"), 'c'}));

  // A tie between equal pairs: the leftmost merges first.
  Vocab x;
  int32_t aa = x.merge("a", "a");
  TokenizerRef tok3 = x.make();
  EXPECT_EQ(encode(tok3.get(), "aaa"), (Tokens{aa, 'a'}));
  EXPECT_EQ(encode(tok3.get(), "aaaa"), (Tokens{aa, aa}));

  // Merges chain: (a b) then (ab c) then (abc d); a later merge that the
  // earlier ones broke apart never applies.
  Vocab y;
  y.merge("a", "b");
  y.merge("ab", "c");
  int32_t abcd = y.merge("abc", "d");
  y.merge("c", "d");
  TokenizerRef tok4 = y.make();
  EXPECT_EQ(encode(tok4.get(), "abcd"), (Tokens{abcd}));
  EXPECT_EQ(encode(tok4.get(), "xcd"), (Tokens{'x', y.id("cd")}));
  EXPECT_EQ(decode(tok4.get(), {abcd}), "abcd");
}

TEST(BPETest, MergesStayInsideWords) {
  Vocab v;
  int32_t spaceB = v.merge(" ", "b");
  int32_t ab = v.merge("a", "b");
  TokenizerRef tok = v.make();
  // GPT-2 cuts "a b" into "a" and " b": the pair (a, ' ') is never seen.
  EXPECT_EQ(encode(tok.get(), "a b"), (Tokens{'a', spaceB}));
  EXPECT_EQ(encode(tok.get(), "ab"), (Tokens{ab}));
}

TEST(BPETest, IgnoreMergesTakesWholeWordTokens) {
  Vocab v;
  v.merge("b", "c");
  int32_t abc = v.add("abc"); // no merge makes it
  v.pre = "llama-bpe";
  TokenizerRef llama = v.make();
  EXPECT_EQ(encode(llama.get(), "abc"), (Tokens{abc}));
  EXPECT_EQ(encode(llama.get(), "abcd"), (Tokens{'a', v.id("bc"), 'd'}));
  v.pre = "qwen2"; // HF's Qwen 2 tokenizer merges
  TokenizerRef qwen = v.make();
  EXPECT_EQ(encode(qwen.get(), "abc"), (Tokens{'a', v.id("bc")}));
  // A control token is never taken for a word.
  Vocab w;
  int32_t control = w.add("abc", KVRT_TOKEN_CONTROL);
  w.pre = "llama-bpe";
  TokenizerRef tok = w.make();
  EXPECT_EQ(encode(tok.get(), "abc"), bytesOf("abc"));
  EXPECT_EQ(encode(tok.get(), "abc", KVRT_ENCODE_SPECIAL), (Tokens{control}));
}

/// The words `rules` cuts `text` into.
std::vector<std::string> words(const char *pre, const std::string &text) {
  std::optional<kvrt::tok::PreTokenizerSpec> spec =
      kvrt::tok::findPreTokenizer(pre);
  EXPECT_TRUE(spec) << pre;
  std::vector<char32_t> cps = kvrt::unicode::decodeUtf8(text);
  std::vector<size_t> ends;
  kvrt::tok::preTokenize(spec->rules, cps.data(), cps.size(), ends);
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t end : ends) {
    std::string word;
    for (size_t i = begin; i < end; ++i)
      kvrt::unicode::appendUtf8(cps[i], word);
    out.push_back(word);
    begin = end;
  }
  return out;
}

using Words = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(words("gpt-2", "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(words("gpt-2", "it's IT'S we'll"),
            (Words{"it", "'s", " IT", "'", "S", " we", "'ll"}));
  EXPECT_EQ(words("gpt-2", "12345 x1"), (Words{"12345", " x", "1"}));
  EXPECT_EQ(words("gpt-2", "a!!? b"), (Words{"a", "!!?", " b"}));
  // \s+(?!\S): the last space of a run goes with the next word.
  EXPECT_EQ(words("gpt-2", "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(words("gpt-2", "a  \n b"), (Words{"a", "  \n", " b"}));
  EXPECT_EQ(words("gpt-2", "a \n"), (Words{"a", " \n"}));
  EXPECT_EQ(words("gpt-2", "\tx"), (Words{"\t", "x"}));
  // Unicode categories: accents (Mn) are not letters, other scripts are.
  EXPECT_EQ(words("gpt-2", "e\u0301t\u00e9"),
            (Words{"e", "\u0301", "t\u00e9"}));
  EXPECT_EQ(words("gpt-2", "Привет мир"), (Words{"Привет", " мир"}));
  EXPECT_EQ(words("gpt-2", "我想 ١٢٣"), (Words{"我想", " ١٢٣"}));
  EXPECT_EQ(words("gpt-2", "a\u3000b"), (Words{"a", "\u3000", "b"}));
  EXPECT_EQ(words("gpt-2", "x 😀😀"), (Words{"x", " 😀😀"}));
}

TEST(PreTokenizerTest, Llama3AndQwen2) {
  EXPECT_EQ(words("llama-bpe", "Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(words("llama-bpe", "IT'S it'Ll"),
            (Words{"IT", "'S", " it", "'Ll"}));
  EXPECT_EQ(words("llama-bpe", "3333333"), (Words{"333", "333", "3"}));
  EXPECT_EQ(words("qwen2", "3333"), (Words{"3", "3", "3", "3"}));
  // [^\r\n\p{L}\p{N}]?\p{L}+: one non-letter leads a word.
  EXPECT_EQ(words("llama-bpe", "(hello) $x"),
            (Words{"(hello", ")", " $", "x"}));
  // ?[^\s\p{L}\p{N}]+[\r\n]*: punctuation keeps the line breaks after it.
  EXPECT_EQ(words("llama-bpe", "a.\n\nb"), (Words{"a", ".\n\n", "b"}));
  // \s*[\r\n]+: white space up to the last line break.
  EXPECT_EQ(words("llama-bpe", "a \n \n  b"),
            (Words{"a", " \n \n", " ", " b"}));
  EXPECT_EQ(words("llama-bpe", "\n\n  x"), (Words{"\n\n", " ", " x"}));
  EXPECT_EQ(words("llama-bpe", "    Hello\n    Hello"),
            (Words{"   ", " Hello", "\n", "   ", " Hello"}));
  EXPECT_EQ(words("llama-bpe", "x  "), (Words{"x", "  "}));
  EXPECT_EQ(words("qwen2", "\u0928\u092e\u0938\u094d\u0924\u0947"),
            (Words{"\u0928\u092e\u0938", "\u094d\u0924", "\u0947"}));
}

TEST(PreTokenizerTest, DeepSeek) {
  EXPECT_EQ(words("deepseek-llm", "Hello 世界123 !"),
            (Words{"Hello", " ", "世界", "123", " !"}));
  EXPECT_EQ(words("deepseek-llm", "a\nb"), (Words{"a", "\n", "b"}));
  EXPECT_EQ(words("deepseek-llm", "x  "), (Words{"x", "  "}));
  EXPECT_EQ(words("deepseek-llm", "Ωμέγα"), (Words{"Ωμέγα"}));
  // U+3000 is white space: never in the CJK or punctuation runs.
  EXPECT_EQ(words("deepseek-llm", "你\u3000好。"),
            (Words{"你", "\u3000", "好", "。"}));
  EXPECT_EQ(words("deepseek-coder", "ab12 .c"),
            (Words{"ab", "1", "2", " .", "c"}));
  EXPECT_EQ(words("deepseek-coder", "한국어 x"), (Words{"한국어", " x"}));
}

TEST(PreTokenizerTest, FalconStarcoderDefault) {
  EXPECT_EQ(words("falcon", "a...b 1234"),
            (Words{"a", "...", "b", " ", "123", "4"}));
  EXPECT_EQ(words("falcon", "x+=`y`"), (Words{"x", "+=`", "y", "`"}));
  EXPECT_EQ(words("starcoder", "x 12"), (Words{"x", " ", "1", "2"}));
  EXPECT_EQ(words("default", "a+b 12345"),
            (Words{"a", "+", "b", " ", "123", "45"}));
  // Falcon's punctuation run takes the backquote, the default one does not.
  EXPECT_EQ(words("falcon", "a`+b"), (Words{"a", "`+", "b"}));
  EXPECT_EQ(words("default", "a`+b"), (Words{"a", "`", "+", "b"}));
}

TEST(PreTokenizerTest, NamesAreChecked) {
  EXPECT_FALSE(kvrt::tok::findPreTokenizer("tekken"));
  EXPECT_TRUE(kvrt::tok::findPreTokenizer("llama3"));
  Vocab v;
  v.pre = "tekken";
  TokenizerRef tok(nullptr, kvrt_tokenizer_release);
  EXPECT_EQ(v.build(tok), KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("pre-tokenizer 'tekken' is not supported (these are: "
                      "llama-bpe, qwen2, gpt-2, deepseek-llm, deepseek-coder, "
                      "falcon, starcoder, default"),
            std::string::npos)
      << kvrt_last_error();
}

TEST(UnicodeTest, CategoriesComeFromTheTables) {
  namespace u = kvrt::unicode;
  EXPECT_STREQ(u::version(), "15.0.0");
  EXPECT_EQ(u::category('A'), u::Lu);
  EXPECT_EQ(u::category(0x00E9), u::Ll);  // é
  EXPECT_EQ(u::category(0x0301), u::Mn);  // combining acute
  EXPECT_EQ(u::category(0x0663), u::Nd);  // Arabic-Indic three
  EXPECT_EQ(u::category(0x216B), u::Nl);  // Roman numeral twelve
  EXPECT_EQ(u::category(0x00BD), u::No);  // ½
  EXPECT_EQ(u::category(0x4E2D), u::Lo);  // 中 (a range of UnicodeData)
  EXPECT_EQ(u::category(0xAC00), u::Lo);  // 가
  EXPECT_EQ(u::category(0x1F600), u::So); // 😀
  EXPECT_EQ(u::category(0x0378), u::Cn);  // unassigned
  EXPECT_EQ(u::category(0xE000), u::Co);
  EXPECT_EQ(u::category(0x110000), u::Cn);
  EXPECT_TRUE(u::isWhiteSpace(0x3000));
  EXPECT_TRUE(u::isWhiteSpace(0x85));
  EXPECT_FALSE(u::isWhiteSpace(0x200B)); // zero width space: Cf
  EXPECT_FALSE(u::isWhiteSpace(0x1C));
}

TEST(UnicodeTest, InvalidUtf8BecomesReplacementPerByte) {
  namespace u = kvrt::unicode;
  auto cps = [](const std::string &s) { return u::decodeUtf8(s); };
  using C = std::vector<char32_t>;
  EXPECT_EQ(cps("a\x80z"), (C{'a', 0xFFFD, 'z'}));
  EXPECT_EQ(cps("\xE2\x82"), (C{0xFFFD, 0xFFFD}));
  EXPECT_EQ(cps("\xC0\x80"), (C{0xFFFD, 0xFFFD}));             // overlong
  EXPECT_EQ(cps("\xED\xA0\x80"), (C{0xFFFD, 0xFFFD, 0xFFFD})); // surrogate
  EXPECT_EQ(cps("\xF4\x90\x80\x80"), (C{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
  EXPECT_EQ(cps("\xF0\x9F\x98\x80"), (C{0x1F600}));
}

TEST(BPETest, InvalidUtf8IsEncodedAsReplacement) {
  Vocab v;
  TokenizerRef tok = v.make();
  // Each byte that does not begin a character becomes U+FFFD (EF BF BD).
  EXPECT_EQ(encode(tok.get(), "a\xFF"), (Tokens{'a', 0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(decode(tok.get(), encode(tok.get(), "x\xE2\x82")),
            "x\xEF\xBF\xBD\xEF\xBF\xBD");
  // The documented bound: 3 tokens a byte, plus BOS and EOS.
  std::string bad(50, '\xFF');
  EXPECT_EQ(encode(tok.get(), bad).size(), 150u);
}

TEST(BPETest, HugeTextsAreRefused) {
  Vocab v;
  TokenizerRef tok = v.make();
  char one = 'a';
  int64_t n = 0;
  // The length is checked before the text is read.
  EXPECT_EQ(kvrt_tokenizer_encode_ex(tok.get(), &one,
                                     KVRT_TOKENIZER_MAX_TEXT_BYTES + 1, 0,
                                     nullptr, 0, &n),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("encode it in parts"),
            std::string::npos)
      << kvrt_last_error();
}

TEST(BPETest, MissingByteTokensUseUnkOrFail) {
  Vocab v;
  v.tokens['z'] = "<not z>"; // no token spells the byte 'z' any more
  TokenizerRef tok = v.make();
  Tokens out;
  EXPECT_EQ(kvir::encode(tok.get(), "az", 0u, out), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("the byte 0x7A (text offset 1) has no token"),
            std::string::npos)
      << kvrt_last_error();
  // A continuation byte of a valid character is checked as itself (it was
  // taken for an invalid byte, U+FFFD's bytes checked instead, and its
  // missing token came out as id -1).
  Vocab accented;
  accented.tokens[0xA9] = "<not A9>";
  TokenizerRef noA9 = accented.make();
  EXPECT_EQ(kvir::encode(noA9.get(), "a\xC3\xA9", 0u, out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("the byte 0xA9 (text offset 1) has no token"),
            std::string::npos)
      << kvrt_last_error();
  v.unk = v.add("<unk>", KVRT_TOKEN_UNKNOWN);
  TokenizerRef withUnk = v.make();
  EXPECT_EQ(encode(withUnk.get(), "az"), (Tokens{'a', v.unk}));
}

TEST(BPETest, SpecialTokens) {
  Vocab v;
  int32_t eot = v.add("<|eot|>", KVRT_TOKEN_CONTROL);
  int32_t start = v.add("<|im_start|>", KVRT_TOKEN_CONTROL);
  int32_t user = v.add("<u>", KVRT_TOKEN_USER_DEFINED);
  int32_t longer = v.add("<u><v>", KVRT_TOKEN_USER_DEFINED);
  v.bos = start;
  v.eos = eot;
  TokenizerRef tok = v.make();
  // Plain text never yields control tokens; user-defined ones always match.
  Tokens plain = encode(tok.get(), "<|eot|>");
  EXPECT_EQ(plain, bytesOf("<|eot|>"));
  EXPECT_EQ(encode(tok.get(), "a<u>b"), (Tokens{'a', user, 'b'}));
  // Longest first: "<u><v>" before "<u>".
  EXPECT_EQ(encode(tok.get(), "<u><v><u>"), (Tokens{longer, user}));
  Tokens special =
      encode(tok.get(), "<|im_start|>hi<|eot|>", KVRT_ENCODE_SPECIAL);
  EXPECT_EQ(special, (Tokens{start, 'h', 'i', eot}));
  EXPECT_EQ(encode(tok.get(), "x", KVRT_ENCODE_BOS | KVRT_ENCODE_EOS),
            (Tokens{start, 'x', eot}));
  // Decoding renders control tokens only when asked; user-defined always.
  EXPECT_EQ(decode(tok.get(), special), "hi");
  EXPECT_EQ(decode(tok.get(), special, KVRT_DECODE_SPECIAL),
            "<|im_start|>hi<|eot|>");
  EXPECT_EQ(decode(tok.get(), {user}), "<u>");
  EXPECT_EQ(kvrt_tokenizer_token_type(tok.get(), eot), KVRT_TOKEN_CONTROL);
  EXPECT_EQ(kvrt_tokenizer_token_type(tok.get(), user),
            KVRT_TOKEN_USER_DEFINED);
  EXPECT_EQ(kvrt_tokenizer_token_type(tok.get(), -1), KVRT_TOKEN_UNDEFINED);
  // ADD_SPECIAL follows the vocabulary's add_bos / add_eos (both off here).
  EXPECT_EQ(encode(tok.get(), "x", KVRT_ENCODE_ADD_SPECIAL), (Tokens{'x'}));
}

/// Decodes `ids` token by token; returns the pieces, the last from finish.
std::vector<std::string> stream(const kvrt_tokenizer *tok, const Tokens &ids,
                                uint32_t flags = 0) {
  kvrt_decode_stream s;
  kvrt_decode_stream_init(&s, flags);
  std::vector<std::string> pieces;
  char buffer[KVRT_TOKENIZER_MAX_PIECE_BYTES + 4];
  for (int32_t id : ids) {
    size_t n = 0;
    EXPECT_EQ(
        kvrt_tokenizer_decode_next(tok, &s, id, buffer, sizeof(buffer), &n),
        KVRT_OK)
        << kvrt_last_error();
    pieces.emplace_back(buffer, n);
  }
  size_t n = 0;
  EXPECT_EQ(kvrt_tokenizer_decode_finish(&s, buffer, sizeof(buffer), &n),
            KVRT_OK);
  pieces.emplace_back(buffer, n);
  return pieces;
}

TEST(StreamDecodeTest, HoldsBackSplitCharacters) {
  Vocab v;
  int32_t e9 = v.merge("\xC3", "\xA9"); // é as one token
  TokenizerRef tok = v.make();
  using P = std::vector<std::string>;
  // "é" in two byte tokens: nothing after the first, the character after
  // the second.
  EXPECT_EQ(stream(tok.get(), {0xC3, 0xA9, 'x'}), (P{"", "é", "x", ""}));
  EXPECT_EQ(stream(tok.get(), {e9}), (P{"é", ""}));
  EXPECT_EQ(stream(tok.get(), {0xF0, 0x9F, 0xA6, 0x99}),
            (P{"", "", "", "🦙", ""}));
  // A stray continuation byte cannot become a character: given out at once.
  EXPECT_EQ(stream(tok.get(), {'a', 0x80, 'b'}), (P{"a", "\x80", "b", ""}));
  // A lead byte followed by a non-continuation: both given out.
  EXPECT_EQ(stream(tok.get(), {0xE2, 'x'}), (P{"", "\xE2x", ""}));
  // E0 80 can never be a character (overlong): not held back.
  EXPECT_EQ(stream(tok.get(), {0xE0, 0x80}), (P{"", "\xE0\x80", ""}));
  // Cut at the end: finish gives the held-back bytes as they are.
  EXPECT_EQ(stream(tok.get(), {'z', 0xE6, 0x97}), (P{"z", "", "", "\xE6\x97"}));
}

TEST(StreamDecodeTest, BufferTooSmallChangesNothing) {
  Vocab v;
  TokenizerRef tok = v.make();
  kvrt_decode_stream s;
  kvrt_decode_stream_init(&s, 0);
  char buffer[8];
  size_t n = 0;
  ASSERT_EQ(kvrt_tokenizer_decode_next(tok.get(), &s, 0xC3, buffer, 8, &n),
            KVRT_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(kvrt_tokenizer_decode_next(tok.get(), &s, 0xA9, buffer, 1, &n),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, 2u);
  ASSERT_EQ(kvrt_tokenizer_decode_next(tok.get(), &s, 0xA9, buffer, 2, &n),
            KVRT_OK);
  EXPECT_EQ(std::string(buffer, n), "é");
  EXPECT_EQ(kvrt_tokenizer_decode_next(tok.get(), &s, 9999, buffer, 8, &n),
            KVRT_ERR_INVALID_ARGUMENT);
}

/// The golden vocabularies' texts: every valid UTF-8 text round-trips, and
/// the streamed pieces are valid UTF-8 and add up to the whole decode.
TEST(StreamDecodeTest, GoldenTextsRoundTrip) {
  kvrt_tokenizer *raw = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(KVIR_GOLDEN_VOCAB_DIR "/llama-bpe.gguf", &raw),
            KVRT_OK)
      << kvrt_last_error();
  TokenizerRef tok(raw, kvrt_tokenizer_release);
  std::vector<std::string> texts = kvir::test::readGoldenTexts(KVIR_GOLDEN_DIR);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string &text = texts[i];
    Tokens ids = encode(tok.get(), text);
    std::string whole = decode(tok.get(), ids);
    // Invalid bytes come back as U+FFFD.
    std::string expected;
    for (char32_t c : kvrt::unicode::decodeUtf8(text))
      kvrt::unicode::appendUtf8(c, expected);
    EXPECT_EQ(whole, expected) << "text " << i + 1;
    std::string joined;
    for (const std::string &piece : stream(tok.get(), ids)) {
      std::string_view rest = piece;
      while (!rest.empty()) {
        size_t n = kvrt::unicode::utf8SequenceLength(rest.substr(0, 4));
        ASSERT_GT(n, 0u) << "a streamed piece cuts a character, text " << i + 1;
        rest.remove_prefix(n);
      }
      joined += piece;
    }
    EXPECT_EQ(joined, whole);
  }
  EXPECT_GE(texts.size(), 500u);
}

TEST(BPEVocabTest, MalformedVocabulariesAreNamed) {
  struct Case {
    const char *what;
    void (*edit)(Vocab &);
    const char *message;
  };
  Case cases[] = {
      {"unknown left piece",
       [](Vocab &v) { v.merges.push_back("Q\xC4\xA0x y"); },
       "merge 0 'Q\xC4\xA0x y': 'Q\xC4\xA0x' is not a token"},
      {"unknown right piece", [](Vocab &v) { v.merges.push_back("a zz"); },
       "merge 0 'a zz': 'zz' is not a token"},
      {"result not a token", [](Vocab &v) { v.merges.push_back("a b"); },
       "merge 0 'a b' makes 'ab', which is not a token"},
      {"no separator", [](Vocab &v) { v.merges.push_back("ab"); },
       "merge 0 'ab' is not two tokens separated by one space"},
      {"empty right side", [](Vocab &v) { v.merges.push_back("a "); },
       "merge 0 'a ' is not two tokens separated by one space"},
      {"empty merge", [](Vocab &v) { v.merges.push_back(""); },
       "merge 0 '' is not two tokens separated by one space"},
      {"two spaces", [](Vocab &v) { v.merges.push_back("a  b"); },
       "merge 0 'a  b': ' b' is not a token"},
      {"repeated token",
       [](Vocab &v) {
         v.tokens.push_back("a");
         v.types.push_back(1);
       },
       "token 256 'a' repeats token 97"},
      {"empty token",
       [](Vocab &v) {
         v.tokens.push_back("");
         v.types.push_back(1);
       },
       "token 256 has 0 bytes"},
      {"bad type", [](Vocab &v) { v.types[5] = 9; },
       "token 5 has type 9; token types are 0 to 6"},
      {"byte type misspelled", [](Vocab &v) { v.types[5] = KVRT_TOKEN_BYTE; },
       "token 5 has the byte type but is not spelled <0xHH>"},
      {"bad BOS", [](Vocab &v) { v.bos = 256; },
       "BOS id 256 is neither -1 nor in the vocabulary [0, 256)"},
  };
  for (const Case &c : cases) {
    Vocab v;
    c.edit(v);
    TokenizerRef tok(nullptr, kvrt_tokenizer_release);
    EXPECT_NE(v.build(tok), KVRT_OK) << c.what;
    EXPECT_FALSE(tok) << c.what;
    EXPECT_NE(std::string(kvrt_last_error()).find(c.message), std::string::npos)
        << c.what << ": " << kvrt_last_error();
  }
  // A repeated merge keeps its first rank.
  Vocab v;
  v.merge("a", "b");
  v.merges.push_back(v.merges[0]);
  EXPECT_TRUE(v.make());
}

std::string scratchPath(const std::string &name) {
  return (std::filesystem::temp_directory_path() /
          ("kvir-bpe-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

TEST(BPEGGUFTest, VocabularyOnlyFilesLoad) {
  kvrt_tokenizer *raw = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(KVIR_GOLDEN_VOCAB_DIR "/qwen2.gguf", &raw),
            KVRT_OK)
      << kvrt_last_error();
  TokenizerRef tok(raw, kvrt_tokenizer_release);
  EXPECT_EQ(kvrt_tokenizer_get_kind(tok.get()), KVRT_TOKENIZER_BYTE_BPE);
  EXPECT_STREQ(kvrt_tokenizer_pre_tokenizer(tok.get()), "qwen2");
  EXPECT_EQ(kvrt_tokenizer_add_bos(tok.get()), 0);
  int32_t eos = kvrt_tokenizer_eos_id(tok.get());
  ASSERT_GE(eos, 0);
  const char *piece;
  size_t length;
  ASSERT_EQ(kvrt_tokenizer_get_piece(tok.get(), eos, &piece, &length, nullptr),
            KVRT_OK);
  EXPECT_EQ(std::string(piece, length), "<|im_end|>");
  EXPECT_EQ(kvrt_tokenizer_pad_id(tok.get()), kvrt_tokenizer_bos_id(tok.get()));

  raw = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(KVIR_GOLDEN_VOCAB_DIR "/llama-bpe.gguf", &raw),
            KVRT_OK);
  TokenizerRef llama(raw, kvrt_tokenizer_release);
  EXPECT_EQ(kvrt_tokenizer_add_bos(llama.get()), 1);
  Tokens ids = encode(llama.get(), "Hi", KVRT_ENCODE_ADD_SPECIAL);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], kvrt_tokenizer_bos_id(llama.get()));
}

TEST(BPEGGUFTest, WrittenWithAModelAndReadBack) {
  kvrt_tokenizer *raw = nullptr;
  ASSERT_EQ(
      kvrt_tokenizer_load(KVIR_GOLDEN_VOCAB_DIR "/deepseek-llm.gguf", &raw),
      KVRT_OK);
  TokenizerRef tok(raw, kvrt_tokenizer_release);
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.seq_len = 32;
  c.vocab_size = kvrt_tokenizer_vocab_size(tok.get());
  kvrt_model *model = nullptr;
  ASSERT_EQ(kvrt_model_synthetic(&c, 7, &model), KVRT_OK) << kvrt_last_error();
  std::string path = scratchPath("model.gguf");
  ASSERT_EQ(kvrt_model_save_gguf(model, tok.get(), KVRT_GGUF_F32, path.c_str()),
            KVRT_OK)
      << kvrt_last_error();
  kvrt_model_release(model);
  raw = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(path.c_str(), &raw), KVRT_OK)
      << kvrt_last_error();
  TokenizerRef back(raw, kvrt_tokenizer_release);
  std::remove(path.c_str());
  ASSERT_EQ(kvrt_tokenizer_vocab_size(back.get()),
            kvrt_tokenizer_vocab_size(tok.get()));
  EXPECT_STREQ(kvrt_tokenizer_pre_tokenizer(back.get()), "deepseek-llm");
  EXPECT_EQ(kvrt_tokenizer_add_bos(back.get()), 1);
  EXPECT_EQ(kvrt_tokenizer_bos_id(back.get()),
            kvrt_tokenizer_bos_id(tok.get()));
  for (int32_t id = 0; id < kvrt_tokenizer_vocab_size(tok.get()); ++id)
    ASSERT_EQ(kvrt_tokenizer_token_type(back.get(), id),
              kvrt_tokenizer_token_type(tok.get(), id));
  for (const char *text :
       {"Hello world 123", "Привет, 世界!\n\n  x", "<｜begin▁of▁sentence｜>hi"})
    for (uint32_t flags : {0u, uint32_t(KVRT_ENCODE_SPECIAL)})
      EXPECT_EQ(encode(back.get(), text, flags), encode(tok.get(), text, flags))
          << text;
}

} // namespace
