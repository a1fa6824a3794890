//===- TokenizerImpl.h - Two tokenizers behind one interface ----*- C++ -*-===//
//
// kvrt_tokenizer (KVTokenizer.h) holds a kvrt::tok::Tokenizer: the
// vocabulary every kind has (pieces, types, special ids) and the steps every
// kind shares (BOS/EOS, cutting special tokens out of the text), with the
// kind's own encoding of plain text and decoding of one token behind virtual
// functions: SentencePiece.cpp (llama2.c's BPE) and ByteLevelBPE.cpp.
// Internal to runtime/core.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_TOKENIZER_TOKENIZERIMPL_H
#define KVIR_RUNTIME_CORE_TOKENIZER_TOKENIZERIMPL_H

#include "runtime/core/KVTokenizer.h"

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvrt::tok {

/// A vocabulary and its encoder and decoder. Immutable once built.
class Tokenizer {
public:
  virtual ~Tokenizer() = default;

  virtual kvrt_tokenizer_kind kind() const = 0;
  /// The pre-tokenizer's name, "" where there is none.
  virtual const std::string &preTokenizer() const;

  int32_t size() const { return static_cast<int32_t>(types.size()); }
  std::string_view piece(int32_t id) const {
    return std::string_view(bytes).substr(offsets[id],
                                          offsets[id + 1] - offsets[id]);
  }
  float score(int32_t id) const { return scores.empty() ? 0.0f : scores[id]; }
  kvrt_token_type type(int32_t id) const { return types[id]; }

  /// Encodes `text` with KVRT_ENCODE_* `flags` into `out`.
  kvrt_status encode(std::string_view text, uint32_t flags,
                     std::vector<int32_t> &out) const;

  /// The text of `token` after `prev` (-1 at the start) with KVRT_DECODE_*
  /// `flags`; valid while the tokenizer lives. Both ids are in range.
  virtual std::string_view decodeToken(int32_t prev, int32_t token,
                                       uint32_t flags) const = 0;

  /// Merge i as "LEFT RIGHT", or false past the last merge (and for kinds
  /// without merges).
  virtual bool merge(int32_t, std::string &) const { return false; }

  int32_t unk = -1, bos = -1, eos = -1, pad = -1;
  bool addBos = false, addEos = false;

protected:
  /// Stores the pieces (all non-empty) and their types and scores (empty:
  /// all 0); sorts the special tokens for encode().
  void setPieces(const std::vector<std::string_view> &pieces,
                 std::vector<kvrt_token_type> pieceTypes,
                 std::vector<float> pieceScores);

  /// Appends the tokens of `text`, a stretch without special tokens found
  /// at byte `offset` of the caller's text (for messages).
  virtual kvrt_status encodePlain(std::string_view text, size_t offset,
                                  std::vector<int32_t> &out) const = 0;

  /// Checks the text before anything is done with it.
  virtual kvrt_status checkText(std::string_view) const { return KVRT_OK; }

  /// All pieces back to back; piece i is [offsets[i], offsets[i + 1]).
  std::string bytes;
  std::vector<size_t> offsets;
  std::vector<float> scores;
  std::vector<kvrt_token_type> types;

private:
  /// CONTROL, USER_DEFINED and UNKNOWN tokens, longest first (then by id).
  std::vector<int32_t> specials;
};

/// Builds a SentencePiece tokenizer (kvrt_tokenizer_create's contract);
/// messages start with `what`.
kvrt_status createSentencePiece(const std::vector<std::string_view> &pieces,
                                const float *scores, int32_t unk, int32_t bos,
                                int32_t eos, const std::string &what,
                                std::unique_ptr<Tokenizer> &out);

/// Reads a llama2.c tokenizer file (kvrt_tokenizer_load's contract).
kvrt_status loadLlama2cTokenizer(const char *path,
                                 std::unique_ptr<Tokenizer> &out);

/// Builds a byte-level BPE tokenizer (kvrt_tokenizer_create_bpe's
/// contract); messages start with `what`.
kvrt_status createByteLevelBPE(const kvrt_bpe_vocab &vocab,
                               const std::string &what,
                               std::unique_ptr<Tokenizer> &out);

} // namespace kvrt::tok

/// The C handle: a reference count and the tokenizer.
struct kvrt_tokenizer {
  std::atomic<int64_t> refs{1};
  std::unique_ptr<kvrt::tok::Tokenizer> impl;
};

#endif // KVIR_RUNTIME_CORE_TOKENIZER_TOKENIZERIMPL_H
