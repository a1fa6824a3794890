//===- ByteLevelBPE.cpp - Byte-level BPE (GPT-2, Llama 3, Qwen) -*- C++ -*-===//
//
// The tokenizer of GGUF vocabularies with tokenizer.ggml.model = gpt2: text
// is cut into words by a pre-tokenizer (PreTokenizer.h), each word's UTF-8
// bytes are spelled in GPT-2's byte alphabet, and ranked merges join
// adjacent symbols, the best-ranked pair first. KVTokenizer.h states the
// behaviour; the reference it is checked against is llama.cpp
// (test/golden/tokenizer/).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Support.h"
#include "runtime/core/tokenizer/MergeQueue.h"
#include "runtime/core/tokenizer/PreTokenizer.h"
#include "runtime/core/tokenizer/TokenizerImpl.h"
#include "runtime/core/tokenizer/Unicode.h"

#include <algorithm>
#include <array>
#include <iomanip>
#include <unordered_map>

using namespace kvrt;
using namespace kvrt::tok;

namespace {

/// GPT-2's byte alphabet: the code point that spells each byte. Printable
/// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') spell themselves; the others,
/// in byte order, take U+0100, U+0101, ... so that no byte is white space or
/// a control character.
const std::array<char32_t, 256> &byteAlphabet() {
  static const std::array<char32_t, 256> alphabet = [] {
    std::array<char32_t, 256> a{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                       (b >= 0xAE && b <= 0xFF);
      a[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return a;
  }();
  return alphabet;
}

/// The byte a code point of the alphabet spells, -1 for other code points.
int alphabetByte(char32_t c) {
  static const std::array<int16_t, 324> bytes = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b)
      t[byteAlphabet()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return c < bytes.size() ? bytes[c] : -1;
}

/// The byte of a piece spelled "<0xHH>" (upper-case hex, as llama.cpp
/// writes byte tokens), or -1.
int bytePiece(std::string_view piece) {
  auto digit = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
    return -1;
  int hi = digit(piece[3]), lo = digit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

uint64_t pairKey(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 |
         static_cast<uint32_t>(right);
}

class ByteLevelBPE final : public Tokenizer {
public:
  kvrt_tokenizer_kind kind() const override { return KVRT_TOKENIZER_BYTE_BPE; }
  const std::string &preTokenizer() const override { return preName; }
  std::string_view decodeToken(int32_t prev, int32_t token,
                               uint32_t flags) const override;

  bool merge(int32_t i, std::string &text) const override {
    if (i < 0 || static_cast<size_t>(i) >= mergeList.size())
      return false;
    text.assign(piece(mergeList[i].first));
    text += ' ';
    text.append(piece(mergeList[i].second));
    return true;
  }

  kvrt_status build(const kvrt_bpe_vocab &vocab, const std::string &what);

protected:
  kvrt_status checkText(std::string_view text) const override;
  kvrt_status encodePlain(std::string_view text, size_t offset,
                          std::vector<int32_t> &out) const override;

private:
  struct Merge {
    int32_t rank, result;
  };

  int32_t lookup(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
  /// Appends the tokens of one word (its UTF-8 bytes).
  void encodeWord(std::string_view word, std::vector<int32_t> &out) const;

  std::string preName;
  PreTokenizerSpec pre{PreRules::Default, false};
  /// Token text to id; the keys point into `bytes`.
  std::unordered_map<std::string_view, int32_t> ids;
  std::unordered_map<uint64_t, Merge> merges;
  /// Merges in rank order, as (left, right) token ids.
  std::vector<std::pair<int32_t, int32_t>> mergeList;
  /// The token of each byte's alphabet character, -1 where there is none.
  std::array<int32_t, 256> byteTokens;
  /// What each token decodes to without KVRT_DECODE_SPECIAL: token i is
  /// [decodedOffsets[i], decodedOffsets[i + 1]) of `decoded`.
  std::string decoded;
  std::vector<size_t> decodedOffsets;
};

kvrt_status ByteLevelBPE::build(const kvrt_bpe_vocab &v,
                                const std::string &what) {
  if (v.n_tokens < 1 || v.n_tokens > KVRT_TOKENIZER_MAX_VOCAB)
    return fail(KVRT_ERR_BAD_MODEL,
                str(what, v.n_tokens, " tokens; a vocabulary has 1 to ",
                    KVRT_TOKENIZER_MAX_VOCAB));
  if (v.n_merges < 0 || v.n_merges > KVRT_TOKENIZER_MAX_VOCAB)
    return fail(KVRT_ERR_BAD_MODEL,
                str(what, v.n_merges, " merges; 0 to ",
                    KVRT_TOKENIZER_MAX_VOCAB, " are allowed"));
  int32_t n = v.n_tokens;
  std::vector<std::string_view> pieces(n);
  std::vector<kvrt_token_type> pieceTypes(n, KVRT_TOKEN_NORMAL);
  for (int32_t i = 0; i < n; ++i) {
    if (!v.tokens[i] && v.token_lengths[i] > 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, "token ", i, " is NULL"));
    pieces[i] =
        std::string_view(v.tokens[i] ? v.tokens[i] : "", v.token_lengths[i]);
    if (pieces[i].empty() || pieces[i].size() > KVRT_TOKENIZER_MAX_PIECE_BYTES)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(what, "token ", i, " has ", pieces[i].size(),
                      " bytes; a token has 1 to ",
                      KVRT_TOKENIZER_MAX_PIECE_BYTES));
    if (v.token_types) {
      int32_t t = v.token_types[i];
      if (t < KVRT_TOKEN_UNDEFINED || t > KVRT_TOKEN_BYTE)
        return fail(KVRT_ERR_BAD_MODEL, str(what, "token ", i, " has type ", t,
                                            "; token types are 0 to 6"));
      pieceTypes[i] = static_cast<kvrt_token_type>(t);
      if (t == KVRT_TOKEN_BYTE && bytePiece(pieces[i]) < 0)
        return fail(KVRT_ERR_BAD_MODEL,
                    str(what, "token ", i,
                        " has the byte type but is not spelled <0xHH>"));
    }
  }
  const char *names[] = {"unk", "BOS", "EOS", "padding"};
  int32_t specialIds[] = {v.unk_id, v.bos_id, v.eos_id, v.pad_id};
  for (int k = 0; k < 4; ++k)
    if (specialIds[k] < -1 || specialIds[k] >= n)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, names[k], " id ", specialIds[k],
                      " is neither -1 nor in the vocabulary [0, ", n, ")"));
  std::string_view preText = v.pre_tokenizer ? v.pre_tokenizer : "";
  std::optional<PreTokenizerSpec> spec = findPreTokenizer(preText);
  if (!spec)
    return fail(KVRT_ERR_BAD_MODEL, str(what, "pre-tokenizer '", preText,
                                        "' is not supported (these are: ",
                                        supportedPreTokenizers(), ")"));
  pre = *spec;
  preName = std::string(preText);

  setPieces(pieces, std::move(pieceTypes), {});
  ids.reserve(n);
  for (int32_t i = 0; i < n; ++i)
    if (!ids.emplace(piece(i), i).second)
      return fail(KVRT_ERR_BAD_MODEL, str(what, "token ", i, " '", piece(i),
                                          "' repeats token ", ids[piece(i)]));
  std::string spelled;
  for (int b = 0; b < 256; ++b) {
    spelled.clear();
    unicode::appendUtf8(byteAlphabet()[b], spelled);
    byteTokens[b] = lookup(spelled);
  }

  merges.reserve(v.n_merges);
  mergeList.reserve(v.n_merges);
  std::string joined;
  for (int32_t i = 0; i < v.n_merges; ++i) {
    if (!v.merges[i] && v.merge_lengths[i] > 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, "merge ", i, " is NULL"));
    std::string_view merge(v.merges[i] ? v.merges[i] : "", v.merge_lengths[i]);
    // The separator is the first space after the first byte, as llama.cpp
    // reads merges: a space cannot begin the right side (no token of the
    // byte alphabet holds one).
    size_t space =
        merge.size() > 1 ? merge.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos || space + 1 == merge.size())
      return fail(KVRT_ERR_BAD_MODEL,
                  str(what, "merge ", i, " '", merge,
                      "' is not two tokens separated by one space"));
    std::string_view left = merge.substr(0, space),
                     right = merge.substr(space + 1);
    int32_t l = lookup(left), r = lookup(right);
    if (l < 0 || r < 0)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(what, "merge ", i, " '", merge, "': '",
                      l < 0 ? left : right, "' is not a token"));
    joined.assign(left);
    joined.append(right);
    int32_t result = lookup(joined);
    if (result < 0)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(what, "merge ", i, " '", merge, "' makes '", joined,
                      "', which is not a token"));
    // A repeated merge keeps its first (best) rank, as llama.cpp does.
    if (merges.emplace(pairKey(l, r), Merge{i, result}).second)
      mergeList.emplace_back(l, r);
  }

  decodedOffsets.reserve(n + 1);
  decodedOffsets.push_back(0);
  for (int32_t i = 0; i < n; ++i) {
    std::string_view text = piece(i);
    switch (type(i)) {
    case KVRT_TOKEN_NORMAL:
      // Each alphabet character gives its byte; anything else (not in the
      // alphabet, or not UTF-8) stands for itself.
      for (size_t at = 0; at < text.size();) {
        size_t len = unicode::utf8SequenceLength(text.substr(at, 4));
        // The alphabet is U+0021..U+0143: one or two UTF-8 bytes.
        auto at0 = static_cast<unsigned char>(text[at]);
        int byte = len == 1 ? alphabetByte(at0)
                   : len == 2
                       ? alphabetByte(
                             (at0 & 0x1F) << 6 |
                             (static_cast<unsigned char>(text[at + 1]) & 0x3F))
                       : -1;
        if (byte >= 0)
          decoded += static_cast<char>(byte);
        else
          decoded.append(text.substr(at, len ? len : 1));
        at += len ? len : 1;
      }
      break;
    case KVRT_TOKEN_BYTE:
      decoded += static_cast<char>(bytePiece(text));
      break;
    case KVRT_TOKEN_USER_DEFINED:
      decoded.append(text);
      break;
    default: // control, unknown, unused, undefined: nothing
      break;
    }
    decodedOffsets.push_back(decoded.size());
  }
  unk = v.unk_id;
  bos = v.bos_id;
  eos = v.eos_id;
  pad = v.pad_id;
  addBos = v.add_bos != 0;
  addEos = v.add_eos != 0;
  return KVRT_OK;
}

kvrt_status ByteLevelBPE::checkText(std::string_view text) const {
  if (text.size() > KVRT_TOKENIZER_MAX_TEXT_BYTES)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_tokenizer_encode: the text has ", text.size(),
                    " bytes, more than the ", KVRT_TOKENIZER_MAX_TEXT_BYTES,
                    " one call encodes; encode it in parts"));
  return KVRT_OK;
}

void ByteLevelBPE::encodeWord(std::string_view word,
                              std::vector<int32_t> &out) const {
  if (pre.ignoreMerges) {
    std::string spelled;
    for (char b : word)
      unicode::appendUtf8(byteAlphabet()[static_cast<unsigned char>(b)],
                          spelled);
    int32_t id = lookup(spelled);
    if (id >= 0 && type(id) != KVRT_TOKEN_CONTROL &&
        type(id) != KVRT_TOKEN_UNKNOWN) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i)
    symbols[i] = byteTokens[static_cast<unsigned char>(word[i])];
  mergeSymbols<int32_t>(
      symbols,
      [&](int32_t left,
          int32_t right) -> std::optional<std::pair<int32_t, int32_t>> {
        auto it = merges.find(pairKey(left, right));
        if (it == merges.end())
          return std::nullopt;
        return std::make_pair(it->second.rank, it->second.result);
      });
  // A byte without a token (-1) is unk (encodePlain checked there is one).
  for (int32_t id : symbols)
    out.push_back(id >= 0 ? id : unk);
}

kvrt_status ByteLevelBPE::encodePlain(std::string_view text, size_t offset,
                                      std::vector<int32_t> &out) const {
  if (unk < 0)
    for (size_t i = 0, len = 1; i < text.size(); i += len) {
      // A whole UTF-8 sequence at a time (its continuation bytes are not
      // invalid bytes); an invalid byte is encoded as U+FFFD's bytes, which
      // need tokens too.
      len = unicode::utf8SequenceLength(text.substr(i, 4));
      bool invalid = len == 0;
      len = invalid ? 1 : len;
      for (unsigned char b :
           invalid ? std::string_view("\xEF\xBF\xBD") : text.substr(i, len))
        if (byteTokens[b] < 0)
          return fail(KVRT_ERR_INVALID_ARGUMENT,
                      str("kvrt_tokenizer_encode: the byte 0x", std::hex,
                          std::uppercase, std::setw(2), std::setfill('0'),
                          +static_cast<unsigned char>(b), std::dec,
                          " (text offset ", offset + i,
                          ") has no token in this byte-level vocabulary, and "
                          "it has no unk token"));
    }
  std::vector<char32_t> codePoints = unicode::decodeUtf8(text);
  std::vector<size_t> ends;
  preTokenize(pre.rules, codePoints.data(), codePoints.size(), ends);
  std::string word;
  size_t begin = 0;
  for (size_t end : ends) {
    word.clear();
    for (size_t i = begin; i < end; ++i)
      unicode::appendUtf8(codePoints[i], word);
    encodeWord(word, out);
    begin = end;
  }
  return KVRT_OK;
}

std::string_view ByteLevelBPE::decodeToken(int32_t, int32_t token,
                                           uint32_t flags) const {
  if ((flags & KVRT_DECODE_SPECIAL) &&
      (type(token) == KVRT_TOKEN_CONTROL || type(token) == KVRT_TOKEN_UNKNOWN))
    return piece(token);
  return std::string_view(decoded).substr(
      decodedOffsets[token], decodedOffsets[token + 1] - decodedOffsets[token]);
}

} // namespace

kvrt_status kvrt::tok::createByteLevelBPE(const kvrt_bpe_vocab &vocab,
                                          const std::string &what,
                                          std::unique_ptr<Tokenizer> &out) {
  auto tok = std::make_unique<ByteLevelBPE>();
  if (kvrt_status s = tok->build(vocab, what))
    return s;
  out = std::move(tok);
  return KVRT_OK;
}
