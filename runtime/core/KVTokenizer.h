//===- KVTokenizer.h - KVIR tokenizer C ABI ---------------------*- C++ -*-===//
//
// The C interface of the runtime's tokenizer: a SentencePiece-style BPE
// vocabulary (pieces with scores) that encodes text to token ids and decodes
// ids back to text exactly as llama2.c's encode() and decode() do. It follows
// the conventions of KVRuntime.h: kvrt_status results with kvrt_last_error(),
// opaque reference-counted handles, no C++ exception across the interface.
//
// Vocabulary:
//   Piece i is a byte string (spaces spelled as ' ', as in llama2.c's
//   tokenizer.bin; a GGUF reader converts U+2581 to ' ' before calling
//   kvrt_tokenizer_create) with a float score. Pieces spelled "<0xHH>" are
//   byte pieces and stand for the single byte 0xHH. Three ids are special:
//   unk, BOS and EOS (-1 where the vocabulary has none).
//
// Encoding (llama2.c's encode()):
//   1. BOS if asked.
//   2. For non-empty text, a dummy space in front of the text.
//   3. The text is cut into UTF-8 characters: a byte followed by up to three
//      continuation bytes (10xxxxxx). A character that is a piece becomes that
//      piece; otherwise each of its bytes becomes its byte piece "<0xHH>"
//      (id byte + 3 in llama2.c and Llama vocabularies), or unk where the
//      vocabulary has no such byte piece. Invalid UTF-8 and NUL bytes take
//      the same path: text is length-delimited, never NUL-terminated.
//   4. While some adjacent pair concatenates to a piece, the pair whose piece
//      has the highest score is merged (the leftmost such pair on a tie).
//   5. EOS if asked.
//   Every text byte gives at most one token, so text of `len` bytes encodes
//   to at most len + 3 tokens.
//
//   Two deliberate departures from llama2.c, both invisible with real
//   vocabularies: BOS never takes part in merges (llama2.c would merge it
//   with a following piece if their concatenation were a piece), and a merge
//   is considered whatever its score (llama2.c ignores pieces scored at or
//   below -1e10, its initial best score).
//
// Decoding (llama2.c's decode(prev, token)):
//   A token's text is its piece; after BOS (prev == BOS) a leading space is
//   dropped (the dummy prefix of encoding); a byte piece gives its byte. BOS
//   and EOS give no text (llama2.c returns their pieces, "\n<s>\n" and
//   "\n</s>\n", which its generation loop never prints for BOS).
//
// Errors:
//   A malformed tokenizer file or vocabulary is KVRT_ERR_BAD_MODEL, as is a
//   tokenizer whose vocabulary does not match the model's; a token id outside
//   the vocabulary (special ids given to kvrt_tokenizer_create included) or
//   a too small output buffer is KVRT_ERR_INVALID_ARGUMENT.
//
// A tokenizer is immutable once created: any number of threads may use one
// concurrently.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_KVTOKENIZER_H
#define KVIR_RUNTIME_CORE_KVTOKENIZER_H

#include "runtime/core/KVRuntime.h"

#include <stddef.h>
#include <stdint.h>

/// Most pieces a vocabulary may have (real ones have at most a few hundred
/// thousand); bounds what a file can make the loader allocate.
#define KVRT_TOKENIZER_MAX_VOCAB (1 << 20)

/// Longest piece, in bytes, and the largest max_token_length a llama2.c
/// tokenizer file may declare.
#define KVRT_TOKENIZER_MAX_PIECE_BYTES (1 << 16)

/// Largest llama2.c tokenizer file the loader reads (it reads it whole).
#define KVRT_TOKENIZER_MAX_FILE_BYTES (INT64_C(256) << 20)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvrt_tokenizer kvrt_tokenizer;

/// Loads a llama2.c tokenizer file: a little-endian int32 max_token_length,
/// then up to the end of the file one entry per id: float32 score, int32
/// length, `length` bytes of piece (no terminator). The format has no count
/// and fixes the special ids: 0 = unk, 1 = BOS, 2 = EOS. Everything is
/// validated before use: the size of the file, max_token_length in
/// [1, KVRT_TOKENIZER_MAX_PIECE_BYTES], every score finite, every length in
/// [1, max_token_length] and within the file, no entry cut short, at least
/// three and at most KVRT_TOKENIZER_MAX_VOCAB pieces. Messages name the file,
/// the entry and its byte offset. A file that begins with the GGUF magic is
/// read as a GGUF model file instead (runtime/core/GGUF.h): its
/// tokenizer.ggml.* keys (model "llama": tokens with U+2581 for spaces,
/// scores, token types, unk/BOS/EOS ids, by default 0/1/2) give the
/// vocabulary, checked against the file's model.
kvrt_status kvrt_tokenizer_load(const char *path, kvrt_tokenizer **out);

/// Builds a tokenizer from `n_pieces` pieces in memory: piece i is the
/// `lengths[i]` bytes at `pieces[i]` (NUL bytes are ordinary bytes), with
/// score `scores[i]`. Every piece must be non-empty and at most
/// KVRT_TOKENIZER_MAX_PIECE_BYTES long, every score finite, and n_pieces in
/// [1, KVRT_TOKENIZER_MAX_VOCAB]. `unk_id`, `bos_id` and `eos_id` are ids of
/// the vocabulary or -1 for none. Everything is copied. Pieces may repeat:
/// text then maps to the lowest id of equal pieces (llama2.c leaves the
/// choice to qsort).
kvrt_status kvrt_tokenizer_create(const char *const *pieces,
                                  const size_t *lengths, const float *scores,
                                  int32_t n_pieces, int32_t unk_id,
                                  int32_t bos_id, int32_t eos_id,
                                  kvrt_tokenizer **out);

void kvrt_tokenizer_retain(kvrt_tokenizer *tokenizer);
void kvrt_tokenizer_release(kvrt_tokenizer *tokenizer);

/// Number of pieces (0 for NULL).
int32_t kvrt_tokenizer_vocab_size(const kvrt_tokenizer *tokenizer);

/// The special ids (-1 for none, and for a NULL tokenizer).
int32_t kvrt_tokenizer_unk_id(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_bos_id(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_eos_id(const kvrt_tokenizer *tokenizer);

/// Piece `id`: its bytes (not NUL-terminated, valid while the tokenizer is
/// alive), their number and its score. `score` may be NULL.
kvrt_status kvrt_tokenizer_get_piece(const kvrt_tokenizer *tokenizer,
                                     int32_t id, const char **bytes,
                                     size_t *length, float *score);

/// KVRT_OK if the tokenizer has exactly `model_vocab` pieces (a model's
/// kvrt_model_config::vocab_size), else KVRT_ERR_BAD_MODEL with both counts.
kvrt_status kvrt_tokenizer_check_vocab(const kvrt_tokenizer *tokenizer,
                                       int32_t model_vocab);

/// Encodes the `length` bytes at `text` (NULL allowed when length is 0), with
/// BOS in front if `bos` is nonzero and EOS at the end if `eos` is nonzero,
/// into `tokens` of `capacity` entries, and sets `*n_tokens` to the number of
/// tokens. `tokens` == NULL with `capacity` == 0 only counts. When the
/// tokens do not fit, nothing is written, `*n_tokens` is the count needed and
/// the call fails with KVRT_ERR_INVALID_ARGUMENT; a capacity of length + 3
/// always suffices.
kvrt_status kvrt_tokenizer_encode(const kvrt_tokenizer *tokenizer,
                                  const char *text, size_t length, int32_t bos,
                                  int32_t eos, int32_t *tokens,
                                  int64_t capacity, int64_t *n_tokens);

/// The text of `token` following `prev` (-1 at the start of a sequence): a
/// pointer to `*length` bytes (not NUL-terminated, possibly none), valid while
/// the tokenizer is alive. Both ids must be in the vocabulary.
kvrt_status kvrt_tokenizer_decode_token(const kvrt_tokenizer *tokenizer,
                                        int32_t prev, int32_t token,
                                        const char **text, size_t *length);

/// The text of `n_tokens` tokens, each decoded after the one before it (the
/// first after -1), into `text` of `capacity` bytes, NUL-terminated; sets
/// `*length` to the number of text bytes without the terminator (the text
/// may itself hold NUL bytes from the byte piece <0x00>). `text` == NULL
/// with `capacity` == 0 only measures. When the text and its terminator do
/// not fit, nothing is written, `*length` is the text's length and the call
/// fails with KVRT_ERR_INVALID_ARGUMENT. Every token must be in the
/// vocabulary.
kvrt_status kvrt_tokenizer_decode(const kvrt_tokenizer *tokenizer,
                                  const int32_t *tokens, int64_t n_tokens,
                                  char *text, size_t capacity, size_t *length);

#ifdef __cplusplus
} // extern "C"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvir {

/// Encodes `text` into `out` (emptied on failure) in one call.
inline kvrt_status encode(const kvrt_tokenizer *tokenizer,
                          std::string_view text, bool bos, bool eos,
                          std::vector<int32_t> &out) {
  out.assign(text.size() + 3, 0);
  int64_t n = 0;
  kvrt_status status =
      kvrt_tokenizer_encode(tokenizer, text.data(), text.size(), bos, eos,
                            out.data(), static_cast<int64_t>(out.size()), &n);
  out.resize(status == KVRT_OK ? static_cast<size_t>(n) : 0);
  return status;
}

/// Decodes `tokens` into `out` (emptied on failure).
inline kvrt_status decode(const kvrt_tokenizer *tokenizer,
                          const std::vector<int32_t> &tokens,
                          std::string &out) {
  out.clear();
  size_t length = 0;
  int64_t n = static_cast<int64_t>(tokens.size());
  kvrt_status status =
      kvrt_tokenizer_decode(tokenizer, tokens.data(), n, nullptr, 0, &length);
  if (status != KVRT_OK)
    return status;
  std::string text(length, '\0');
  // The string's own terminator is the extra byte the call writes.
  status = kvrt_tokenizer_decode(tokenizer, tokens.data(), n, text.data(),
                                 length + 1, &length);
  if (status == KVRT_OK)
    out = std::move(text);
  return status;
}

} // namespace kvir

#endif // __cplusplus

#endif // KVIR_RUNTIME_CORE_KVTOKENIZER_H
