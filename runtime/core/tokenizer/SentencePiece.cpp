//===- SentencePiece.cpp - llama2.c's BPE over scored pieces ----*- C++ -*-===//
//
// The SentencePiece-style tokenizer of llama2.c vocabularies (tokenizer.bin,
// or GGUF model "llama"): llama2.c's encode() and decode() over pieces with
// scores, and the reader of llama2.c tokenizer files. KVTokenizer.h states
// the behaviour.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Support.h"
#include "runtime/core/tokenizer/MergeQueue.h"
#include "runtime/core/tokenizer/TokenizerImpl.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the llama2.c tokenizer reader assumes a little-endian host");

using namespace kvrt;
using namespace kvrt::tok;

namespace {

/// A vocabulary of scored pieces with the indexes encoding and decoding need.
class SentencePiece final : public Tokenizer {
public:
  kvrt_tokenizer_kind kind() const override {
    return KVRT_TOKENIZER_SENTENCEPIECE;
  }
  std::string_view decodeToken(int32_t prev, int32_t token,
                               uint32_t flags) const override;

  int32_t lookup(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }

  /// Piece text to the lowest id spelled so. The keys point into `bytes`,
  /// which never changes once the map is built.
  std::unordered_map<std::string_view, int32_t> ids;
  /// The byte a byte piece "<0xHH>" stands for, -1 for other pieces.
  std::vector<int16_t> byteValue;
  /// The lowest id of the byte piece of each byte, -1 where there is none.
  int32_t byteIds[256];
  /// byteChars[b] == b: what decoding a byte piece points at.
  char byteChars[256];
  size_t maxPieceBytes = 0;

  using Tokenizer::setPieces;

protected:
  kvrt_status encodePlain(std::string_view text, size_t offset,
                          std::vector<int32_t> &out) const override;
};

/// The byte of a piece spelled exactly "<0xHH>" (either case of hex digit,
/// as llama2.c's sscanf accepts), or -1.
int bytePieceValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>')
    return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    return -1;
  };
  int hi = digit(piece[3]), lo = digit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/// Checks a vocabulary and builds its tokenizer. Messages start with `what`.
kvrt_status createSentencePieceImpl(const std::vector<std::string_view> &pieces,
                                    const float *scores, int32_t unk,
                                    int32_t bos, int32_t eos,
                                    const std::string &what,
                                    std::unique_ptr<Tokenizer> &out) {
  if (pieces.empty() || pieces.size() > KVRT_TOKENIZER_MAX_VOCAB)
    return fail(KVRT_ERR_BAD_MODEL,
                str(what, pieces.size(), " pieces; a vocabulary has 1 to ",
                    KVRT_TOKENIZER_MAX_VOCAB));
  int32_t n = static_cast<int32_t>(pieces.size());
  for (int32_t i = 0; i < n; ++i) {
    if (pieces[i].empty() || pieces[i].size() > KVRT_TOKENIZER_MAX_PIECE_BYTES)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(what, "piece ", i, " has ", pieces[i].size(),
                      " bytes; a piece has 1 to ",
                      KVRT_TOKENIZER_MAX_PIECE_BYTES));
    if (!std::isfinite(scores[i]))
      return fail(
          KVRT_ERR_BAD_MODEL,
          str(what, "piece ", i, " has a non-finite score (", scores[i], ")"));
  }
  const char *names[] = {"unk", "BOS", "EOS"};
  int32_t specials[] = {unk, bos, eos};
  for (int k = 0; k < 3; ++k)
    if (specials[k] < -1 || specials[k] >= n)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, names[k], " id ", specials[k],
                      " is neither -1 nor in the vocabulary [0, ", n, ")"));

  auto tok = std::make_unique<SentencePiece>();
  std::vector<kvrt_token_type> types(n, KVRT_TOKEN_NORMAL);
  for (int32_t i = 0; i < n; ++i)
    if (bytePieceValue(pieces[i]) >= 0)
      types[i] = KVRT_TOKEN_BYTE;
  tok->setPieces(pieces, std::move(types),
                 std::vector<float>(scores, scores + n));
  for (std::string_view piece : pieces)
    tok->maxPieceBytes = std::max(tok->maxPieceBytes, piece.size());
  tok->byteValue.resize(n);
  for (int b = 0; b < 256; ++b) {
    tok->byteIds[b] = -1;
    tok->byteChars[b] = static_cast<char>(b);
  }
  tok->ids.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    std::string_view piece = tok->piece(i);
    // emplace keeps the first id: equal pieces resolve to the lowest one.
    tok->ids.emplace(piece, i);
    int value = bytePieceValue(piece);
    tok->byteValue[i] = static_cast<int16_t>(value);
    if (value >= 0 && tok->byteIds[value] < 0)
      tok->byteIds[value] = i;
  }
  tok->unk = unk;
  tok->bos = bos;
  tok->eos = eos;
  // llama.cpp's defaults for SentencePiece vocabularies.
  tok->addBos = true;
  out = std::move(tok);
  return KVRT_OK;
}

int32_t readInt32(const std::vector<char> &data, uint64_t offset) {
  int32_t value;
  std::memcpy(&value, data.data() + offset, sizeof(value));
  return value;
}

float readFloat(const std::vector<char> &data, uint64_t offset) {
  float value;
  std::memcpy(&value, data.data() + offset, sizeof(value));
  return value;
}

kvrt_status loadLlama2cFile(const char *path, std::unique_ptr<Tokenizer> &out) {
  File file;
  uint64_t fileBytes = 0;
  if (kvrt_status s = openRegularFile(path, "tokenizer", file, &fileBytes))
    return s;
  std::string bad = str("invalid tokenizer '", path, "': ");
  // The whole file is read at once, so its size is the one allocation a
  // file controls: bound it first.
  if (fileBytes > static_cast<uint64_t>(KVRT_TOKENIZER_MAX_FILE_BYTES))
    return fail(KVRT_ERR_BAD_MODEL,
                str(bad, fileBytes, " bytes, more than the ",
                    KVRT_TOKENIZER_MAX_FILE_BYTES,
                    " a tokenizer file may have"));
  if (fileBytes == 0)
    return fail(KVRT_ERR_BAD_MODEL,
                str(bad, "the file is empty (a llama2.c tokenizer starts with "
                         "an int32 max_token_length)"));
  std::vector<char> data(fileBytes);
  if (std::fread(data.data(), 1, fileBytes, file.get()) != fileBytes)
    return fail(KVRT_ERR_IO, str("cannot read tokenizer '", path,
                                 "': ", std::strerror(errno)));
  if (fileBytes < sizeof(int32_t))
    return fail(KVRT_ERR_BAD_MODEL, str(bad, "truncated header: ", fileBytes,
                                        " bytes, max_token_length needs 4"));
  int32_t maxLength = readInt32(data, 0);
  if (maxLength < 1 || maxLength > KVRT_TOKENIZER_MAX_PIECE_BYTES)
    return fail(KVRT_ERR_BAD_MODEL, str(bad, "max_token_length = ", maxLength,
                                        " at byte offset 0 is outside [1, ",
                                        KVRT_TOKENIZER_MAX_PIECE_BYTES, "]"));

  // The format has no count: entries run to the end of the file.
  std::vector<std::string_view> pieces;
  std::vector<float> scores;
  uint64_t offset = sizeof(int32_t);
  while (offset < fileBytes) {
    size_t entry = pieces.size();
    if (entry == KVRT_TOKENIZER_MAX_VOCAB)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(bad, "more than ", KVRT_TOKENIZER_MAX_VOCAB,
                      " pieces (entry ", entry, " at byte offset ", offset,
                      "); no real vocabulary is that large"));
    uint64_t left = fileBytes - offset;
    if (left < 8)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(bad, "truncated inside entry ", entry, " at byte offset ",
                      offset, ": its score and length need 8 bytes, ", left,
                      " remain"));
    float score = readFloat(data, offset);
    int32_t length = readInt32(data, offset + 4);
    if (!std::isfinite(score))
      return fail(KVRT_ERR_BAD_MODEL,
                  str(bad, "entry ", entry, " at byte offset ", offset,
                      " has a non-finite score (", score, ")"));
    if (length < 1 || length > maxLength)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(bad, "entry ", entry, " has length ", length,
                      " at byte offset ", offset + 4,
                      "; a piece has 1 to max_token_length = ", maxLength,
                      " bytes"));
    if (static_cast<uint64_t>(length) > left - 8)
      return fail(KVRT_ERR_BAD_MODEL,
                  str(bad, "truncated inside entry ", entry, ": its piece of ",
                      length, " bytes at byte offset ", offset + 8,
                      " runs past the end of the file (", left - 8,
                      " bytes remain)"));
    pieces.emplace_back(data.data() + offset + 8, length);
    scores.push_back(score);
    offset += 8 + static_cast<uint64_t>(length);
  }
  if (pieces.empty())
    return fail(KVRT_ERR_BAD_MODEL,
                str(bad, "no pieces after the header (empty vocabulary)"));
  if (pieces.size() < 3)
    return fail(KVRT_ERR_BAD_MODEL,
                str(bad, "only ", pieces.size(),
                    " pieces; the llama2.c format reserves ids 0 (unk), 1 "
                    "(BOS) and 2 (EOS)"));
  return createSentencePieceImpl(pieces, scores.data(), 0, 1, 2, bad, out);
}

/// Appends the tokens of one UTF-8 character (or stray byte sequence) `text`
/// found at `offset` in the caller's text (-1 for the dummy prefix space).
kvrt_status encodeCharacter(const SentencePiece &t, std::string_view text,
                            int64_t offset, std::vector<int32_t> &symbols) {
  int32_t id = t.lookup(text);
  if (id >= 0) {
    symbols.push_back(id);
    return KVRT_OK;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char byte = static_cast<unsigned char>(text[i]);
    id = t.byteIds[byte] >= 0 ? t.byteIds[byte] : t.unk;
    if (id < 0) {
      std::string where = offset < 0 ? std::string("the dummy prefix space")
                                     : str("text offset ", offset + i);
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("kvrt_tokenizer_encode: the byte 0x", std::hex,
                      std::uppercase, std::setw(2), std::setfill('0'), +byte,
                      std::dec, " at ", where,
                      " is no piece, and the vocabulary has neither its byte "
                      "piece nor an unk token"));
    }
    symbols.push_back(id);
  }
  return KVRT_OK;
}

/// llama2.c's merge loop: while some adjacent pair concatenates to a piece,
/// merge the pair whose piece scores highest, the leftmost on a tie
/// (llama2.c rescans all pairs after each merge; MergeQueue.h picks the same
/// pair each step).
void mergePairs(const SentencePiece &t, std::vector<int32_t> &symbols) {
  std::string pair;
  mergeSymbols<float>(symbols,
                      [&](int32_t left, int32_t right)
                          -> std::optional<std::pair<float, int32_t>> {
                        std::string_view a = t.piece(left), b = t.piece(right);
                        if (a.size() + b.size() > t.maxPieceBytes)
                          return std::nullopt;
                        pair.assign(a);
                        pair.append(b);
                        int32_t merged = t.lookup(pair);
                        if (merged < 0)
                          return std::nullopt;
                        // The highest score merges first: the lowest priority.
                        return std::make_pair(-t.score(merged), merged);
                      });
}

} // namespace

kvrt_status SentencePiece::encodePlain(std::string_view text, size_t offset,
                                       std::vector<int32_t> &out) const {
  if (text.empty())
    return KVRT_OK;
  std::vector<int32_t> symbols;
  symbols.reserve(text.size() + 1);
  // SentencePiece's add_dummy_prefix: words are spelled with their
  // leading space, so the first word needs one too.
  if (kvrt_status s = encodeCharacter(*this, " ", -1, symbols))
    return s;
  auto continuation = [&](size_t i) {
    return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  for (size_t begin = 0; begin < text.size();) {
    // llama2.c's grouping: a byte and the continuation bytes after it, at
    // most four bytes in all, whether or not they form valid UTF-8.
    size_t end = begin + 1;
    while (end < text.size() && continuation(end) && end - begin < 4)
      ++end;
    if (kvrt_status s =
            encodeCharacter(*this, text.substr(begin, end - begin),
                            static_cast<int64_t>(offset + begin), symbols))
      return s;
    begin = end;
  }
  mergePairs(*this, symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  return KVRT_OK;
}

std::string_view SentencePiece::decodeToken(int32_t prev, int32_t token,
                                            uint32_t flags) const {
  const SentencePiece &t = *this;
  if (token == t.bos || token == t.eos)
    return flags & KVRT_DECODE_SPECIAL ? t.piece(token) : std::string_view();
  if (t.byteValue[token] >= 0)
    return std::string_view(&t.byteChars[t.byteValue[token]], 1);
  std::string_view piece = t.piece(token);
  // Drop the space encoding put in front of the text (the dummy prefix).
  if (prev >= 0 && prev == t.bos && piece[0] == ' ')
    piece.remove_prefix(1);
  return piece;
}

kvrt_status
kvrt::tok::createSentencePiece(const std::vector<std::string_view> &pieces,
                               const float *scores, int32_t unk, int32_t bos,
                               int32_t eos, const std::string &what,
                               std::unique_ptr<Tokenizer> &out) {
  return createSentencePieceImpl(pieces, scores, unk, bos, eos, what, out);
}

kvrt_status kvrt::tok::loadLlama2cTokenizer(const char *path,
                                            std::unique_ptr<Tokenizer> &out) {
  return loadLlama2cFile(path, out);
}
