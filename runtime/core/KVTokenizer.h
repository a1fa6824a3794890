//===- KVTokenizer.h - KVIR tokenizer C ABI ---------------------*- C++ -*-===//
//
// The C interface of the runtime's tokenizers. Two kinds share it
// (kvrt_tokenizer_get_kind):
//   - SentencePiece-style BPE (llama2.c tokenizer.bin, GGUF model "llama"):
//     pieces with scores, encoding and decoding exactly as llama2.c's
//     encode() and decode() do (below);
//   - byte-level BPE (GGUF model "gpt2": GPT-2, Llama 3, Qwen 2/2.5/3,
//     DeepSeek, Falcon, StarCoder): ranked merges over the GPT-2 byte
//     alphabet after a pre-tokenizer (see "Byte-level BPE" below).
// It follows the conventions of KVRuntime.h: kvrt_status results with
// kvrt_last_error(), opaque reference-counted handles, no C++ exception
// across the interface.
//
// SentencePiece
// =============
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
// Byte-level BPE
// ==============
//
// Vocabulary: tokens spelled in GPT-2's byte alphabet (each byte 0..255 is
// one code point: the printable ones stand for themselves, the others for
// U+0100 on, so ' ' is 'Ġ' and '\n' is 'Ċ'), a token type each (NORMAL,
// CONTROL, USER_DEFINED, UNKNOWN, UNUSED, BYTE as in llama.cpp), merges
// "LEFT RIGHT" ranked by their order, and the pre-tokenizer named by
// tokenizer.ggml.pre: llama-bpe (Llama 3), qwen2, gpt-2, deepseek-llm,
// deepseek-coder, falcon, starcoder, default (and some other names llama.cpp
// gives the same rules; an unknown name is an error that lists the known
// ones). Every merge's two sides and their concatenation must be tokens,
// tokens must be distinct and non-empty: else KVRT_ERR_BAD_MODEL naming the
// merge or token.
//
// Encoding:
//   1. BOS if asked (KVRT_ENCODE_BOS, or KVRT_ENCODE_ADD_SPECIAL where the
//      vocabulary says add_bos).
//   2. Special tokens are cut out of the text first, the longest first (as
//      llama.cpp and HF do): USER_DEFINED tokens always (they are words the
//      vocabulary added), CONTROL and UNKNOWN tokens (<|eot_id|>,
//      <|im_start|>, ...) only with KVRT_ENCODE_SPECIAL; without it their
//      text is encoded as plain text, so plain text never yields them.
//   3. Each remaining stretch of text is decoded as UTF-8: every byte that
//      does not begin a well-formed UTF-8 sequence becomes U+FFFD (what
//      llama.cpp does; it is encoded as the three bytes EF BF BD). The
//      pre-tokenizer cuts it into words; each word's UTF-8 bytes become
//      their byte-alphabet tokens, and the adjacent pair whose merge ranks
//      first is merged (the leftmost on a tie) until no pair has a merge.
//      With llama-bpe (HF's ignore_merges) a word that is itself a
//      (non-control) token is that token. A byte whose byte-alphabet
//      character is no token becomes unk, or is an error without one.
//   4. EOS if asked (KVRT_ENCODE_EOS, or KVRT_ENCODE_ADD_SPECIAL with
//      add_eos).
//   A text byte gives at most 3 tokens (an invalid byte becomes U+FFFD's
//   three bytes), so 3 * length + 2 entries always suffice. Texts longer
//   than KVRT_TOKENIZER_MAX_TEXT_BYTES are refused (KVRT_ERR_INVALID_ARGUMENT).
//
// Decoding: a NORMAL token gives the bytes its byte-alphabet text stands for
// (a character outside the alphabet stands for its own UTF-8), a BYTE token
// "<0xHH>" its byte, a USER_DEFINED token its text; CONTROL and UNKNOWN
// tokens give their text only with KVRT_DECODE_SPECIAL, UNUSED ones nothing.
// No spaces are removed or added. A character whose bytes are spread over
// several tokens is whole only once they are all there: the streaming
// decoder (kvrt_tokenizer_decode_next) holds incomplete characters back.
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

/// Longest text a byte-level BPE tokenizer encodes in one call (1 GiB).
#define KVRT_TOKENIZER_MAX_TEXT_BYTES ((size_t)1 << 30)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvrt_tokenizer kvrt_tokenizer;

/// The two kinds of tokenizer.
typedef enum kvrt_tokenizer_kind {
  KVRT_TOKENIZER_SENTENCEPIECE = 0,
  KVRT_TOKENIZER_BYTE_BPE = 1,
} kvrt_tokenizer_kind;

/// Token types, with llama.cpp's values (tokenizer.ggml.token_type).
/// SentencePiece tokenizers report every token as NORMAL, but byte pieces
/// "<0xHH>" as BYTE.
typedef enum kvrt_token_type {
  KVRT_TOKEN_UNDEFINED = 0,
  KVRT_TOKEN_NORMAL = 1,
  KVRT_TOKEN_UNKNOWN = 2,
  KVRT_TOKEN_CONTROL = 3,
  KVRT_TOKEN_USER_DEFINED = 4,
  KVRT_TOKEN_UNUSED = 5,
  KVRT_TOKEN_BYTE = 6,
} kvrt_token_type;

/// Flags of kvrt_tokenizer_encode_ex.
enum {
  /// BOS in front (an error where the vocabulary has none).
  KVRT_ENCODE_BOS = 1,
  /// EOS at the end (an error where the vocabulary has none).
  KVRT_ENCODE_EOS = 2,
  /// BOS and EOS as the vocabulary's add_bos and add_eos say (llama.cpp's
  /// add_special).
  KVRT_ENCODE_ADD_SPECIAL = 4,
  /// CONTROL and UNKNOWN tokens written in the text are those tokens
  /// (llama.cpp's parse_special). No effect on SentencePiece tokenizers,
  /// whose tokens are all NORMAL here.
  KVRT_ENCODE_SPECIAL = 8,
};

/// Flags of the decoding functions.
enum {
  /// CONTROL and UNKNOWN tokens give their text (else nothing). For a
  /// SentencePiece tokenizer: BOS and EOS give their pieces.
  KVRT_DECODE_SPECIAL = 1,
};

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
/// tokenizer.ggml.* keys give the vocabulary, checked against the file's
/// model where it has tensors (a vocabulary-only file, with none, is read
/// as a tokenizer alone): model "llama", tokens with U+2581 for spaces,
/// scores, token types, unk/BOS/EOS ids, by default 0/1/2; or model "gpt2",
/// a byte-level BPE vocabulary: tokens, token_type, merges, pre (default:
/// "default"), unk/BOS/EOS/padding ids (by default none). Both read
/// add_bos_token / add_eos_token.
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

/// A byte-level BPE vocabulary in memory, for kvrt_tokenizer_create_bpe.
typedef struct kvrt_bpe_vocab {
  /// Token i is the `token_lengths[i]` bytes at `tokens[i]` (byte alphabet).
  const char *const *tokens;
  const size_t *token_lengths;
  /// kvrt_token_type of each token; NULL: all NORMAL.
  const int32_t *token_types;
  int32_t n_tokens;
  /// Merge i (rank i) is the `merge_lengths[i]` bytes at `merges[i]`: the
  /// left token, one space, the right token.
  const char *const *merges;
  const size_t *merge_lengths;
  int32_t n_merges;
  /// The pre-tokenizer's name (NUL-terminated), as tokenizer.ggml.pre.
  const char *pre_tokenizer;
  /// Special ids, -1 for none.
  int32_t unk_id, bos_id, eos_id, pad_id;
  /// Whether encoding with KVRT_ENCODE_ADD_SPECIAL adds BOS / EOS.
  int32_t add_bos, add_eos;
} kvrt_bpe_vocab;

/// Builds a byte-level BPE tokenizer from `vocab` (everything is copied and
/// checked: see "Byte-level BPE" above). At most KVRT_TOKENIZER_MAX_VOCAB
/// tokens and as many merges.
kvrt_status kvrt_tokenizer_create_bpe(const kvrt_bpe_vocab *vocab,
                                      kvrt_tokenizer **out);

void kvrt_tokenizer_retain(kvrt_tokenizer *tokenizer);
void kvrt_tokenizer_release(kvrt_tokenizer *tokenizer);

/// The kind of a tokenizer (SENTENCEPIECE for NULL).
kvrt_tokenizer_kind kvrt_tokenizer_get_kind(const kvrt_tokenizer *tokenizer);

/// The pre-tokenizer's name of a byte-level BPE tokenizer, "" for a
/// SentencePiece one or NULL. Valid while the tokenizer is alive.
const char *kvrt_tokenizer_pre_tokenizer(const kvrt_tokenizer *tokenizer);

/// The type of token `id` (KVRT_TOKEN_UNDEFINED outside the vocabulary).
kvrt_token_type kvrt_tokenizer_token_type(const kvrt_tokenizer *tokenizer,
                                          int32_t id);

/// Whether KVRT_ENCODE_ADD_SPECIAL adds BOS / EOS: the vocabulary's
/// tokenizer.ggml.add_bos_token and add_eos_token (by default, as in
/// llama.cpp: BOS for SentencePiece and llama-bpe, nothing else).
int32_t kvrt_tokenizer_add_bos(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_add_eos(const kvrt_tokenizer *tokenizer);

/// Number of pieces (0 for NULL).
int32_t kvrt_tokenizer_vocab_size(const kvrt_tokenizer *tokenizer);

/// The special ids (-1 for none, and for a NULL tokenizer).
int32_t kvrt_tokenizer_unk_id(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_bos_id(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_eos_id(const kvrt_tokenizer *tokenizer);
int32_t kvrt_tokenizer_pad_id(const kvrt_tokenizer *tokenizer);

/// Piece `id`: its bytes (not NUL-terminated, valid while the tokenizer is
/// alive), their number and its score. `score` may be NULL. A byte-level
/// BPE token is given as the vocabulary spells it (byte alphabet), with
/// score 0.
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
/// always suffices for a SentencePiece tokenizer, 3 * length + 2 for a
/// byte-level BPE one.
kvrt_status kvrt_tokenizer_encode(const kvrt_tokenizer *tokenizer,
                                  const char *text, size_t length, int32_t bos,
                                  int32_t eos, int32_t *tokens,
                                  int64_t capacity, int64_t *n_tokens);

/// kvrt_tokenizer_encode with KVRT_ENCODE_* `flags`; the same buffer rules
/// (3 * length + 2 entries always suffice).
kvrt_status kvrt_tokenizer_encode_ex(const kvrt_tokenizer *tokenizer,
                                     const char *text, size_t length,
                                     uint32_t flags, int32_t *tokens,
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

/// kvrt_tokenizer_decode_token and kvrt_tokenizer_decode with
/// KVRT_DECODE_* `flags`.
kvrt_status kvrt_tokenizer_decode_token_ex(const kvrt_tokenizer *tokenizer,
                                           int32_t prev, int32_t token,
                                           uint32_t flags, const char **text,
                                           size_t *length);
kvrt_status kvrt_tokenizer_decode_ex(const kvrt_tokenizer *tokenizer,
                                     const int32_t *tokens, int64_t n_tokens,
                                     uint32_t flags, char *text,
                                     size_t capacity, size_t *length);

/// The state of a streaming decode, token by token: plain data owned by the
/// caller, started by kvrt_decode_stream_init. It carries the previous
/// token and the bytes of an incomplete UTF-8 character.
typedef struct kvrt_decode_stream {
  int32_t prev;
  uint32_t flags;
  uint32_t n_pending;
  unsigned char pending[4];
} kvrt_decode_stream;

/// Starts a stream with KVRT_DECODE_* `flags`.
void kvrt_decode_stream_init(kvrt_decode_stream *stream, uint32_t flags);

/// Decodes the next token of a stream into `text` of `capacity` bytes (no
/// terminator) and sets `*length`: the held-back bytes and the token's text,
/// less the bytes of a character still incomplete at the end (at most 3,
/// held back for the next call). A held-back byte sequence that can no
/// longer become a character is given out as it is, so the concatenation of
/// every call's text and kvrt_tokenizer_decode_finish's is exactly
/// kvrt_tokenizer_decode_ex's text, and each piece is valid UTF-8 wherever
/// that text is. When the text does not fit, nothing changes, `*length` is
/// the size needed and the call fails with KVRT_ERR_INVALID_ARGUMENT; a
/// capacity of KVRT_TOKENIZER_MAX_PIECE_BYTES + 4 always suffices.
kvrt_status kvrt_tokenizer_decode_next(const kvrt_tokenizer *tokenizer,
                                       kvrt_decode_stream *stream,
                                       int32_t token, char *text,
                                       size_t capacity, size_t *length);

/// Ends a stream: gives out the bytes still held back (at most 3, an
/// incomplete character, as they are) and empties the stream.
kvrt_status kvrt_tokenizer_decode_finish(kvrt_decode_stream *stream, char *text,
                                         size_t capacity, size_t *length);

#ifdef __cplusplus
} // extern "C"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvir {

/// Encodes `text` with KVRT_ENCODE_* `flags` into `out` (emptied on
/// failure) in one call.
inline kvrt_status encode(const kvrt_tokenizer *tokenizer,
                          std::string_view text, uint32_t flags,
                          std::vector<int32_t> &out) {
  size_t perByte =
      kvrt_tokenizer_get_kind(tokenizer) == KVRT_TOKENIZER_BYTE_BPE ? 3 : 1;
  out.assign(text.size() * perByte + 3, 0);
  int64_t n = 0;
  kvrt_status status = kvrt_tokenizer_encode_ex(
      tokenizer, text.data(), text.size(), flags, out.data(),
      static_cast<int64_t>(out.size()), &n);
  out.resize(status == KVRT_OK ? static_cast<size_t>(n) : 0);
  return status;
}

/// Encodes `text` into `out` (emptied on failure) in one call.
inline kvrt_status encode(const kvrt_tokenizer *tokenizer,
                          std::string_view text, bool bos, bool eos,
                          std::vector<int32_t> &out) {
  return encode(tokenizer, text,
                (bos ? KVRT_ENCODE_BOS : 0u) | (eos ? KVRT_ENCODE_EOS : 0u),
                out);
}

/// Decodes `tokens` with KVRT_DECODE_* `flags` into `out` (emptied on
/// failure).
inline kvrt_status decode(const kvrt_tokenizer *tokenizer,
                          const std::vector<int32_t> &tokens, std::string &out,
                          uint32_t flags = 0) {
  out.clear();
  size_t length = 0;
  int64_t n = static_cast<int64_t>(tokens.size());
  kvrt_status status = kvrt_tokenizer_decode_ex(tokenizer, tokens.data(), n,
                                                flags, nullptr, 0, &length);
  if (status != KVRT_OK)
    return status;
  std::string text(length, '\0');
  // The string's own terminator is the extra byte the call writes.
  status = kvrt_tokenizer_decode_ex(tokenizer, tokens.data(), n, flags,
                                    text.data(), length + 1, &length);
  if (status == KVRT_OK)
    out = std::move(text);
  return status;
}

} // namespace kvir

#endif // __cplusplus

#endif // KVIR_RUNTIME_CORE_KVTOKENIZER_H
