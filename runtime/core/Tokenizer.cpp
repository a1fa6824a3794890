//===- Tokenizer.cpp - BPE tokenizer of llama2.c vocabularies ---*- C++ -*-===//
//
// The vocabulary core (kvrt_tokenizer_create), llama2.c's encode() and
// decode() over it, and the reader of llama2.c tokenizer files, which builds
// through the same core so that other formats (GGUF) can too.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <sys/stat.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the llama2.c tokenizer reader assumes a little-endian host");

using namespace kvrt;

/// An immutable vocabulary with the indexes encoding and decoding need.
struct kvrt_tokenizer {
  std::atomic<int64_t> refs{1};
  /// All pieces back to back; piece i is [offsets[i], offsets[i + 1]).
  std::string bytes;
  std::vector<size_t> offsets;
  std::vector<float> scores;
  /// Piece text to the lowest id spelled so. The keys point into `bytes`,
  /// which never changes once the map is built.
  std::unordered_map<std::string_view, int32_t> ids;
  /// The byte a byte piece "<0xHH>" stands for, -1 for other pieces.
  std::vector<int16_t> byteValue;
  /// The lowest id of the byte piece of each byte, -1 where there is none.
  int32_t byteIds[256];
  /// byteChars[b] == b: what decoding a byte piece points at.
  char byteChars[256];
  int32_t unk = -1, bos = -1, eos = -1;
  size_t maxPieceBytes = 0;

  int32_t size() const { return static_cast<int32_t>(scores.size()); }
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes).substr(offsets[id],
                                          offsets[id + 1] - offsets[id]);
  }
  int32_t lookup(std::string_view text) const {
    auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
};

namespace {

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
kvrt_status buildTokenizer(const std::vector<std::string_view> &pieces,
                           const float *scores, int32_t unk, int32_t bos,
                           int32_t eos, const std::string &what,
                           kvrt_tokenizer **out) {
  if (pieces.empty() || pieces.size() > KVRT_TOKENIZER_MAX_VOCAB)
    return fail(KVRT_ERR_BAD_MODEL,
                str(what, pieces.size(), " pieces; a vocabulary has 1 to ",
                    KVRT_TOKENIZER_MAX_VOCAB));
  int32_t n = static_cast<int32_t>(pieces.size());
  size_t total = 0;
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
    total += pieces[i].size();
  }
  const char *names[] = {"unk", "BOS", "EOS"};
  int32_t specials[] = {unk, bos, eos};
  for (int k = 0; k < 3; ++k)
    if (specials[k] < -1 || specials[k] >= n)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(what, names[k], " id ", specials[k],
                      " is neither -1 nor in the vocabulary [0, ", n, ")"));

  auto tok = std::make_unique<kvrt_tokenizer>();
  tok->bytes.reserve(total);
  tok->offsets.reserve(static_cast<size_t>(n) + 1);
  tok->offsets.push_back(0);
  for (std::string_view piece : pieces) {
    tok->bytes.append(piece);
    tok->offsets.push_back(tok->bytes.size());
    tok->maxPieceBytes = std::max(tok->maxPieceBytes, piece.size());
  }
  tok->scores.assign(scores, scores + n);
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
  *out = tok.release();
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

kvrt_status loadTokenizer(const char *path, kvrt_tokenizer **out) {
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
  return buildTokenizer(pieces, scores.data(), 0, 1, 2, bad, out);
}

/// Appends the tokens of one UTF-8 character (or stray byte sequence) `text`
/// found at `offset` in the caller's text (-1 for the dummy prefix space).
kvrt_status encodeCharacter(const kvrt_tokenizer &t, std::string_view text,
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
/// merge the pair whose piece scores highest, the leftmost on a tie.
/// llama2.c rescans all pairs after each merge (quadratic); a heap of
/// candidate pairs with stale entries skipped on pop picks the same pair each
/// step: the heap orders by score then by the left symbol's original index,
/// and merging keeps the left index, so original order is current order.
void mergePairs(const kvrt_tokenizer &t, std::vector<int32_t> &symbols) {
  struct Symbol {
    int32_t id; // -1 once merged into its left neighbour
    int64_t prev, next;
  };
  struct Candidate {
    float score;
    int64_t left, right;
    int32_t leftId, rightId, merged;
  };
  auto lower = [](const Candidate &a, const Candidate &b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> heap(
      lower);
  int64_t n = static_cast<int64_t>(symbols.size());
  std::vector<Symbol> list(n);
  for (int64_t i = 0; i < n; ++i)
    list[i] = {symbols[i], i - 1, i + 1 < n ? i + 1 : -1};

  std::string pair;
  auto consider = [&](int64_t left, int64_t right) {
    if (left < 0 || right < 0)
      return;
    std::string_view a = t.piece(list[left].id), b = t.piece(list[right].id);
    if (a.size() + b.size() > t.maxPieceBytes)
      return;
    pair.assign(a);
    pair.append(b);
    int32_t merged = t.lookup(pair);
    if (merged >= 0)
      heap.push({t.scores[merged], left, right, list[left].id, list[right].id,
                 merged});
  };
  for (int64_t i = 0; i + 1 < n; ++i)
    consider(i, i + 1);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol &left = list[c.left];
    // A merge changes the left symbol's id (to a longer piece) and kills the
    // right one, so an entry whose ids still hold is a current pair.
    if (left.id != c.leftId || left.next != c.right ||
        list[c.right].id != c.rightId)
      continue;
    left.id = c.merged;
    left.next = list[c.right].next;
    list[c.right].id = -1;
    if (left.next >= 0)
      list[left.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  symbols.clear();
  for (int64_t i = n > 0 ? 0 : -1; i >= 0; i = list[i].next)
    symbols.push_back(list[i].id);
}

kvrt_status encodeText(const kvrt_tokenizer &t, std::string_view text, bool bos,
                       bool eos, std::vector<int32_t> &out) {
  if (bos && t.bos < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_tokenizer_encode: BOS asked for, but the vocabulary has "
                "no BOS token");
  if (eos && t.eos < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_tokenizer_encode: EOS asked for, but the vocabulary has "
                "no EOS token");
  out.clear();
  if (bos)
    out.push_back(t.bos);
  if (!text.empty()) {
    std::vector<int32_t> symbols;
    symbols.reserve(text.size() + 1);
    // SentencePiece's add_dummy_prefix: words are spelled with their
    // leading space, so the first word needs one too.
    if (kvrt_status s = encodeCharacter(t, " ", -1, symbols))
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
      if (kvrt_status s = encodeCharacter(t, text.substr(begin, end - begin),
                                          static_cast<int64_t>(begin), symbols))
        return s;
      begin = end;
    }
    mergePairs(t, symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
  }
  if (eos)
    out.push_back(t.eos);
  return KVRT_OK;
}

/// The text of `token` after `prev`; both ids are in the vocabulary or -1.
std::string_view decodeToken(const kvrt_tokenizer &t, int32_t prev,
                             int32_t token) {
  if (token == t.bos || token == t.eos)
    return {};
  if (t.byteValue[token] >= 0)
    return std::string_view(&t.byteChars[t.byteValue[token]], 1);
  std::string_view piece = t.piece(token);
  // Drop the space encoding put in front of the text (the dummy prefix).
  if (prev >= 0 && prev == t.bos && piece[0] == ' ')
    piece.remove_prefix(1);
  return piece;
}

kvrt_status checkToken(const kvrt_tokenizer &t, int32_t token,
                       const std::string &what) {
  if (token < 0 || token >= t.size())
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str(what, token, " is outside the vocabulary [0, ", t.size(), ")"));
  return KVRT_OK;
}

} // namespace

extern "C" kvrt_status kvrt_tokenizer_load(const char *path,
                                           kvrt_tokenizer **out) {
  if (!path || !out)
    return nullArgument(__func__);
  *out = nullptr;
  return guard([&] {
    if (!kvrt::gguf::fileHasMagic(path))
      return loadTokenizer(path, out);
    std::string error = kvrt::gguf::readFile(path, nullptr, out);
    if (error.empty() && !*out)
      error = kvrt::str("GGUF file '", path,
                        "' has no tokenizer (no tokenizer.ggml.model key)");
    return error.empty() ? KVRT_OK : kvrt::fail(KVRT_ERR_BAD_MODEL, error);
  });
}

extern "C" kvrt_status
kvrt_tokenizer_create(const char *const *pieces, const size_t *lengths,
                      const float *scores, int32_t n_pieces, int32_t unk_id,
                      int32_t bos_id, int32_t eos_id, kvrt_tokenizer **out) {
  if (!out)
    return nullArgument(__func__);
  *out = nullptr;
  if (n_pieces < 1 || n_pieces > KVRT_TOKENIZER_MAX_VOCAB)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(__func__, ": n_pieces = ", n_pieces, " is outside [1, ",
                    KVRT_TOKENIZER_MAX_VOCAB, "]"));
  if (!pieces || !lengths || !scores)
    return nullArgument(__func__);
  return guard([&] {
    std::vector<std::string_view> views(n_pieces);
    for (int32_t i = 0; i < n_pieces; ++i) {
      if (!pieces[i] && lengths[i] > 0)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str(__func__, ": piece ", i, " is NULL"));
      views[i] = std::string_view(pieces[i] ? pieces[i] : "", lengths[i]);
    }
    return buildTokenizer(views, scores, unk_id, bos_id, eos_id,
                          str(__func__, ": "), out);
  });
}

extern "C" void kvrt_tokenizer_retain(kvrt_tokenizer *tokenizer) {
  retain(tokenizer);
}

extern "C" void kvrt_tokenizer_release(kvrt_tokenizer *tokenizer) {
  release(tokenizer);
}

extern "C" int32_t kvrt_tokenizer_vocab_size(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->size() : 0;
}

extern "C" int32_t kvrt_tokenizer_unk_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->unk : -1;
}

extern "C" int32_t kvrt_tokenizer_bos_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->bos : -1;
}

extern "C" int32_t kvrt_tokenizer_eos_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->eos : -1;
}

extern "C" kvrt_status kvrt_tokenizer_get_piece(const kvrt_tokenizer *tokenizer,
                                                int32_t id, const char **bytes,
                                                size_t *length, float *score) {
  if (!tokenizer || !bytes || !length)
    return nullArgument(__func__);
  return guard([&] {
    if (kvrt_status s = checkToken(*tokenizer, id, str(__func__, ": id ")))
      return s;
    std::string_view piece = tokenizer->piece(id);
    *bytes = piece.data();
    *length = piece.size();
    if (score)
      *score = tokenizer->scores[id];
    return KVRT_OK;
  });
}

extern "C" kvrt_status
kvrt_tokenizer_check_vocab(const kvrt_tokenizer *tokenizer,
                           int32_t model_vocab) {
  if (!tokenizer)
    return nullArgument(__func__);
  return guard([&] {
    if (tokenizer->size() != model_vocab)
      return fail(KVRT_ERR_BAD_MODEL,
                  str("the tokenizer has ", tokenizer->size(),
                      " pieces, the model's vocabulary has ", model_vocab));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_encode(const kvrt_tokenizer *tokenizer,
                                             const char *text, size_t length,
                                             int32_t bos, int32_t eos,
                                             int32_t *tokens, int64_t capacity,
                                             int64_t *n_tokens) {
  if (!tokenizer || !n_tokens || (!text && length > 0))
    return nullArgument(__func__);
  *n_tokens = 0;
  if (capacity < 0 || (!tokens && capacity > 0))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(__func__, ": capacity ", capacity,
                    " needs a buffer of that many tokens (NULL only with 0)"));
  return guard([&] {
    std::vector<int32_t> out;
    std::string_view view = length ? std::string_view(text, length) : "";
    if (kvrt_status s = encodeText(*tokenizer, view, bos, eos, out))
      return s;
    int64_t n = static_cast<int64_t>(out.size());
    *n_tokens = n;
    if (!tokens)
      return KVRT_OK;
    if (n > capacity)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(__func__, ": the text encodes to ", n,
                      " tokens, the buffer has room for ", capacity));
    std::copy(out.begin(), out.end(), tokens);
    return KVRT_OK;
  });
}

extern "C" kvrt_status
kvrt_tokenizer_decode_token(const kvrt_tokenizer *tokenizer, int32_t prev,
                            int32_t token, const char **text, size_t *length) {
  if (!tokenizer || !text || !length)
    return nullArgument(__func__);
  return guard([&] {
    if (prev != -1)
      if (kvrt_status s =
              checkToken(*tokenizer, prev, str(__func__, ": previous token ")))
        return s;
    if (kvrt_status s =
            checkToken(*tokenizer, token, str(__func__, ": token ")))
      return s;
    std::string_view piece = decodeToken(*tokenizer, prev, token);
    *text = piece.data();
    *length = piece.size();
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_decode(const kvrt_tokenizer *tokenizer,
                                             const int32_t *tokens,
                                             int64_t n_tokens, char *text,
                                             size_t capacity, size_t *length) {
  if (!tokenizer || !length || (!tokens && n_tokens > 0))
    return nullArgument(__func__);
  *length = 0;
  if (n_tokens < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(__func__, ": n_tokens = ", n_tokens, " is negative"));
  if (!text && capacity > 0)
    return nullArgument(__func__);
  return guard([&] {
    size_t total = 0;
    for (int64_t i = 0; i < n_tokens; ++i) {
      if (tokens[i] < 0 || tokens[i] >= tokenizer->size())
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str(__func__, ": token ", tokens[i], " at index ", i,
                        " is outside the vocabulary [0, ", tokenizer->size(),
                        ")"));
      total +=
          decodeToken(*tokenizer, i ? tokens[i - 1] : -1, tokens[i]).size();
    }
    *length = total;
    if (!text)
      return KVRT_OK;
    if (capacity < total + 1)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(__func__, ": the text needs ", total + 1,
                      " bytes with its terminating NUL, the buffer has ",
                      capacity));
    char *p = text;
    for (int64_t i = 0; i < n_tokens; ++i) {
      std::string_view piece =
          decodeToken(*tokenizer, i ? tokens[i - 1] : -1, tokens[i]);
      p = std::copy(piece.begin(), piece.end(), p);
    }
    *p = '\0';
    return KVRT_OK;
  });
}
