//===- TokenizerTest.cpp - Tests of the llama2.c tokenizer ------*- C++ -*-===//
//
// Pins encodings of stories260K's tokenizer (tok512.bin) against llama2.c's
// algorithm, checks the heap-based merge against a direct port of llama2.c's
// quadratic loop, works BPE merges by hand on a tiny vocabulary, and feeds
// the loader malformed files. Tests that need tok512.bin skip, with the
// reason, where it is absent.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVTokenizer.h"

#include "gtest/gtest.h"

#include <cmath>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

using Tokens = std::vector<int32_t>;

struct TokenizerDeleter {
  void operator()(kvrt_tokenizer *t) const { kvrt_tokenizer_release(t); }
};
using TokenizerPtr = std::unique_ptr<kvrt_tokenizer, TokenizerDeleter>;

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

Tokens readTokens(const std::string &path) {
  std::ifstream in(path);
  Tokens tokens;
  for (int32_t t; in >> t;)
    tokens.push_back(t);
  return tokens;
}

/// Encodes `text`, failing the test (non-fatally) on an error.
Tokens encode(const kvrt_tokenizer *tok, const std::string &text,
              bool bos = false, bool eos = false) {
  Tokens out;
  EXPECT_EQ(kvir::encode(tok, text, bos, eos, out), KVRT_OK)
      << kvrt_last_error();
  return out;
}

/// Decodes `tokens`, failing the test (non-fatally) on an error.
std::string decode(const kvrt_tokenizer *tok, const Tokens &tokens) {
  std::string out;
  EXPECT_EQ(kvir::decode(tok, tokens, out), KVRT_OK) << kvrt_last_error();
  return out;
}

/// The stories260K tokenizer, loaded once per test.
class Tok512Test : public ::testing::Test {
protected:
  void SetUp() override {
    if (!std::filesystem::exists(KVIR_TEST_TOKENIZER))
      GTEST_SKIP() << "tok512.bin not found at " KVIR_TEST_TOKENIZER
                      " (set KVIR_TEST_MODEL at configure time)";
    kvrt_tokenizer *raw = nullptr;
    ASSERT_EQ(kvrt_tokenizer_load(KVIR_TEST_TOKENIZER, &raw), KVRT_OK)
        << kvrt_last_error();
    tok.reset(raw);
  }
  TokenizerPtr tok;
};

TEST_F(Tok512Test, VocabularyAndSpecialIds) {
  EXPECT_EQ(kvrt_tokenizer_vocab_size(tok.get()), 512);
  EXPECT_EQ(kvrt_tokenizer_unk_id(tok.get()), 0);
  EXPECT_EQ(kvrt_tokenizer_bos_id(tok.get()), 1);
  EXPECT_EQ(kvrt_tokenizer_eos_id(tok.get()), 2);
  const char *bytes = nullptr;
  size_t length = 0;
  float score = 0;
  ASSERT_EQ(kvrt_tokenizer_get_piece(tok.get(), 403, &bytes, &length, &score),
            KVRT_OK);
  EXPECT_EQ(std::string(bytes, length), " Once");
  EXPECT_EQ(score, -144.0f);
  ASSERT_EQ(
      kvrt_tokenizer_get_piece(tok.get(), 3 + 0x41, &bytes, &length, nullptr),
      KVRT_OK);
  EXPECT_EQ(std::string(bytes, length), "<0x41>");
  EXPECT_EQ(kvrt_tokenizer_get_piece(tok.get(), 512, &bytes, &length, nullptr),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("id 512 is outside the "
                      "vocabulary [0, 512)"),
            std::string::npos)
      << kvrt_last_error();
}

// The README's " Once upon a time" is the text after the dummy prefix: the
// caller's "Once upon a time" gets the space and encodes to those four ids.
TEST_F(Tok512Test, PinnedEncodingWithDummyPrefix) {
  EXPECT_EQ(encode(tok.get(), "Once upon a time"),
            (Tokens{403, 407, 261, 378}));
  EXPECT_EQ(encode(tok.get(), "Once upon a time", /*bos=*/true),
            (Tokens{1, 403, 407, 261, 378}));
  EXPECT_EQ(encode(tok.get(), "Once upon a time", true, /*eos=*/true),
            (Tokens{1, 403, 407, 261, 378, 2}));
  // Text that already starts with a space keeps it: the dummy space stays a
  // piece of its own (410 = " "), as llama2.c would output.
  EXPECT_EQ(encode(tok.get(), " Once upon a time"),
            (Tokens{410, 403, 407, 261, 378}));
  EXPECT_EQ(encode(tok.get(), "the cat sat"),
            (Tokens{265, 280, 294, 262, 294}));
  EXPECT_EQ(encode(tok.get(), "hello"), (Tokens{281, 306, 414}));
}

// "é" (two bytes) is a piece of its own, 485: code points are looked up
// whole before any byte fallback.
TEST_F(Tok512Test, MultiByteCharacterPiece) {
  EXPECT_EQ(encode(tok.get(), "\xC3\xA9"), (Tokens{410, 485}));
  EXPECT_EQ(decode(tok.get(), {1, 410, 485}), "\xC3\xA9");
}

TEST_F(Tok512Test, GreedyReferenceDecodesAndRoundTrips) {
  if (!std::filesystem::exists(KVIR_TEST_GREEDY_TOKENS))
    GTEST_SKIP() << "reference tokens not found at " KVIR_TEST_GREEDY_TOKENS;
  Tokens greedy = readTokens(KVIR_TEST_GREEDY_TOKENS);
  ASSERT_EQ(greedy.size(), 81u);
  ASSERT_EQ(greedy[0], 1);
  std::string text = decode(tok.get(), greedy);
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to "
      "play outside in the park.";
  EXPECT_EQ(text.substr(0, expected.size()), expected);
  // Token 13 is the byte piece <0x0A>.
  EXPECT_NE(text.find("too high.\nLily's mom said"), std::string::npos) << text;
  // The model's greedy output happens to be the canonical encoding of its
  // text, so the round trip is exact.
  EXPECT_EQ(encode(tok.get(), text, /*bos=*/true), greedy);

  // Streaming with decode_token gives the same text.
  std::string streamed;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const char *piece = nullptr;
    size_t length = 0;
    ASSERT_EQ(kvrt_tokenizer_decode_token(tok.get(), i ? greedy[i - 1] : -1,
                                          greedy[i], &piece, &length),
              KVRT_OK)
        << kvrt_last_error();
    streamed.append(piece, length);
  }
  EXPECT_EQ(streamed, text);
}

TEST_F(Tok512Test, DecodeTokenFollowsPrevious) {
  auto text = [&](int32_t prev, int32_t token) {
    const char *piece = nullptr;
    size_t length = 0;
    EXPECT_EQ(
        kvrt_tokenizer_decode_token(tok.get(), prev, token, &piece, &length),
        KVRT_OK)
        << kvrt_last_error();
    return std::string(piece, length);
  };
  EXPECT_EQ(text(-1, 403), " Once");
  EXPECT_EQ(text(1, 403), "Once");
  EXPECT_EQ(text(403, 407), " upon");
  EXPECT_EQ(text(-1, 1), "");
  EXPECT_EQ(text(400, 2), "");
  EXPECT_EQ(text(-1, 3 + '\n'), "\n");
  // A byte piece for the space is not the dummy prefix: it stays after BOS.
  EXPECT_EQ(text(1, 3 + ' '), " ");
  EXPECT_EQ(text(1, 3 + 0xE6), "\xE6");
}

// Characters without a piece fall back to byte pieces, id = byte + 3.
TEST_F(Tok512Test, ByteFallback) {
  const std::string nihon = "\xE6\x97\xA5\xE6\x9C\xAC"; // 日本
  Tokens expected = {410};
  for (unsigned char c : nihon)
    expected.push_back(c + 3);
  EXPECT_EQ(encode(tok.get(), nihon), expected);
  EXPECT_EQ(decode(tok.get(), encode(tok.get(), nihon, true)), nihon);

  const std::string emoji = "\xF0\x9F\x98\x80"; // U+1F600
  EXPECT_EQ(encode(tok.get(), emoji),
            (Tokens{410, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3}));
  EXPECT_EQ(decode(tok.get(), encode(tok.get(), emoji, true)), emoji);
}

// Invalid UTF-8 is grouped as llama2.c groups it (a byte and up to three
// continuation bytes after it) and falls back to bytes: "b\x80" is one group
// and no piece, so even the 'b' becomes its byte piece.
TEST_F(Tok512Test, InvalidUtf8GoesThroughByteFallback) {
  const std::string bad = "\xFF\xFE"
                          "ab\x80";
  EXPECT_EQ(encode(tok.get(), bad),
            (Tokens{410, 0xFF + 3, 0xFE + 3, 412, 'b' + 3, 0x80 + 3}));
  EXPECT_EQ(decode(tok.get(), encode(tok.get(), bad, true)), bad);

  const std::string stray(6, '\x80');
  EXPECT_EQ(encode(tok.get(), stray),
            (Tokens{410, 131, 131, 131, 131, 131, 131}));
  // A truncated three-byte character.
  const std::string cut = "x\xE6\x97";
  EXPECT_EQ(decode(tok.get(), encode(tok.get(), cut, true)), cut);
}

TEST_F(Tok512Test, EmptyText) {
  EXPECT_EQ(encode(tok.get(), ""), Tokens{});
  EXPECT_EQ(encode(tok.get(), "", true), Tokens{1});
  EXPECT_EQ(encode(tok.get(), "", true, true), (Tokens{1, 2}));
  int64_t n = -1;
  EXPECT_EQ(kvrt_tokenizer_encode(tok.get(), nullptr, 0, 0, 0, nullptr, 0, &n),
            KVRT_OK);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(decode(tok.get(), {}), "");
  EXPECT_EQ(decode(tok.get(), {1}), "");
}

// Text is length-delimited: a NUL is an ordinary byte (byte piece <0x00>,
// id 3), not the end of the text.
TEST_F(Tok512Test, EmbeddedNul) {
  const std::string text("a\0b", 3);
  Tokens tokens = encode(tok.get(), text);
  EXPECT_EQ(tokens, (Tokens{261, 3, 430}));
  tokens.insert(tokens.begin(), 1);
  size_t length = 0;
  ASSERT_EQ(
      kvrt_tokenizer_decode(tok.get(), tokens.data(), 4, nullptr, 0, &length),
      KVRT_OK);
  EXPECT_EQ(length, 3u);
  EXPECT_EQ(decode(tok.get(), tokens), text);
}

TEST_F(Tok512Test, EncodeCapacity) {
  const std::string text = "Once upon a time";
  int64_t n = 0;
  ASSERT_EQ(kvrt_tokenizer_encode(tok.get(), text.data(), text.size(), 1, 1,
                                  nullptr, 0, &n),
            KVRT_OK);
  EXPECT_EQ(n, 6);
  int32_t small[3] = {-7, -7, -7};
  EXPECT_EQ(kvrt_tokenizer_encode(tok.get(), text.data(), text.size(), 1, 1,
                                  small, 3, &n),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, 6);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("encodes to 6 tokens, the buffer has room for 3"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(small[0], -7) << "a failing call must write nothing";
  int32_t exact[6];
  ASSERT_EQ(kvrt_tokenizer_encode(tok.get(), text.data(), text.size(), 1, 1,
                                  exact, 6, &n),
            KVRT_OK);
  EXPECT_EQ(Tokens(exact, exact + 6), (Tokens{1, 403, 407, 261, 378, 2}));
  EXPECT_EQ(kvrt_tokenizer_encode(tok.get(), text.data(), text.size(), 0, 0,
                                  nullptr, 5, &n),
            KVRT_ERR_INVALID_ARGUMENT);
}

TEST_F(Tok512Test, DecodeCapacity) {
  Tokens tokens = {1, 403, 407}; // "Once upon"
  size_t length = 0;
  char small[9];
  std::memset(small, '#', sizeof(small));
  EXPECT_EQ(kvrt_tokenizer_decode(tok.get(), tokens.data(), 3, small,
                                  sizeof(small), &length),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(length, 9u);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("needs 10 bytes with its terminating NUL, the buffer "
                      "has 9"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(small[0], '#') << "a failing call must write nothing";
  char exact[10];
  ASSERT_EQ(kvrt_tokenizer_decode(tok.get(), tokens.data(), 3, exact,
                                  sizeof(exact), &length),
            KVRT_OK);
  EXPECT_STREQ(exact, "Once upon");
}

TEST_F(Tok512Test, DecodeRejectsIdsOutsideVocabulary) {
  Tokens tokens = {1, 403, 512};
  size_t length = 0;
  EXPECT_EQ(
      kvrt_tokenizer_decode(tok.get(), tokens.data(), 3, nullptr, 0, &length),
      KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("token 512 at index 2 is outside the vocabulary [0, "
                      "512)"),
            std::string::npos)
      << kvrt_last_error();
  const char *piece = nullptr;
  EXPECT_EQ(kvrt_tokenizer_decode_token(tok.get(), -1, -5, &piece, &length),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("token -5 is outside the vocabulary [0, 512)"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(kvrt_tokenizer_decode_token(tok.get(), 9999, 5, &piece, &length),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(
      std::string(kvrt_last_error()).find("previous token 9999 is outside"),
      std::string::npos)
      << kvrt_last_error();
}

TEST_F(Tok512Test, VocabularyMismatch) {
  EXPECT_EQ(kvrt_tokenizer_check_vocab(tok.get(), 512), KVRT_OK);
  EXPECT_EQ(kvrt_tokenizer_check_vocab(tok.get(), 32000), KVRT_ERR_BAD_MODEL);
  EXPECT_STREQ(kvrt_last_error(),
               "the tokenizer has 512 pieces, the model's vocabulary has "
               "32000");
  if (!std::filesystem::exists(KVIR_TEST_MODEL))
    GTEST_SKIP() << "stories260K not found at " KVIR_TEST_MODEL;
  kvrt_model *model = nullptr;
  ASSERT_EQ(kvrt_model_load(KVIR_TEST_MODEL, &model), KVRT_OK)
      << kvrt_last_error();
  kvrt_model_config config;
  ASSERT_EQ(kvrt_model_get_config(model, &config), KVRT_OK);
  EXPECT_EQ(kvrt_tokenizer_check_vocab(tok.get(), config.vocab_size), KVRT_OK)
      << kvrt_last_error();
  kvrt_model_release(model);
}

/// A direct port of llama2.c's encode(), quadratic merge loop included, over
/// length-delimited text.
Tokens llama2cEncode(const kvrt_tokenizer *tok, const std::string &text) {
  int32_t n = kvrt_tokenizer_vocab_size(tok);
  std::vector<std::string> vocab(n);
  std::vector<float> scores(n);
  std::map<std::string, int32_t> sorted;
  for (int32_t i = 0; i < n; ++i) {
    const char *bytes;
    size_t length;
    EXPECT_EQ(kvrt_tokenizer_get_piece(tok, i, &bytes, &length, &scores[i]),
              KVRT_OK);
    vocab[i].assign(bytes, length);
    sorted.emplace(vocab[i], i);
  }
  auto lookup = [&](const std::string &s) {
    auto it = sorted.find(s);
    return it == sorted.end() ? -1 : it->second;
  };
  Tokens tokens;
  if (text.empty())
    return tokens;
  tokens.push_back(lookup(" "));
  std::string buffer;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((text[i] & 0xC0) != 0x80)
      buffer.clear();
    buffer += text[i];
    if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 &&
        buffer.size() < 4)
      continue;
    int32_t id = lookup(buffer);
    if (id != -1)
      tokens.push_back(id);
    else
      for (unsigned char c : buffer)
        tokens.push_back(c + 3);
    buffer.clear();
  }
  while (true) {
    float bestScore = -1e10f;
    int32_t bestId = -1;
    int64_t bestIdx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      int32_t id = lookup(vocab[tokens[i]] + vocab[tokens[i + 1]]);
      if (id != -1 && scores[id] > bestScore) {
        bestScore = scores[id];
        bestId = id;
        bestIdx = static_cast<int64_t>(i);
      }
    }
    if (bestIdx == -1)
      break;
    tokens[bestIdx] = bestId;
    tokens.erase(tokens.begin() + bestIdx + 1);
  }
  return tokens;
}

// The heap-based merge must pick the same pair as llama2.c at every step;
// random texts over letters, spaces, punctuation, UTF-8 and stray bytes.
TEST_F(Tok512Test, MatchesLlama2cOnRandomText) {
  const std::vector<std::string> alphabet = {"a",
                                             "e",
                                             "t",
                                             "h",
                                             "o",
                                             "n",
                                             "s",
                                             "i",
                                             "l",
                                             "y",
                                             " ",
                                             " ",
                                             " ",
                                             ".",
                                             ",",
                                             "\n",
                                             "\"",
                                             "Once",
                                             " the",
                                             "Lily",
                                             "ed",
                                             "ll",
                                             "S",
                                             "T",
                                             "0",
                                             "\t",
                                             "\0",
                                             "\xC3\xA9",
                                             "\xE6\x97\xA5",
                                             "\x80",
                                             "\xFF"};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    int parts = static_cast<int>(rng() % 60);
    for (int p = 0; p < parts; ++p) {
      const std::string &part = alphabet[rng() % alphabet.size()];
      text += part.empty() ? std::string(1, '\0') : part;
    }
    ASSERT_EQ(encode(tok.get(), text), llama2cEncode(tok.get(), text))
        << "trial " << trial;
  }
}

/// A tokenizer from (piece, score) pairs, failing the test on an error.
TokenizerPtr makeTokenizer(const std::vector<std::pair<std::string, float>> &v,
                           int32_t unk, int32_t bos, int32_t eos) {
  std::vector<const char *> pieces;
  std::vector<size_t> lengths;
  std::vector<float> scores;
  for (const auto &[piece, score] : v) {
    pieces.push_back(piece.data());
    lengths.push_back(piece.size());
    scores.push_back(score);
  }
  kvrt_tokenizer *raw = nullptr;
  EXPECT_EQ(kvrt_tokenizer_create(pieces.data(), lengths.data(), scores.data(),
                                  static_cast<int32_t>(v.size()), unk, bos, eos,
                                  &raw),
            KVRT_OK)
      << kvrt_last_error();
  return TokenizerPtr(raw);
}

// A vocabulary small enough to do the merges by hand.
//   id: 0 <unk>, 1 <s>, 2 </s>, 3 " ", 4 a, 5 b, 6 c, 7 " a" (0),
//       8 ab (1), 9 bc (2), 10 abc (-5), 11 aa (0.5), 12 <0x7A> (byte 'z'),
//       13 a again (a duplicate), 14 U+1F600 (four bytes)
class HandMadeTest : public ::testing::Test {
protected:
  void SetUp() override {
    tok = makeTokenizer({{"<unk>", 0},
                         {"<s>", 0},
                         {"</s>", 0},
                         {" ", -1},
                         {"a", -1},
                         {"b", -1},
                         {"c", -1},
                         {" a", 0},
                         {"ab", 1},
                         {"bc", 2},
                         {"abc", -5},
                         {"aa", 0.5},
                         {"<0x7A>", 0},
                         {"a", 3},
                         {"\xF0\x9F\x98\x80", 0}},
                        0, 1, 2);
    ASSERT_TRUE(tok);
  }
  TokenizerPtr tok;
};

// [" ", a, b, c]: pairs " a" (0), ab (1), bc (2): bc first, giving
// [" ", a, bc]; then " a" (0) beats abc (-5): [" a", bc]; " abc" is no piece.
// A left-to-right merger would have produced [" ", abc] or [" a", ...]
// differently; the score order decides.
TEST_F(HandMadeTest, MergesByScore) {
  EXPECT_EQ(encode(tok.get(), "abc"), (Tokens{7, 9}));
  // [" ", a, b]: ab (1) beats " a" (0): [" ", ab].
  EXPECT_EQ(encode(tok.get(), "ab"), (Tokens{3, 8}));
  EXPECT_EQ(decode(tok.get(), {1, 7, 9}), "abc");
  EXPECT_EQ(decode(tok.get(), {7, 9}), " abc");
}

// [" ", a, a, a]: aa (0.5) beats " a" (0) and ties with itself at two
// places; the leftmost wins: [" ", aa, a]; then " aa" and "aaa" are no
// pieces. The duplicate "a" (id 13) is never chosen: equal pieces map to the
// lowest id.
TEST_F(HandMadeTest, TiesMergeLeftmost) {
  EXPECT_EQ(encode(tok.get(), "aaa"), (Tokens{3, 11, 4}));
  EXPECT_EQ(encode(tok.get(), "aaaa"), (Tokens{3, 11, 11}));
}

// Byte fallback finds byte pieces by their spelling (here 'z' is id 12, not
// 'z' + 3); a byte without one becomes unk.
TEST_F(HandMadeTest, ByteFallbackBySpellingThenUnk) {
  EXPECT_EQ(encode(tok.get(), "z"), (Tokens{3, 12}));
  EXPECT_EQ(encode(tok.get(), "zq"), (Tokens{3, 12, 0}));
  EXPECT_EQ(decode(tok.get(), {1, 3, 12}), "z");
  EXPECT_EQ(decode(tok.get(), {0}), "<unk>");
}

// A character is a byte and at most three continuation bytes: the emoji is
// looked up whole, and a fifth byte starts a character of its own.
TEST_F(HandMadeTest, CharactersAreAtMostFourBytes) {
  EXPECT_EQ(encode(tok.get(), "\xF0\x9F\x98\x80"), (Tokens{3, 14}));
  EXPECT_EQ(encode(tok.get(), "\xF0\x9F\x98\x80\x80"), (Tokens{3, 14, 0}));
}

TEST(TokenizerCreateTest, WithoutUnkOrBos) {
  TokenizerPtr tok = makeTokenizer({{" ", 0}, {"a", 0}}, -1, -1, -1);
  ASSERT_TRUE(tok);
  EXPECT_EQ(encode(tok.get(), "a"), (Tokens{0, 1}));
  Tokens out;
  EXPECT_EQ(kvir::encode(tok.get(), "q", false, false, out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("the byte 0x71 at text offset 0 is no piece"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(kvir::encode(tok.get(), "a", /*bos=*/true, false, out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("no BOS token"),
            std::string::npos)
      << kvrt_last_error();
}

TEST(TokenizerCreateTest, RejectsBadVocabularies) {
  const char *pieces[] = {"a", "", "c"};
  size_t lengths[] = {1, 0, 1};
  float scores[] = {0, 0, 0};
  kvrt_tokenizer *tok = nullptr;
  EXPECT_EQ(kvrt_tokenizer_create(pieces, lengths, scores, 3, -1, -1, -1, &tok),
            KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error()).find("piece 1 has 0 bytes"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(tok, nullptr);

  lengths[1] = 1;
  pieces[1] = "b";
  scores[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(kvrt_tokenizer_create(pieces, lengths, scores, 3, -1, -1, -1, &tok),
            KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("piece 2 has a non-finite score (nan)"),
            std::string::npos)
      << kvrt_last_error();

  scores[2] = 0;
  EXPECT_EQ(kvrt_tokenizer_create(pieces, lengths, scores, 3, -1, 3, -1, &tok),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("BOS id 3 is neither -1 nor in the vocabulary [0, 3)"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(kvrt_tokenizer_create(pieces, lengths, scores, 0, -1, -1, -1, &tok),
            KVRT_ERR_INVALID_ARGUMENT);

  ASSERT_EQ(kvrt_tokenizer_create(pieces, lengths, scores, 3, -1, -1, -1, &tok),
            KVRT_OK);
  kvrt_tokenizer_retain(tok);
  kvrt_tokenizer_release(tok);
  EXPECT_EQ(kvrt_tokenizer_vocab_size(tok), 3);
  kvrt_tokenizer_release(tok);
  kvrt_tokenizer_release(nullptr);
  EXPECT_EQ(kvrt_tokenizer_vocab_size(nullptr), 0);
}

/// Bytes of a llama2.c tokenizer file.
struct FileBytes {
  std::string bytes;
  FileBytes &i32(int32_t v) {
    bytes.append(reinterpret_cast<const char *>(&v), sizeof(v));
    return *this;
  }
  FileBytes &f32(float v) {
    bytes.append(reinterpret_cast<const char *>(&v), sizeof(v));
    return *this;
  }
  FileBytes &raw(const std::string &s) {
    bytes += s;
    return *this;
  }
  FileBytes &entry(float score, const std::string &piece) {
    return f32(score).i32(static_cast<int32_t>(piece.size())).raw(piece);
  }
  /// max_token_length 7 and the three special pieces; entry 3 starts at
  /// byte offset 40.
  static FileBytes withSpecials() {
    FileBytes f;
    f.i32(7).entry(0, "<unk>").entry(0, "<s>").entry(0, "</s>");
    return f;
  }
};

/// Malformed files, each written to a fresh temporary directory.
class TokenizerFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kvir-tok-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  /// Loads `bytes` from a file; expects `status` and returns the message.
  std::string loadError(const std::string &bytes,
                        kvrt_status status = KVRT_ERR_BAD_MODEL) {
    std::string path = (dir / "tok.bin").string();
    writeFile(path, bytes);
    kvrt_tokenizer *tok = nullptr;
    EXPECT_EQ(kvrt_tokenizer_load(path.c_str(), &tok), status);
    EXPECT_EQ(tok, nullptr);
    kvrt_tokenizer_release(tok);
    std::string message = kvrt_last_error();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    return message;
  }

  std::filesystem::path dir;
};

#define EXPECT_HAS(message, part)                                              \
  EXPECT_NE((message).find(part), std::string::npos) << (message)

TEST_F(TokenizerFileTest, MinimalFileLoads) {
  std::string path = (dir / "tok.bin").string();
  writeFile(path, FileBytes::withSpecials().entry(-1, " ").bytes);
  kvrt_tokenizer *raw = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(path.c_str(), &raw), KVRT_OK)
      << kvrt_last_error();
  TokenizerPtr tok(raw);
  EXPECT_EQ(kvrt_tokenizer_vocab_size(tok.get()), 4);
  EXPECT_EQ(encode(tok.get(), "x"), (Tokens{3, 0})); // no byte pieces: unk
}

TEST_F(TokenizerFileTest, MissingFile) {
  std::string path = (dir / "absent.bin").string();
  kvrt_tokenizer *tok = nullptr;
  EXPECT_EQ(kvrt_tokenizer_load(path.c_str(), &tok), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open tokenizer '" + path + "': No such file or directory");
}

TEST_F(TokenizerFileTest, Directory) {
  kvrt_tokenizer *tok = nullptr;
  EXPECT_EQ(kvrt_tokenizer_load(dir.c_str(), &tok), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open tokenizer '" + dir.string() + "': it is a directory");
}

// A FIFO (or a device) is refused without blocking on its open.
TEST_F(TokenizerFileTest, FifoAndDevice) {
  std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  kvrt_tokenizer *tok = nullptr;
  EXPECT_EQ(kvrt_tokenizer_load(fifo.c_str(), &tok), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open tokenizer '" + fifo +
                "': it is a FIFO, not a regular file");
  EXPECT_EQ(kvrt_tokenizer_load("/dev/zero", &tok), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open tokenizer '/dev/zero': not a regular file");
  EXPECT_EQ(tok, nullptr);
}

TEST_F(TokenizerFileTest, EmptyAndShortFiles) {
  EXPECT_HAS(loadError(""), "the file is empty");
  EXPECT_HAS(loadError("ab"),
             "truncated header: 2 bytes, max_token_length needs 4");
  EXPECT_HAS(loadError(FileBytes().i32(7).bytes),
             "no pieces after the header (empty vocabulary)");
  EXPECT_HAS(
      loadError(FileBytes().i32(7).entry(0, "<unk>").entry(0, "<s>").bytes),
      "only 2 pieces; the llama2.c format reserves ids 0 (unk), 1 "
      "(BOS) and 2 (EOS)");
}

TEST_F(TokenizerFileTest, BadMaxTokenLength) {
  for (int32_t bad : {0, -1, (1 << 16) + 1})
    EXPECT_HAS(loadError(FileBytes().i32(bad).entry(0, "a").bytes),
               "max_token_length = " + std::to_string(bad) +
                   " at byte offset 0 is outside [1, 65536]");
}

TEST_F(TokenizerFileTest, TruncatedInsideEntry) {
  EXPECT_HAS(loadError(FileBytes::withSpecials().raw("12345").bytes),
             "truncated inside entry 3 at byte offset 40: its score and "
             "length need 8 bytes, 5 remain");
  // Length 6 with two bytes of piece left.
  EXPECT_HAS(loadError(FileBytes::withSpecials().f32(0).i32(6).raw("ab").bytes),
             "truncated inside entry 3: its piece of 6 bytes at byte offset "
             "48 runs past the end of the file (2 bytes remain)");
}

TEST_F(TokenizerFileTest, BadLengths) {
  for (int32_t bad : {0, -3, 8})
    EXPECT_HAS(
        loadError(
            FileBytes::withSpecials().f32(0).i32(bad).raw("abcdefgh").bytes),
        "entry 3 has length " + std::to_string(bad) +
            " at byte offset 44; a piece has 1 to max_token_length "
            "= 7 bytes");
  // A length that would be far beyond the file is caught before any
  // allocation.
  EXPECT_HAS(
      loadError(
          FileBytes().i32(1 << 16).entry(0, "<unk>").f32(0).i32(60000).bytes),
      "entry 1: its piece of 60000 bytes at byte offset 25 runs past "
      "the end of the file (0 bytes remain)");
}

TEST_F(TokenizerFileTest, NonFiniteScore) {
  EXPECT_HAS(loadError(FileBytes::withSpecials()
                           .entry(std::numeric_limits<float>::quiet_NaN(), "a")
                           .bytes),
             "entry 3 at byte offset 40 has a non-finite score (nan)");
  EXPECT_HAS(loadError(FileBytes::withSpecials()
                           .entry(0, "a")
                           .entry(-std::numeric_limits<float>::infinity(), "b")
                           .bytes),
             "entry 4 at byte offset 49 has a non-finite score (-inf)");
}

TEST_F(TokenizerFileTest, TooManyPieces) {
  FileBytes f;
  f.i32(1);
  f.bytes.reserve(4 + 9 * (KVRT_TOKENIZER_MAX_VOCAB + 1));
  for (int32_t i = 0; i <= KVRT_TOKENIZER_MAX_VOCAB; ++i)
    f.entry(0, "x");
  EXPECT_HAS(loadError(f.bytes),
             "more than 1048576 pieces (entry 1048576 at byte offset "
             "9437188)");
}

// The real file cut short in its last entry.
TEST_F(TokenizerFileTest, TruncatedRealFile) {
  if (!std::filesystem::exists(KVIR_TEST_TOKENIZER))
    GTEST_SKIP() << "tok512.bin not found at " KVIR_TEST_TOKENIZER;
  std::string bytes = readFile(KVIR_TEST_TOKENIZER);
  ASSERT_GT(bytes.size(), 3u);
  EXPECT_HAS(loadError(bytes.substr(0, bytes.size() - 1)),
             "truncated inside entry 511: its piece of ");
  EXPECT_HAS(loadError(bytes + std::string(3, '\0')),
             "truncated inside entry 512 at byte offset " +
                 std::to_string(bytes.size()));
}

} // namespace
