//===- GGUFWriter.cpp - Write GGUF v3 llama models --------------*- C++ -*-===//
//
// kvrt_model_save_gguf: a model's config as llama.* keys, its tensors in F32,
// F16, BF16 or Q8_0 (GGUFFormat.h), and optionally a tokenizer's vocabulary.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/GGUFFormat.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/core/tokenizer/TokenizerImpl.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the GGUF writer assumes a little-endian host");

using namespace kvrt;
using namespace kvrt::gguf;

//===----------------------------------------------------------------------===//
// Q8_0
//===----------------------------------------------------------------------===//

void kvrt::gguf::quantizeQ8Block(const float *x, uint8_t *block) {
  float amax = 0.0f;
  for (int j = 0; j < kQ8Block; ++j)
    amax = std::max(amax, std::fabs(x[j]));
  float d = amax / 127.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint16_t scale = floatToHalf(d);
  std::memcpy(block, &scale, 2);
  for (int j = 0; j < kQ8Block; ++j)
    block[2 + j] =
        static_cast<uint8_t>(static_cast<int8_t>(std::lround(x[j] * id)));
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// Serialises metadata and tensor infos.
class Writer {
public:
  std::string bytes;
  uint64_t keys = 0;

  template <typename T> void scalar(T value) {
    bytes.append(reinterpret_cast<const char *>(&value), sizeof(T));
  }
  void string(std::string_view s) {
    scalar<uint64_t>(s.size());
    bytes.append(s);
  }
  void key(std::string_view name, ValueType type) {
    ++keys;
    string(name);
    scalar<uint32_t>(type);
  }
  void u32(std::string_view name, uint32_t v) {
    key(name, kU32);
    scalar(v);
  }
  void f32(std::string_view name, float v) {
    key(name, kF32);
    scalar(v);
  }
  void text(std::string_view name, std::string_view v) {
    key(name, kString);
    string(v);
  }
};

/// One tensor to write: its name, shape, type and f32 source.
struct Outgoing {
  std::string name;
  uint64_t dims[2];
  uint32_t nDims;
  uint32_t type;
  const float *src;
  uint64_t elements;
};

std::string encodeTensor(const Outgoing &t) {
  std::string out;
  switch (t.type) {
  case kTF32:
    out.assign(reinterpret_cast<const char *>(t.src), t.elements * 4);
    break;
  case kTF16:
  case kTBF16:
    out.resize(t.elements * 2);
    for (uint64_t i = 0; i < t.elements; ++i) {
      uint16_t bits =
          t.type == kTF16 ? floatToHalf(t.src[i]) : floatToBFloat(t.src[i]);
      std::memcpy(&out[2 * i], &bits, 2);
    }
    break;
  case kTQ8_0:
    out.resize(t.elements / kQ8Block * kQ8BlockBytes);
    for (uint64_t b = 0; b < t.elements / kQ8Block; ++b)
      quantizeQ8Block(t.src + b * kQ8Block,
                      reinterpret_cast<uint8_t *>(&out[b * kQ8BlockBytes]));
    break;
  }
  return out;
}

/// The keys of a SentencePiece tokenizer: pieces with U+2581 for spaces,
/// scores, token types derived from the special ids and byte pieces.
void writeSentencePiece(Writer &w, const kvrt_tokenizer *tokenizer) {
  int32_t nPieces = kvrt_tokenizer_vocab_size(tokenizer);
  w.text("tokenizer.ggml.model", "llama");
  w.key("tokenizer.ggml.tokens", kArray);
  w.scalar<uint32_t>(kString);
  w.scalar<uint64_t>(nPieces);
  std::vector<float> scores(nPieces);
  std::vector<int32_t> types(nPieces);
  int32_t unk = kvrt_tokenizer_unk_id(tokenizer),
          bos = kvrt_tokenizer_bos_id(tokenizer),
          eos = kvrt_tokenizer_eos_id(tokenizer);
  for (int32_t i = 0; i < nPieces; ++i) {
    const char *bytes;
    size_t length;
    kvrt_tokenizer_get_piece(tokenizer, i, &bytes, &length, &scores[i]);
    std::string piece;
    for (size_t j = 0; j < length; ++j)
      piece += bytes[j] == ' ' ? std::string("\xe2\x96\x81")
                               : std::string(1, bytes[j]);
    unsigned byte;
    char tail;
    bool isByte = length == 6 &&
                  std::sscanf(piece.c_str(), "<0x%2X>%c", &byte, &tail) == 1;
    types[i] = i == unk               ? 2
               : i == bos || i == eos ? 3
               : isByte               ? int32_t(kByte)
                                      : int32_t(kNormal);
    w.string(piece);
  }
  w.key("tokenizer.ggml.scores", kArray);
  w.scalar<uint32_t>(kF32);
  w.scalar<uint64_t>(nPieces);
  w.bytes.append(reinterpret_cast<const char *>(scores.data()),
                 scores.size() * 4);
  w.key("tokenizer.ggml.token_type", kArray);
  w.scalar<uint32_t>(kI32);
  w.scalar<uint64_t>(nPieces);
  w.bytes.append(reinterpret_cast<const char *>(types.data()),
                 types.size() * 4);
  // An id of -1 (none) is left out.
  if (unk >= 0)
    w.u32("tokenizer.ggml.unknown_token_id", uint32_t(unk));
  if (bos >= 0)
    w.u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
  if (eos >= 0)
    w.u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
}

/// The keys of a byte-level BPE tokenizer, as llama.cpp's converter writes
/// them: tokens as spelled, token types, merges in rank order, the
/// pre-tokenizer, the special ids and the add_bos / add_eos flags.
void writeByteLevelBPE(Writer &w, const kvrt_tokenizer &tokenizer) {
  const tok::Tokenizer &t = *tokenizer.impl;
  int32_t n = t.size();
  w.text("tokenizer.ggml.model", "gpt2");
  w.text("tokenizer.ggml.pre", t.preTokenizer());
  w.key("tokenizer.ggml.tokens", kArray);
  w.scalar<uint32_t>(kString);
  w.scalar<uint64_t>(n);
  for (int32_t i = 0; i < n; ++i)
    w.string(t.piece(i));
  w.key("tokenizer.ggml.token_type", kArray);
  w.scalar<uint32_t>(kI32);
  w.scalar<uint64_t>(n);
  for (int32_t i = 0; i < n; ++i)
    w.scalar<int32_t>(t.type(i));
  std::vector<std::string> merges;
  for (std::string merge; t.merge(static_cast<int32_t>(merges.size()), merge);)
    merges.push_back(merge);
  w.key("tokenizer.ggml.merges", kArray);
  w.scalar<uint32_t>(kString);
  w.scalar<uint64_t>(merges.size());
  for (const std::string &merge : merges)
    w.string(merge);
  const char *idKeys[4] = {
      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
  int32_t ids[4] = {t.unk, t.bos, t.eos, t.pad};
  for (int k = 0; k < 4; ++k)
    if (ids[k] >= 0) // an id of -1 (none) is left out
      w.u32(idKeys[k], uint32_t(ids[k]));
  w.key("tokenizer.ggml.add_bos_token", kBool);
  w.scalar<uint8_t>(t.addBos);
  w.key("tokenizer.ggml.add_eos_token", kBool);
  w.scalar<uint8_t>(t.addEos);
}

void writeTokenizer(Writer &w, const kvrt_tokenizer &tokenizer) {
  if (tokenizer.impl->kind() == KVRT_TOKENIZER_BYTE_BPE)
    writeByteLevelBPE(w, tokenizer);
  else
    writeSentencePiece(w, &tokenizer);
}

kvrt_status saveGGUF(const kvrt_model &model, const kvrt_tokenizer *tokenizer,
                     kvrt_gguf_type type, const char *path) {
  const kvrt_model_config &c = model.config;
  if (type != KVRT_GGUF_F32 && type != KVRT_GGUF_F16 &&
      type != KVRT_GGUF_BF16 && type != KVRT_GGUF_Q8_0)
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("cannot save '", path, "': unknown GGUF tensor type ", int(type)));
  if (c.rope_layout != KVRT_ROPE_INTERLEAVED)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save '", path,
                    "': GGUF's llama architecture has interleaved (normal) "
                    "RoPE only"));
  if (tokenizer && kvrt_tokenizer_check_vocab(tokenizer, c.vocab_size))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save '", path, "': ", kvrt_last_error()));
  Writer w;
  std::vector<Outgoing> tensors;
  for (const Expected &e : expectedTensors(c)) {
    uint64_t elements = e.dims[0] * e.dims[1];
    // Vectors stay F32, as llama.cpp keeps them; Q8_0 needs rows that are
    // whole blocks, else the matrix falls back to F16 (as llama.cpp's
    // converter does).
    uint32_t t = e.nDims == 1 ? uint32_t(kTF32) : uint32_t(type);
    if (t == kTQ8_0 && e.dims[0] % kQ8Block != 0)
      t = kTF16;
    const float *src =
        f32Data(model.weights.*e.decl->member) + e.layer * elements;
    tensors.push_back(
        {e.name, {e.dims[0], e.dims[1]}, e.nDims, t, src, elements});
  }
  if (c.n_rope_freq_factors)
    tensors.push_back({"rope_freqs.weight",
                       {uint64_t(c.n_rope_freq_factors), 0},
                       1,
                       kTF32,
                       c.rope_freq_factors,
                       uint64_t(c.n_rope_freq_factors)});

  w.text("general.architecture", "llama");
  w.text("general.name", "kvir");
  w.u32("general.alignment", kDefaultAlignment);
  w.u32("general.file_type", type == KVRT_GGUF_F32    ? 0
                             : type == KVRT_GGUF_F16  ? 1
                             : type == KVRT_GGUF_Q8_0 ? 7
                                                      : 32);
  w.u32("llama.context_length", uint32_t(c.seq_len));
  w.u32("llama.embedding_length", uint32_t(c.dim));
  w.u32("llama.block_count", uint32_t(c.n_layers));
  w.u32("llama.feed_forward_length", uint32_t(c.hidden_dim));
  w.u32("llama.attention.head_count", uint32_t(c.n_heads));
  w.u32("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.u32("llama.rope.dimension_count", uint32_t(kvir::ropeDims(c)));
  w.u32("llama.vocab_size", uint32_t(c.vocab_size));
  w.f32("llama.attention.layer_norm_rms_epsilon", float(c.rms_eps));
  w.f32("llama.rope.freq_base", float(c.rope_theta));
  if (kvir::ropeScale(c) != 1.0) {
    w.text("llama.rope.scaling.type", "linear");
    w.f32("llama.rope.scaling.factor", float(kvir::ropeScale(c)));
  }
  if (tokenizer)
    writeTokenizer(w, *tokenizer);
  uint64_t nKeys = w.keys;
  std::vector<std::string> payloads;
  uint64_t offset = 0;
  for (const Outgoing &t : tensors) {
    payloads.push_back(encodeTensor(t));
    w.string(t.name);
    w.scalar<uint32_t>(t.nDims);
    for (uint32_t d = 0; d < t.nDims; ++d)
      w.scalar<uint64_t>(t.dims[d]);
    w.scalar<uint32_t>(t.type);
    w.scalar<uint64_t>(offset);
    offset += (payloads.back().size() + kDefaultAlignment - 1) /
              kDefaultAlignment * kDefaultAlignment;
  }
  auto pad = [](std::string &s) {
    s.resize((s.size() + kDefaultAlignment - 1) / kDefaultAlignment *
             kDefaultAlignment);
  };
  Writer header;
  header.scalar<uint32_t>(kMagic);
  header.scalar<uint32_t>(kVersion);
  header.scalar<uint64_t>(tensors.size());
  header.scalar<uint64_t>(nKeys);
  w.bytes.insert(0, header.bytes);
  pad(w.bytes);
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(std::fopen(path, "wb"),
                                                        std::fclose);
  if (!file)
    return fail(KVRT_ERR_IO,
                str("cannot create '", path, "': ", std::strerror(errno)));
  bool ok = std::fwrite(w.bytes.data(), 1, w.bytes.size(), file.get()) ==
            w.bytes.size();
  for (std::string &payload : payloads) {
    pad(payload);
    ok = ok && std::fwrite(payload.data(), 1, payload.size(), file.get()) ==
                   payload.size();
  }
  ok = (std::fclose(file.release()) == 0) && ok;
  if (!ok)
    return fail(KVRT_ERR_IO,
                str("cannot write '", path, "': ", std::strerror(errno)));
  return KVRT_OK;
}

} // namespace

extern "C" kvrt_status kvrt_model_save_gguf(const kvrt_model *model,
                                            const kvrt_tokenizer *tokenizer,
                                            kvrt_gguf_type type,
                                            const char *path) {
  if (!model || !path)
    return nullArgument(__func__);
  return guard([&] { return saveGGUF(*model, tokenizer, type, path); });
}
