//===- Tokenizer.cpp - The tokenizer C ABI ----------------------*- C++ -*-===//
//
// The entry points of KVTokenizer.h over the two kinds of tokenizer
// (runtime/core/tokenizer/): argument checks, buffers, and the streaming
// decoder, which only needs each token's text.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/Support.h"
#include "runtime/core/tokenizer/TokenizerImpl.h"
#include "runtime/core/tokenizer/Unicode.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace kvrt;

namespace {

kvrt_status checkToken(const tok::Tokenizer &t, int32_t token,
                       const std::string &what) {
  if (token < 0 || token >= t.size())
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str(what, token, " is outside the vocabulary [0, ", t.size(), ")"));
  return KVRT_OK;
}

/// Wraps a built tokenizer in its handle.
kvrt_status wrap(kvrt_status status, std::unique_ptr<tok::Tokenizer> impl,
                 kvrt_tokenizer **out) {
  if (status != KVRT_OK)
    return status;
  auto handle = std::make_unique<kvrt_tokenizer>();
  handle->impl = std::move(impl);
  *out = handle.release();
  return KVRT_OK;
}

/// The number of bytes at the end of `text` (at most 3) that begin a UTF-8
/// character the text does not finish: what a stream holds back.
size_t incompleteTail(std::string_view text) {
  size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    unsigned char b = static_cast<unsigned char>(text[n - back]);
    if ((b & 0xC0) == 0x80)
      continue; // a continuation byte: look further back for its lead
    size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (need <= back)
      return 0;
    // Held back only if what is there can still become a character: pad
    // with the smallest continuation bytes the lead allows and check.
    std::string probe(text.substr(n - back));
    for (size_t k = back; k < need; ++k)
      probe += static_cast<char>(k == 1 && (b == 0xE0 || b == 0xF0)
                                     ? (b == 0xE0 ? 0xA0 : 0x90)
                                     : 0x80);
    return unicode::utf8SequenceLength(probe) == need ? back : 0;
  }
  return 0;
}

} // namespace

extern "C" kvrt_status kvrt_tokenizer_load(const char *path,
                                           kvrt_tokenizer **out) {
  if (!path || !out)
    return nullArgument(__func__);
  *out = nullptr;
  return guard([&] {
    if (!kvrt::gguf::fileHasMagic(path)) {
      std::unique_ptr<tok::Tokenizer> impl;
      kvrt_status s = tok::loadLlama2cTokenizer(path, impl);
      return wrap(s, std::move(impl), out);
    }
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
    std::unique_ptr<tok::Tokenizer> impl;
    kvrt_status s = tok::createSentencePiece(views, scores, unk_id, bos_id,
                                             eos_id, str(__func__, ": "), impl);
    return wrap(s, std::move(impl), out);
  });
}

extern "C" kvrt_status kvrt_tokenizer_create_bpe(const kvrt_bpe_vocab *vocab,
                                                 kvrt_tokenizer **out) {
  if (!out || !vocab)
    return nullArgument(__func__);
  *out = nullptr;
  if ((!vocab->tokens || !vocab->token_lengths) && vocab->n_tokens > 0)
    return nullArgument(__func__);
  if ((!vocab->merges || !vocab->merge_lengths) && vocab->n_merges > 0)
    return nullArgument(__func__);
  return guard([&] {
    std::unique_ptr<tok::Tokenizer> impl;
    kvrt_status s = tok::createByteLevelBPE(*vocab, str(__func__, ": "), impl);
    return wrap(s, std::move(impl), out);
  });
}

extern "C" void kvrt_tokenizer_retain(kvrt_tokenizer *tokenizer) {
  retain(tokenizer);
}

extern "C" void kvrt_tokenizer_release(kvrt_tokenizer *tokenizer) {
  release(tokenizer);
}

extern "C" kvrt_tokenizer_kind
kvrt_tokenizer_get_kind(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->kind() : KVRT_TOKENIZER_SENTENCEPIECE;
}

extern "C" const char *
kvrt_tokenizer_pre_tokenizer(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->preTokenizer().c_str() : "";
}

extern "C" kvrt_token_type
kvrt_tokenizer_token_type(const kvrt_tokenizer *tokenizer, int32_t id) {
  if (!tokenizer || id < 0 || id >= tokenizer->impl->size())
    return KVRT_TOKEN_UNDEFINED;
  return tokenizer->impl->type(id);
}

extern "C" int32_t kvrt_tokenizer_add_bos(const kvrt_tokenizer *tokenizer) {
  return tokenizer && tokenizer->impl->addBos;
}

extern "C" int32_t kvrt_tokenizer_add_eos(const kvrt_tokenizer *tokenizer) {
  return tokenizer && tokenizer->impl->addEos;
}

extern "C" int32_t kvrt_tokenizer_vocab_size(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->size() : 0;
}

extern "C" int32_t kvrt_tokenizer_unk_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->unk : -1;
}

extern "C" int32_t kvrt_tokenizer_bos_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->bos : -1;
}

extern "C" int32_t kvrt_tokenizer_eos_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->eos : -1;
}

extern "C" int32_t kvrt_tokenizer_pad_id(const kvrt_tokenizer *tokenizer) {
  return tokenizer ? tokenizer->impl->pad : -1;
}

extern "C" kvrt_status kvrt_tokenizer_get_piece(const kvrt_tokenizer *tokenizer,
                                                int32_t id, const char **bytes,
                                                size_t *length, float *score) {
  if (!tokenizer || !bytes || !length)
    return nullArgument(__func__);
  return guard([&] {
    const tok::Tokenizer &t = *tokenizer->impl;
    if (kvrt_status s = checkToken(t, id, str(__func__, ": id ")))
      return s;
    std::string_view piece = t.piece(id);
    *bytes = piece.data();
    *length = piece.size();
    if (score)
      *score = t.score(id);
    return KVRT_OK;
  });
}

extern "C" kvrt_status
kvrt_tokenizer_check_vocab(const kvrt_tokenizer *tokenizer,
                           int32_t model_vocab) {
  if (!tokenizer)
    return nullArgument(__func__);
  return guard([&] {
    if (tokenizer->impl->size() != model_vocab)
      return fail(KVRT_ERR_BAD_MODEL,
                  str("the tokenizer has ", tokenizer->impl->size(),
                      " pieces, the model's vocabulary has ", model_vocab));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_encode_ex(const kvrt_tokenizer *tokenizer,
                                                const char *text, size_t length,
                                                uint32_t flags, int32_t *tokens,
                                                int64_t capacity,
                                                int64_t *n_tokens) {
  if (!tokenizer || !n_tokens || (!text && length > 0))
    return nullArgument("kvrt_tokenizer_encode");
  *n_tokens = 0;
  if (capacity < 0 || (!tokens && capacity > 0))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_tokenizer_encode: capacity ", capacity,
                    " needs a buffer of that many tokens (NULL only with 0)"));
  return guard([&] {
    std::vector<int32_t> out;
    std::string_view view = length ? std::string_view(text, length) : "";
    if (kvrt_status s = tokenizer->impl->encode(view, flags, out))
      return s;
    int64_t n = static_cast<int64_t>(out.size());
    *n_tokens = n;
    if (!tokens)
      return KVRT_OK;
    if (n > capacity)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("kvrt_tokenizer_encode: the text encodes to ", n,
                      " tokens, the buffer has room for ", capacity));
    std::copy(out.begin(), out.end(), tokens);
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_encode(const kvrt_tokenizer *tokenizer,
                                             const char *text, size_t length,
                                             int32_t bos, int32_t eos,
                                             int32_t *tokens, int64_t capacity,
                                             int64_t *n_tokens) {
  uint32_t flags = (bos ? KVRT_ENCODE_BOS : 0u) | (eos ? KVRT_ENCODE_EOS : 0u);
  return kvrt_tokenizer_encode_ex(tokenizer, text, length, flags, tokens,
                                  capacity, n_tokens);
}

extern "C" kvrt_status
kvrt_tokenizer_decode_token_ex(const kvrt_tokenizer *tokenizer, int32_t prev,
                               int32_t token, uint32_t flags, const char **text,
                               size_t *length) {
  if (!tokenizer || !text || !length)
    return nullArgument("kvrt_tokenizer_decode_token");
  return guard([&] {
    const tok::Tokenizer &t = *tokenizer->impl;
    if (prev != -1)
      if (kvrt_status s = checkToken(
              t, prev, "kvrt_tokenizer_decode_token: previous token "))
        return s;
    if (kvrt_status s =
            checkToken(t, token, "kvrt_tokenizer_decode_token: token "))
      return s;
    std::string_view piece = t.decodeToken(prev, token, flags);
    *text = piece.data();
    *length = piece.size();
    return KVRT_OK;
  });
}

extern "C" kvrt_status
kvrt_tokenizer_decode_token(const kvrt_tokenizer *tokenizer, int32_t prev,
                            int32_t token, const char **text, size_t *length) {
  return kvrt_tokenizer_decode_token_ex(tokenizer, prev, token, 0, text,
                                        length);
}

extern "C" kvrt_status
kvrt_tokenizer_decode_ex(const kvrt_tokenizer *tokenizer, const int32_t *tokens,
                         int64_t n_tokens, uint32_t flags, char *text,
                         size_t capacity, size_t *length) {
  if (!tokenizer || !length || (!tokens && n_tokens > 0))
    return nullArgument("kvrt_tokenizer_decode");
  *length = 0;
  if (n_tokens < 0)
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("kvrt_tokenizer_decode: n_tokens = ", n_tokens, " is negative"));
  if (!text && capacity > 0)
    return nullArgument("kvrt_tokenizer_decode");
  return guard([&] {
    const tok::Tokenizer &t = *tokenizer->impl;
    size_t total = 0;
    for (int64_t i = 0; i < n_tokens; ++i) {
      if (tokens[i] < 0 || tokens[i] >= t.size())
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("kvrt_tokenizer_decode: token ", tokens[i],
                        " at index ", i, " is outside the vocabulary [0, ",
                        t.size(), ")"));
      total += t.decodeToken(i ? tokens[i - 1] : -1, tokens[i], flags).size();
    }
    *length = total;
    if (!text)
      return KVRT_OK;
    if (capacity < total + 1)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("kvrt_tokenizer_decode: the text needs ", total + 1,
                      " bytes with its terminating NUL, the buffer has ",
                      capacity));
    char *p = text;
    for (int64_t i = 0; i < n_tokens; ++i) {
      std::string_view piece =
          t.decodeToken(i ? tokens[i - 1] : -1, tokens[i], flags);
      p = std::copy(piece.begin(), piece.end(), p);
    }
    *p = '\0';
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_decode(const kvrt_tokenizer *tokenizer,
                                             const int32_t *tokens,
                                             int64_t n_tokens, char *text,
                                             size_t capacity, size_t *length) {
  return kvrt_tokenizer_decode_ex(tokenizer, tokens, n_tokens, 0, text,
                                  capacity, length);
}

extern "C" void kvrt_decode_stream_init(kvrt_decode_stream *stream,
                                        uint32_t flags) {
  if (!stream)
    return;
  std::memset(stream, 0, sizeof(*stream));
  stream->prev = -1;
  stream->flags = flags;
}

extern "C" kvrt_status
kvrt_tokenizer_decode_next(const kvrt_tokenizer *tokenizer,
                           kvrt_decode_stream *stream, int32_t token,
                           char *text, size_t capacity, size_t *length) {
  if (!tokenizer || !stream || !length || (!text && capacity > 0))
    return nullArgument(__func__);
  *length = 0;
  return guard([&] {
    const tok::Tokenizer &t = *tokenizer->impl;
    if (kvrt_status s = checkToken(t, token, str(__func__, ": token ")))
      return s;
    if (stream->n_pending > 3 || stream->prev < -1 || stream->prev >= t.size())
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(__func__, ": the stream state is corrupt (start it "
                                "with kvrt_decode_stream_init)"));
    std::string all(reinterpret_cast<const char *>(stream->pending),
                    stream->n_pending);
    all.append(t.decodeToken(stream->prev, token, stream->flags));
    size_t hold = incompleteTail(all);
    size_t give = all.size() - hold;
    *length = give;
    if (give > capacity)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(__func__, ": the text needs ", give,
                      " bytes, the buffer has ", capacity));
    std::copy(all.begin(), all.begin() + give, text);
    std::copy(all.begin() + give, all.end(), stream->pending);
    stream->n_pending = static_cast<uint32_t>(hold);
    stream->prev = token;
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_tokenizer_decode_finish(kvrt_decode_stream *stream,
                                                    char *text, size_t capacity,
                                                    size_t *length) {
  if (!stream || !length || (!text && capacity > 0))
    return nullArgument(__func__);
  *length = 0;
  if (stream->n_pending > 3)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(__func__, ": the stream state is corrupt (start it with "
                              "kvrt_decode_stream_init)"));
  *length = stream->n_pending;
  if (stream->n_pending > capacity)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(__func__, ": the text needs ", stream->n_pending,
                    " bytes, the buffer has ", capacity));
  std::copy(stream->pending, stream->pending + stream->n_pending, text);
  kvrt_decode_stream_init(stream, stream->flags);
  return KVRT_OK;
}
