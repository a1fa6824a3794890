//===- GGUFWriter.cpp - Write GGUF v3 llama models --------------*- C++ -*-===//
//
// kvrt_model_save_gguf: a model's config as llama.* keys, its matrices in one
// of the weight formats or a mix of them (Quant.h quantises), and optionally a
// tokenizer's vocabulary.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/GGUFFormat.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
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

/// One tensor to write: its name, shape, format, and its data: `raw` bytes
/// already in that format, or f32 `src` to convert.
struct Outgoing {
  std::string name;
  uint64_t dims[2];
  uint32_t nDims;
  kvrt_weight_format format;
  const float *src;
  const void *raw;
};

/// `bytes` rounded up to whole alignment units: where a tensor's data and
/// the data section begin.
uint64_t aligned(uint64_t bytes) {
  return (bytes + kDefaultAlignment - 1) / kDefaultAlignment *
         kDefaultAlignment;
}

/// Bytes of `t`'s data in its format.
uint64_t tensorBytes(const Outgoing &t) {
  int64_t cols = int64_t(t.dims[0]),
          rows = t.nDims == 2 ? int64_t(t.dims[1]) : 1;
  return uint64_t(rows * weightRowBytes(t.format, cols));
}

/// The size of the file's write buffer (saveGGUF).
constexpr size_t kWriteBufferBytes = size_t(4) << 20;

/// Writes `t`'s data in its format to `file`, padded to whole alignment
/// units: raw bytes as they lie, f32 sources quantised into a buffer first.
/// Rows are quantised on the runtime's threads (kvrt_parallel_for): each row
/// on its own, so the bytes do not depend on the thread count; the K-quants'
/// search made a ~1e9-weight model take minutes on one.
bool writeTensor(std::FILE *file, const Outgoing &t) {
  int64_t cols = int64_t(t.dims[0]),
          rows = t.nDims == 2 ? int64_t(t.dims[1]) : 1;
  int64_t rowBytes = weightRowBytes(t.format, cols);
  size_t bytes = size_t(tensorBytes(t));
  std::vector<char> encoded;
  const void *data = t.raw;
  if (!data) {
    encoded.resize(bytes);
    struct Job {
      const Outgoing &t;
      int64_t cols, rowBytes;
      char *dst;
    } job{t, cols, rowBytes, encoded.data()};
    kvrt_parallel_for(
        rows,
        [](void *context, int64_t begin, int64_t end) {
          const Job &j = *static_cast<const Job *>(context);
          for (int64_t r = begin; r < end; ++r)
            quantizeRow(j.t.format, j.t.src + r * j.cols,
                        j.dst + r * j.rowBytes, j.cols);
        },
        &job);
    data = encoded.data();
  }
  static const char zeros[kDefaultAlignment] = {};
  size_t padding = size_t(aligned(bytes)) - bytes;
  return std::fwrite(data, 1, bytes, file) == bytes &&
         std::fwrite(zeros, 1, padding, file) == padding;
}

/// llama.cpp's choice of layers that get more bits in its _M mixes: the
/// first and last eighth, and every third layer between.
bool useMoreBits(int32_t layer, int32_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 ||
         (layer - layers / 8) % 3 == 2;
}

/// The format a matrix of `e` is written in for `type` (docs/models.md), by
/// llama.cpp's llama-quantize rules for the llama architecture (without
/// --pure): the type's, but the classifier (output.weight, or the embedding
/// a tied classifier is) in Q6_K for every block type but Q8_0, and for the
/// _M mixes attn_v and ffn_down of the layers useMoreBits picks in Q6_K too;
/// then, where rows are not whole blocks of it, a K-quant falls back to Q8_0
/// (llama.cpp takes Q5_0, Q5_1 and Q8_0 for Q4_K, Q5_K and Q6_K; KVIR reads
/// none of the first two, so it takes the larger Q8_0, as llama.cpp does for
/// a classifier) and what still does not fit to F16.
kvrt_weight_format formatFor(kvrt_gguf_type type, const Expected &e,
                             const kvrt_model_config &c) {
  kvrt_weight_format f = KVRT_WEIGHT_F32;
  bool mix = type == KVRT_GGUF_Q4_K_M || type == KVRT_GGUF_Q5_K_M;
  switch (type) {
  case KVRT_GGUF_F32:
    f = KVRT_WEIGHT_F32;
    break;
  case KVRT_GGUF_F16:
    f = KVRT_WEIGHT_F16;
    break;
  case KVRT_GGUF_BF16:
    f = KVRT_WEIGHT_BF16;
    break;
  case KVRT_GGUF_Q8_0:
    f = KVRT_WEIGHT_Q8_0;
    break;
  case KVRT_GGUF_Q4_0:
    f = KVRT_WEIGHT_Q4_0;
    break;
  case KVRT_GGUF_Q4_K:
  case KVRT_GGUF_Q4_K_M:
    f = KVRT_WEIGHT_Q4_K;
    break;
  case KVRT_GGUF_Q5_K:
  case KVRT_GGUF_Q5_K_M:
    f = KVRT_WEIGHT_Q5_K;
    break;
  case KVRT_GGUF_Q6_K:
    f = KVRT_WEIGHT_Q6_K;
    break;
  }
  uint64_t cols = e.dims[0];
  TensorId id = e.decl->id;
  bool classifier = id == TensorId::wcls ||
                    (id == TensorId::token_embedding && c.shared_classifier);
  if (classifier && isBlockFormat(f) && f != KVRT_WEIGHT_Q8_0)
    f = cols % 256 ? KVRT_WEIGHT_Q8_0 : KVRT_WEIGHT_Q6_K;
  else if (mix && (id == TensorId::wv || id == TensorId::w2) &&
           useMoreBits(e.layer, c.n_layers))
    f = KVRT_WEIGHT_Q6_K;
  if (cols % uint64_t(blockLayout(f).elements) != 0 &&
      blockLayout(f).elements == 256)
    f = KVRT_WEIGHT_Q8_0;
  if (cols % uint64_t(blockLayout(f).elements) != 0)
    f = KVRT_WEIGHT_F16;
  return f;
}

/// llama.cpp's general.file_type of `type` (its llama_ftype).
uint32_t fileTypeOf(kvrt_gguf_type type) {
  switch (type) {
  case KVRT_GGUF_F32:
    return 0;
  case KVRT_GGUF_F16:
    return 1;
  case KVRT_GGUF_Q4_0:
    return 2;
  case KVRT_GGUF_Q8_0:
    return 7;
  case KVRT_GGUF_Q4_K:
    return 14; // Q4_K_S: every matrix Q4_K here
  case KVRT_GGUF_Q4_K_M:
    return 15;
  case KVRT_GGUF_Q5_K:
    return 16; // Q5_K_S
  case KVRT_GGUF_Q5_K_M:
    return 17;
  case KVRT_GGUF_Q6_K:
    return 18;
  case KVRT_GGUF_BF16:
    return 32;
  }
  return 0;
}

/// Whether `type` is one kv-convert and kvrt_model_save_gguf write.
bool knownType(int type) {
  switch (type) {
  case KVRT_GGUF_F32:
  case KVRT_GGUF_F16:
  case KVRT_GGUF_Q4_0:
  case KVRT_GGUF_Q8_0:
  case KVRT_GGUF_Q4_K:
  case KVRT_GGUF_Q5_K:
  case KVRT_GGUF_Q6_K:
  case KVRT_GGUF_BF16:
  case KVRT_GGUF_Q4_K_M:
  case KVRT_GGUF_Q5_K_M:
    return true;
  }
  return false;
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
  if (!knownType(int(type)))
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("cannot save '", path, "': unknown GGUF tensor type ", int(type)));
  // The architecture is the one whose RoPE layout the config has: llama
  // for interleaved (normal), qwen2 for half (neox).
  const Architecture *arch = nullptr;
  for (const Architecture &a : kArchitectures)
    if (a.rope == c.rope_layout)
      arch = &a;
  if (!arch)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save '", path,
                    "': no GGUF architecture has its "
                    "RoPE layout"));
  if (!arch->ropeVariants && (c.rope_dim != 0 || c.n_rope_freq_factors != 0))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save '", path, "': half (neox) RoPE is GGUF's ",
                    arch->name,
                    " architecture, which rotates whole heads without "
                    "frequency factors (llama, with interleaved RoPE, has "
                    "them)"));
  if (tokenizer && kvrt_tokenizer_check_vocab(tokenizer, c.vocab_size))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save '", path, "': ", kvrt_last_error()));
  Writer w;
  std::vector<Outgoing> tensors;
  // The f32 values of weights whose format is not the one written.
  const std::vector<float> *f32 = nullptr;
  uint64_t f32At = 0;
  const TensorDecl *f32Decl = nullptr;
  for (const Expected &e : expectedTensors(c)) {
    const kvrt_weight &w = model.weights.*e.decl->member;
    // Vectors stay F32, as llama.cpp keeps them.
    kvrt_weight_format f =
        e.nDims == 1 ? KVRT_WEIGHT_F32 : formatFor(type, e, c);
    const kvrt_weight_slice &slice = w.slices[e.layer];
    Outgoing out{e.name, {e.dims[0], e.dims[1]}, e.nDims, f, nullptr, nullptr};
    if (slice.format == f) {
      out.raw = slice.data;
    } else {
      if (!f32)
        f32 = &f32Weights(model);
      // The slice's place in f32Weights: tensors in order, slices back to
      // back.
      if (f32Decl != e.decl) {
        f32At = 0;
        for (const TensorSpec &spec : specsOf(c)) {
          if (spec.decl == e.decl)
            break;
          f32At += spec.count;
        }
        f32Decl = e.decl;
      }
      out.src = f32->data() + f32At + uint64_t(e.layer) * w.rows * w.cols;
    }
    tensors.push_back(out);
  }
  if (c.n_rope_freq_factors)
    tensors.push_back({"rope_freqs.weight",
                       {uint64_t(c.n_rope_freq_factors), 0},
                       1,
                       KVRT_WEIGHT_F32,
                       c.rope_freq_factors,
                       nullptr});

  w.text("general.architecture", arch->name);
  std::string prefix = std::string(arch->name) + ".";
  auto key = [&](const char *what) { return prefix + what; };
  w.text("general.name", "kvir");
  w.u32("general.alignment", kDefaultAlignment);
  w.u32("general.file_type", fileTypeOf(type));
  w.u32(key("context_length"), uint32_t(c.seq_len));
  w.u32(key("embedding_length"), uint32_t(c.dim));
  w.u32(key("block_count"), uint32_t(c.n_layers));
  w.u32(key("feed_forward_length"), uint32_t(c.hidden_dim));
  w.u32(key("attention.head_count"), uint32_t(c.n_heads));
  w.u32(key("attention.head_count_kv"), uint32_t(c.n_kv_heads));
  w.u32(key("rope.dimension_count"), uint32_t(kvir::ropeDims(c)));
  w.u32(key("vocab_size"), uint32_t(c.vocab_size));
  w.f32(key("attention.layer_norm_rms_epsilon"), float(c.rms_eps));
  w.f32(key("rope.freq_base"), float(c.rope_theta));
  if (kvir::ropeScale(c) != 1.0) {
    w.text(key("rope.scaling.type"), "linear");
    w.f32(key("rope.scaling.factor"), float(kvir::ropeScale(c)));
  }
  if (tokenizer)
    writeTokenizer(w, *tokenizer);
  uint64_t nKeys = w.keys;
  // The header first, from the tensors' sizes; then each tensor encoded and
  // written in turn, so that at most one tensor's bytes are held at once.
  uint64_t offset = 0;
  for (const Outgoing &t : tensors) {
    w.string(t.name);
    w.scalar<uint32_t>(t.nDims);
    for (uint32_t d = 0; d < t.nDims; ++d)
      w.scalar<uint64_t>(t.dims[d]);
    w.scalar<uint32_t>(ggmlTypeOf(t.format));
    w.scalar<uint64_t>(offset);
    offset += aligned(tensorBytes(t));
  }
  Writer header;
  header.scalar<uint32_t>(kMagic);
  header.scalar<uint32_t>(kVersion);
  header.scalar<uint64_t>(tensors.size());
  header.scalar<uint64_t>(nKeys);
  w.bytes.insert(0, header.bytes);
  w.bytes.resize(aligned(w.bytes.size()));
  // (Declared first: the file, if still open, is closed before it goes.)
  std::vector<char> buffer(kWriteBufferBytes);
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(std::fopen(path, "wb"),
                                                        std::fclose);
  if (!file)
    return fail(KVRT_ERR_IO,
                str("cannot create '", path, "': ", std::strerror(errno)));
  // Writes of whole 4 MiB buffers at 4 MiB-aligned offsets: a file system
  // with large folios (ext4 and XFS on recent kernels) then caches the file
  // in 2 MiB folios, which a reader maps whole; written 4 KiB at a time it
  // stays in 4 KiB pages until evicted, and a decode step reading it runs
  // slower (a TinyLlama-shape Q8_0 step by about a tenth; HugePages.h).
  std::setvbuf(file.get(), buffer.data(), _IOFBF, buffer.size());
  bool ok = std::fwrite(w.bytes.data(), 1, w.bytes.size(), file.get()) ==
            w.bytes.size();
  for (const Outgoing &t : tensors) {
    if (!ok)
      break;
    ok = writeTensor(file.get(), t);
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
