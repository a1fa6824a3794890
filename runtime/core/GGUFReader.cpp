//===- GGUFReader.cpp - Read GGUF v3 llama models ---------------*- C++ -*-===//
//
// The reader of GGUF files (GGUFFormat.h) behind kvrt_model_load,
// kvrt_model_load_gguf_buffer and kvrt_tokenizer_load. It never trusts a
// count: each one is checked against the bytes left before anything is
// reserved for it, and every size goes through overflow-checked arithmetic.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/GGUFFormat.h"
#include "runtime/core/HugePages.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
#include "runtime/core/Support.h"
#include "runtime/core/tokenizer/PreTokenizer.h"
#include "runtime/core/tokenizer/TokenizerImpl.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the GGUF reader assumes a little-endian host");

using namespace kvrt;
using namespace kvrt::gguf;

namespace {

constexpr uint64_t kMaxKeyBytes = 65535;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

const char *valueTypeName(uint32_t type) {
  static const char *names[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                "i32", "f32", "bool", "string", "array",
                                "u64", "i64", "f64"};
  return type < std::size(names) ? names[type] : "unknown";
}

/// Bytes of a scalar value type, 0 for strings, arrays and unknown types.
uint64_t scalarBytes(uint32_t type) {
  switch (type) {
  case kU8:
  case kI8:
  case kBool:
    return 1;
  case kU16:
  case kI16:
    return 2;
  case kU32:
  case kI32:
  case kF32:
    return 4;
  case kU64:
  case kI64:
  case kF64:
    return 8;
  default:
    return 0;
  }
}

/// A metadata value: scalars decoded, strings and arrays as positions.
struct Value {
  uint32_t type = 0;
  uint64_t u = 0; // unsigned integers and bool
  int64_t i = 0;  // signed integers
  double f = 0;   // floats
  std::string_view s;
  uint32_t elementType = 0; // arrays
  uint64_t count = 0;
  size_t elements = 0; // offset of the first element
};

struct TensorInfo {
  std::string_view name;
  uint32_t nDims = 0;
  uint64_t dims[kMaxDims] = {1, 1, 1, 1};
  uint32_t type = 0;
  uint64_t offset = 0; // within the data section
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

std::string shapeText(const uint64_t *dims, uint32_t n) {
  std::string text = "[";
  for (uint32_t i = 0; i < n; ++i)
    text += str(i ? ", " : "", dims[i]);
  return text + "]";
}

/// A bounds-checked cursor over the file's bytes.
class Reader {
public:
  Reader(const uint8_t *data, size_t size) : data(data), size(size) {}

  size_t position() const { return pos; }
  uint64_t left() const { return size - pos; }
  const std::string &error() const { return problem; }

  bool failWith(std::string message) {
    if (problem.empty())
      problem = std::move(message);
    return false;
  }

  bool need(uint64_t n, const std::string &what) {
    if (n <= left())
      return true;
    return failWith(str("truncated file: ", what, " at byte ", pos, " needs ",
                        n, " bytes, ", left(), " are left"));
  }

  template <typename T> bool scalar(T &out, const std::string &what) {
    if (!need(sizeof(T), what))
      return false;
    std::memcpy(&out, data + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }

  bool string(std::string_view &out, const std::string &what) {
    size_t at = pos;
    uint64_t length;
    if (!scalar(length, what + " length"))
      return false;
    if (length > left())
      return failWith(str("string length ", length, " of ", what, " at byte ",
                          at, " exceeds the ", left(),
                          " bytes left in the file"));
    out = std::string_view(reinterpret_cast<const char *>(data + pos),
                           static_cast<size_t>(length));
    pos += static_cast<size_t>(length);
    return true;
  }

  /// Reads (scalars, strings) or skips over (array elements) a value.
  bool value(uint32_t type, Value &out, const std::string &what,
             int depth = 0) {
    out.type = type;
    if (uint64_t bytes = scalarBytes(type)) {
      if (!need(bytes, what))
        return false;
      // The value's bytes as an unsigned integer (a little-endian host),
      // sign-extended for signed types, reinterpreted for floats.
      const uint8_t *p = data + pos;
      uint64_t bits = 0;
      std::memcpy(&bits, p, bytes);
      switch (type) {
      case kI8:
      case kI16:
      case kI32:
      case kI64: {
        unsigned unused = 64 - 8 * unsigned(bytes);
        out.i = static_cast<int64_t>(bits << unused) >> unused;
        break;
      }
      case kF32: {
        float f;
        std::memcpy(&f, p, sizeof(f));
        out.f = f;
        break;
      }
      case kF64:
        std::memcpy(&out.f, p, sizeof(out.f));
        break;
      default: // unsigned integers and bool
        out.u = bits;
        break;
      }
      pos += static_cast<size_t>(bytes);
      return true;
    }
    if (type == kString)
      return string(out.s, what);
    if (type != kArray)
      return failWith(
          str(what, " has unknown value type ", type, " at byte ", pos - 4));
    if (depth >= kMaxArrayDepth)
      return failWith(
          str(what, " nests arrays more than ", kMaxArrayDepth, " deep"));
    if (!scalar(out.elementType, what + " element type") ||
        !scalar(out.count, what + " element count"))
      return false;
    out.elements = pos;
    uint64_t elementBytes = scalarBytes(out.elementType);
    // Strings take at least their 8-byte length, arrays 12 bytes.
    uint64_t least = elementBytes                 ? elementBytes
                     : out.elementType == kString ? 8
                     : out.elementType == kArray  ? 12
                                                  : 0;
    if (!least)
      return failWith(
          str(what, " is an array of unknown value type ", out.elementType));
    if (out.count > left() / least)
      return failWith(str(what, " claims ", out.count, " elements of type ",
                          valueTypeName(out.elementType), " at byte ", pos,
                          ", more than the ", left(), " bytes left hold"));
    if (elementBytes) {
      pos += static_cast<size_t>(out.count * elementBytes);
      return true;
    }
    Value element;
    for (uint64_t i = 0; i < out.count; ++i)
      if (!value(out.elementType, element, str(what, "[", i, "]"), depth + 1))
        return false;
    return true;
  }

  void seek(size_t to) { pos = to; }

private:
  const uint8_t *data;
  size_t size;
  size_t pos = 0;
  std::string problem;
};

/// The parsed and validated structure of a file.
struct Parsed {
  std::map<std::string_view, Value, std::less<>> keys;
  std::vector<TensorInfo> tensors;
  uint64_t dataStart = 0;
  /// Bytes from dataStart to the end of the file.
  uint64_t dataBytes = 0;
  uint32_t alignment = kDefaultAlignment;
};

/// Bytes of a tensor of `elements` elements of `type` whose rows are `row`
/// long; nullopt (with `error`) when the type cannot hold that shape (rows
/// that are not whole blocks).
std::optional<uint64_t> tensorBytes(uint32_t type, uint64_t elements,
                                    uint64_t row, std::string &error) {
  kvrt_weight_format format = *formatOfGgmlType(type);
  BlockLayout block = blockLayout(format);
  if (row % uint64_t(block.elements) != 0) {
    error = str("has rows of ", row, " elements, not a multiple of the ",
                block.elements, " of a ", ggmlTypeName(type), " block");
    return std::nullopt;
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(elements / uint64_t(block.elements),
                             uint64_t(block.bytes), &bytes))
    return std::nullopt;
  return bytes;
}

std::string parseStructure(const uint8_t *data, size_t size, Parsed &out) {
  Reader r(data, size);
  uint32_t magic = 0, version = 0;
  if (size < 4)
    return str("truncated file: ", size, " bytes, not even the 4-byte magic");
  r.scalar(magic, "magic");
  if (magic != kMagic)
    return "bad magic: not a GGUF file (the first 4 bytes are not 'GGUF')";
  if (!r.scalar(version, "version"))
    return r.error();
  if (version != kVersion)
    return str("unsupported GGUF version ", version, " (only version ",
               kVersion, " is read)");
  uint64_t nTensors = 0, nKeys = 0;
  if (!r.scalar(nTensors, "tensor count") || !r.scalar(nKeys, "metadata count"))
    return r.error();
  // A key takes at least 13 bytes (length, type, a 1-byte value), a tensor
  // info at least 32 (name length, n_dims, one dim, type, offset).
  if (nKeys > r.left() / 13)
    return str("metadata count ", nKeys, " exceeds what the ", r.left(),
               " bytes after the header can hold");
  if (nTensors > r.left() / 32)
    return str("tensor count ", nTensors, " exceeds what the ", r.left(),
               " bytes after the header can hold");

  for (uint64_t k = 0; k < nKeys; ++k) {
    std::string_view key;
    size_t at = r.position();
    if (!r.string(key, str("metadata key ", k)))
      return r.error();
    if (key.empty() || key.size() > kMaxKeyBytes)
      return str("metadata key ", k, " at byte ", at, " has length ",
                 key.size(), " (must be 1 to ", kMaxKeyBytes, ")");
    uint32_t type;
    Value value;
    std::string what = str("metadata '", key, "'");
    if (!r.scalar(type, what + " type") || !r.value(type, value, what))
      return r.error();
    if (!out.keys.emplace(key, value).second)
      return str("duplicate metadata key '", key, "'");
  }

  if (auto it = out.keys.find("general.alignment"); it != out.keys.end()) {
    const Value &v = it->second;
    if (v.type != kU32)
      return str("metadata 'general.alignment' has type ",
                 valueTypeName(v.type), ", expected u32");
    if (v.u == 0 || (v.u & (v.u - 1)) != 0)
      return str("general.alignment = ", v.u, " is not a power of two");
    out.alignment = static_cast<uint32_t>(v.u);
  }

  out.tensors.reserve(static_cast<size_t>(nTensors));
  for (uint64_t t = 0; t < nTensors; ++t) {
    TensorInfo info;
    std::string what = str("tensor ", t);
    if (!r.string(info.name, what + " name"))
      return r.error();
    what = str("tensor '", info.name, "'");
    if (!r.scalar(info.nDims, what + " dimension count"))
      return r.error();
    if (info.nDims < 1 || info.nDims > kMaxDims)
      return str(what, " has ", info.nDims, " dimensions (1 to ", kMaxDims,
                 " are allowed)");
    info.elements = 1;
    for (uint32_t d = 0; d < info.nDims; ++d) {
      if (!r.scalar(info.dims[d], str(what, " dimension ", d)))
        return r.error();
      if (info.dims[d] == 0)
        return str(what, " has an empty dimension ", d);
      if (__builtin_mul_overflow(info.elements, info.dims[d], &info.elements))
        return str(what, " has more than 2^64 elements");
    }
    if (!r.scalar(info.type, what + " type") ||
        !r.scalar(info.offset, what + " offset"))
      return r.error();
    if (!formatOfGgmlType(info.type)) {
      const char *name = ggmlTypeName(info.type);
      if (!*name)
        return str(what, " has unknown tensor type ", info.type);
      return str(what, " has type ", name, " (", info.type,
                 "), which is not supported (F32, F16, BF16, Q8_0, Q4_0, "
                 "Q4_K, Q5_K and Q6_K are)");
    }
    std::string problem;
    std::optional<uint64_t> bytes =
        tensorBytes(info.type, info.elements, info.dims[0], problem);
    if (!bytes)
      return str(what, " of type ", ggmlTypeName(info.type), " and shape ",
                 shapeText(info.dims, info.nDims), " ",
                 problem.empty() ? "has more than 2^64 bytes" : problem);
    info.bytes = *bytes;
    if (info.offset % out.alignment != 0)
      return str(what, " offset ", info.offset,
                 " is not aligned to general.alignment = ", out.alignment);
    for (const TensorInfo &other : out.tensors)
      if (other.name == info.name)
        return str("duplicate tensor name '", info.name, "'");
    out.tensors.push_back(info);
  }

  uint64_t end = r.position();
  out.dataStart = (end + out.alignment - 1) / out.alignment * out.alignment;
  if (out.dataStart > size && !out.tensors.empty())
    return str("truncated file: the data section would start at byte ",
               out.dataStart, ", past the end of the file (", size, " bytes)");
  uint64_t dataBytes = out.dataStart > size ? 0 : size - out.dataStart;
  out.dataBytes = dataBytes;
  std::vector<const TensorInfo *> byOffset;
  for (const TensorInfo &info : out.tensors) {
    if (info.offset > dataBytes || info.bytes > dataBytes - info.offset)
      return str("tensor '", info.name, "' (", info.bytes,
                 " bytes at data offset ", info.offset,
                 ") extends beyond the end of the file: the data section "
                 "holds ",
                 dataBytes, " bytes");
    byOffset.push_back(&info);
  }
  std::sort(byOffset.begin(), byOffset.end(),
            [](const TensorInfo *a, const TensorInfo *b) {
              return a->offset < b->offset;
            });
  for (size_t i = 1; i < byOffset.size(); ++i)
    if (byOffset[i - 1]->offset + byOffset[i - 1]->bytes > byOffset[i]->offset)
      return str("tensors '", byOffset[i - 1]->name, "' and '",
                 byOffset[i]->name, "' overlap in the data section");
  return "";
}

//===----------------------------------------------------------------------===//
// Metadata access
//===----------------------------------------------------------------------===//

/// Typed access to the metadata keys. Like Reader, it keeps the first
/// problem it meets: an accessor returns nullopt for an absent key (a problem
/// when `required`) or one of the wrong type (a problem), and `error()` says
/// what the first problem was.
class Metadata {
public:
  explicit Metadata(const Parsed &parsed) : parsed(parsed) {}

  const std::string &error() const { return problem; }

  const Value *find(std::string_view key) const {
    auto it = parsed.keys.find(key);
    return it == parsed.keys.end() ? nullptr : &it->second;
  }

  /// An integer key in [0, INT32_MAX], stored as any integer type.
  std::optional<int32_t> count(std::string_view key,
                               bool required = false) const {
    const Value *v = lookup(key, required);
    if (!v)
      return std::nullopt;
    int64_t value;
    switch (v->type) {
    case kU8:
    case kU16:
    case kU32:
    case kU64:
      value = v->u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v->u);
      break;
    case kI8:
    case kI16:
    case kI32:
    case kI64:
      value = v->i;
      break;
    default:
      return wrongType(key, *v, "an integer (u32 or u64)");
    }
    if (value < 0 || value > std::numeric_limits<int32_t>::max())
      return failWith(
          str("key '", key, "' = ", value, " is out of range [0, 2^31)"));
    return static_cast<int32_t>(value);
  }

  /// A float key (f32 or f64). An f32 becomes the double of its shortest
  /// decimal form, so that 1e-5f reads as 1e-5, as a llama2.c model has it.
  std::optional<double> real(std::string_view key,
                             bool required = false) const {
    const Value *v = lookup(key, required);
    if (!v)
      return std::nullopt;
    if (v->type == kF64)
      return v->f;
    if (v->type != kF32)
      return wrongType(key, *v, "f32");
    return shortestDouble(static_cast<float>(v->f));
  }

  std::optional<std::string_view> text(std::string_view key,
                                       bool required = false) const {
    const Value *v = lookup(key, required);
    if (!v)
      return std::nullopt;
    if (v->type != kString)
      return wrongType(key, *v, "string");
    return v->s;
  }

  /// A bool key (tokenizer.ggml.add_bos_token, ...).
  std::optional<bool> flag(std::string_view key) const {
    const Value *v = lookup(key, false);
    if (!v)
      return std::nullopt;
    if (v->type != kBool)
      return wrongType(key, *v, "bool");
    return v->u != 0;
  }

  /// An array key of `elementType` elements (an absent one is a problem
  /// when `required`, another type always). With `perToken` (the
  /// tokenizer.ggml.tokens array), it must have one element per token.
  const Value *array(std::string_view key, uint32_t elementType,
                     bool required = false,
                     const Value *perToken = nullptr) const {
    const Value *v = lookup(key, required);
    if (!v)
      return nullptr;
    if (v->type != kArray || v->elementType != elementType) {
      failWith(
          str("key '", key, "' must be an array of ",
              elementType == kString ? "strings" : valueTypeName(elementType)));
      return nullptr;
    }
    if (perToken && v->count != perToken->count) {
      failWith(str("key '", key, "' has ", v->count,
                   " entries, tokenizer.ggml.tokens ", perToken->count));
      return nullptr;
    }
    return v;
  }

  static double shortestDouble(float value) {
    if (!std::isfinite(value))
      return value;
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, value);
    *end = '\0';
    return std::strtod(buf, nullptr);
  }

private:
  /// The value of `key`, or null where the file has none.
  const Value *lookup(std::string_view key, bool required) const {
    const Value *v = find(key);
    if (!v && required)
      failWith(str("missing key '", key, "'"));
    return v;
  }

  std::nullopt_t failWith(std::string message) const {
    if (problem.empty())
      problem = std::move(message);
    return std::nullopt;
  }

  std::nullopt_t wrongType(std::string_view key, const Value &v,
                           const char *expected) const {
    return failWith(str("key '", key, "' has type ", valueTypeName(v.type),
                        ", expected ", expected));
  }

  const Parsed &parsed;
  mutable std::string problem;
};

//===----------------------------------------------------------------------===//
// The model
//===----------------------------------------------------------------------===//

/// The format of a validated tensor, and what is wrong with its data
/// (its elements or block scales), or "".
kvrt_weight_format formatOf(const TensorInfo &info) {
  return *formatOfGgmlType(info.type);
}
std::string checkTensor(const TensorInfo &info, const uint8_t *src) {
  std::string problem =
      checkWeightData(formatOf(info), src, int64_t(info.elements));
  return problem.empty() ? "" : str("tensor '", info.name, "' ", problem);
}

std::string readConfig(const Metadata &meta, const Parsed &parsed,
                       kvrt_model_config &c, const TensorInfo *&ropeFreqs) {
  std::optional<std::string_view> archName =
      meta.text("general.architecture", true);
  if (!archName)
    return meta.error();
  const Architecture *arch = nullptr;
  for (const Architecture &a : kArchitectures)
    if (*archName == a.name)
      arch = &a;
  if (!arch)
    return str("architecture '", *archName, "' is not supported (",
               architectureNames(), " are)");
  // The keys of the architecture: "<arch>.<what>".
  std::string prefix = std::string(arch->name) + ".";
  auto key = [&](const char *what) { return prefix + what; };
  kvrt_model_config_init(&c);
  struct Size {
    std::string key;
    int32_t *field;
  } sizes[] = {{key("context_length"), &c.seq_len},
               {key("embedding_length"), &c.dim},
               {key("block_count"), &c.n_layers},
               {key("feed_forward_length"), &c.hidden_dim},
               {key("attention.head_count"), &c.n_heads}};
  for (const Size &s : sizes) {
    std::optional<int32_t> v = meta.count(s.key, true);
    if (!v)
      return meta.error();
    if (*v == 0)
      return str("key '", s.key, "' = 0 must be positive");
    *s.field = *v;
  }
  // Optional in the GGUF spec: head_count_kv defaults to head_count.
  std::optional<int32_t> kvHeads = meta.count(key("attention.head_count_kv"));
  std::optional<double> eps =
      meta.real(key("attention.layer_norm_rms_epsilon"), true);
  std::optional<double> theta = meta.real(key("rope.freq_base"));
  if (!meta.error().empty())
    return meta.error();
  c.n_kv_heads = kvHeads ? *kvHeads : c.n_heads;
  c.rms_eps = *eps;
  c.rope_theta = theta ? *theta : 10000.0;
  // llama.cpp's RoPE type of the architecture: llama's "normal"
  // (interleaved pairs, the order its converter permutes Q/K into), qwen2's
  // "neox" (halves, Q/K as Hugging Face stores them).
  c.rope_layout = arch->rope;
  if (c.n_heads == 0 || c.dim % c.n_heads != 0)
    return str("invalid configuration: ", kvir::describeArchitectureError(c));
  std::optional<int32_t> ropeDim = meta.count(key("rope.dimension_count"));
  std::optional<std::string_view> scaling = meta.text(key("rope.scaling.type"));
  std::optional<double> factor = meta.real(key("rope.scaling.factor"));
  if (!meta.error().empty())
    return meta.error();
  if (ropeDim)
    c.rope_dim = *ropeDim == c.dim / c.n_heads ? 0 : *ropeDim;
  if (c.rope_dim != 0 && !arch->ropeVariants)
    return str("key '", key("rope.dimension_count"), "' = ", *ropeDim, ": the ",
               arch->name, " architecture rotates whole heads (",
               c.dim / c.n_heads, ")");
  if (scaling && *scaling != "none" && *scaling != "linear")
    return str("RoPE scaling '", *scaling,
               "' is not supported (none and linear are)");
  if (factor && (!scaling || *scaling == "linear")) {
    if (!(std::isfinite(*factor) && *factor > 0))
      return str("key '", key("rope.scaling.factor"), "' = ", *factor,
                 " must be positive and finite");
    c.rope_scale = *factor;
  }
  if (scaling && *scaling == "linear" && !factor)
    return str("missing key '", key("rope.scaling.factor"), "' (",
               key("rope.scaling.type"), " is linear)");

  // The vocabulary is the embedding's outer dimension. An optional tensor
  // (its first slice) in the file sets what makes it present: output.weight
  // a separate classifier.
  const TensorInfo *embedding = nullptr;
  for (const TensorInfo &info : parsed.tensors) {
    if (info.name == tensorDecl(TensorId::token_embedding).gguf)
      embedding = &info;
    if (info.name == "rope_freqs.weight" && arch->ropeVariants)
      ropeFreqs = &info;
    for (const TensorDecl &t : kTensors)
      if (t.presence != TensorPresence::Always && info.name == tensorName(t, 0))
        setTensorPresent(t.presence, c);
  }
  if (!embedding)
    return "missing tensor 'token_embd.weight'";
  if (embedding->nDims != 2 || embedding->dims[1] > INT32_MAX)
    return str("tensor 'token_embd.weight' has shape ",
               shapeText(embedding->dims, embedding->nDims), ", expected [",
               c.dim, ", vocab]");
  c.vocab_size = static_cast<int32_t>(embedding->dims[1]);
  std::optional<int32_t> vocab = meta.count(key("vocab_size"));
  if (!meta.error().empty())
    return meta.error();
  if (vocab && *vocab != c.vocab_size)
    return str("key '", key("vocab_size"), "' = ", *vocab,
               " but token_embd.weight has ", c.vocab_size, " rows");
  std::string problem = describeConfigError(c);
  if (!problem.empty())
    return "invalid configuration: " + problem;
  if (ropeFreqs) {
    int32_t pairs = kvir::ropeDims(c) / 2;
    if (ropeFreqs->nDims != 1 || ropeFreqs->dims[0] != uint64_t(pairs))
      return str("tensor 'rope_freqs.weight' has shape ",
                 shapeText(ropeFreqs->dims, ropeFreqs->nDims), ", expected [",
                 pairs, "] (one factor per rotary pair)");
    if (pairs > KVRT_MAX_ROPE_PAIRS)
      return str("tensor 'rope_freqs.weight' has ", pairs,
                 " factors, more than the ", KVRT_MAX_ROPE_PAIRS,
                 " a config holds");
  }
  return "";
}

/// Reads the model of a parsed file whose bytes are `data`. The model's
/// weights point into `storage` where it is given (the file's mapping, which
/// the model keeps), else into a copy of the data section the model owns;
/// norm vectors of a format other than f32 (and f32 tensors a file puts at
/// an address that is not a multiple of 4) are converted into memory of its
/// own. Every tensor's data is checked first: finite elements, finite block
/// scales.
std::string readModel(const uint8_t *data, const Parsed &parsed,
                      std::shared_ptr<const void> storage, kvrt_model **out) {
  Metadata meta(parsed);
  kvrt_model_config c;
  const TensorInfo *ropeFreqs = nullptr;
  std::string error = readConfig(meta, parsed, c, ropeFreqs);
  if (!error.empty())
    return error;
  // No more names than the file has tensors, plus one: with more layers than
  // the file holds, the first missing tensor is among them.
  std::vector<Expected> expected =
      expectedTensors(c, parsed.tensors.size() + 1);
  std::map<std::string_view, const TensorInfo *> byName;
  for (const TensorInfo &info : parsed.tensors)
    byName[info.name] = &info;
  // Every tensor is expected or rope_freqs, every expected one is there with
  // its shape: all before anything is allocated.
  std::vector<const TensorInfo *> order;
  for (const Expected &e : expected) {
    auto it = byName.find(e.name);
    if (it == byName.end())
      return str("missing tensor '", e.name, "'");
    const TensorInfo &info = *it->second;
    bool same = info.nDims == e.nDims;
    for (uint32_t d = 0; same && d < e.nDims; ++d)
      same = info.dims[d] == e.dims[d];
    if (!same)
      return str("tensor '", e.name, "' has shape ",
                 shapeText(info.dims, info.nDims), ", expected ",
                 shapeText(e.dims, e.nDims));
    order.push_back(&info);
    byName.erase(it);
  }
  for (auto &[name, info] : byName)
    if (info != ropeFreqs)
      return str("unexpected tensor '", name, "' for the ",
                 *meta.text("general.architecture"), " architecture");
  const uint8_t *section = data + parsed.dataStart;
  if (ropeFreqs) {
    const uint8_t *src = section + ropeFreqs->offset;
    if (!(error = checkTensor(*ropeFreqs, src)).empty())
      return error;
    std::vector<float> factors(ropeFreqs->elements);
    dequantizeRow(formatOf(*ropeFreqs), src, factors.data(),
                  int64_t(factors.size()));
    c.n_rope_freq_factors = static_cast<int32_t>(factors.size());
    std::copy(factors.begin(), factors.end(), c.rope_freq_factors);
    std::string problem = describeConfigError(c);
    if (!problem.empty())
      return "invalid configuration: " + problem;
  }
  for (const TensorInfo *info : order)
    if (!(error = checkTensor(*info, section + info->offset)).empty())
      return error;
  if (allocationFault(KVRT_FAULT_WEIGHTS, "model weights") != KVRT_OK)
    return kvrt_last_error();

  ModelParts parts;
  const uint8_t *base = section;
  if (storage) {
    parts.storage = std::move(storage);
  } else {
    // The caller's buffer may go away: the data section is copied, at an
    // address as aligned as any tensor of the file needs (64 bytes).
    uint64_t bytes = uint64_t(parsed.dataBytes);
    auto *copy = static_cast<uint8_t *>(allocateStreamed(size_t(bytes)));
    if (!copy)
      throw std::bad_alloc();
    std::memcpy(copy, section, size_t(bytes));
    parts.storage = std::shared_ptr<const void>(copy, std::free);
    base = copy;
  }
  // Where each slice's converted floats go: sized first, so that the
  // pointers into `owned` stay valid.
  auto converted = [](const TensorInfo &info, const TensorDecl &decl,
                      const uint8_t *at) {
    kvrt_weight_format format = formatOf(info);
    bool vector =
        decl.kind == TensorKind::Norm || decl.kind == TensorKind::Bias;
    return (vector && format != KVRT_WEIGHT_F32) ||
           (format == KVRT_WEIGHT_F32 &&
            reinterpret_cast<uintptr_t>(at) % alignof(float) != 0);
  };
  size_t ownedFloats = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (converted(*order[i], *expected[i].decl, base + order[i]->offset))
      ownedFloats += size_t(order[i]->elements);
  parts.owned.resize(ownedFloats);
  float *next = parts.owned.data();
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorInfo &info = *order[i];
    const uint8_t *at = base + info.offset;
    kvrt_weight_format format = formatOf(info);
    kvrt_weight_slice slice{at, format, int64_t(info.bytes)};
    if (converted(info, *expected[i].decl, at)) {
      dequantizeRow(format, at, next, int64_t(info.elements));
      slice = {next, KVRT_WEIGHT_F32, int64_t(info.elements * sizeof(float))};
      next += info.elements;
    }
    parts.slices[static_cast<size_t>(expected[i].decl->id)].push_back(slice);
  }
  *out = makeModel(c, std::move(parts));
  return "";
}

//===----------------------------------------------------------------------===//
// The tokenizer
//===----------------------------------------------------------------------===//

/// Sets the add_bos / add_eos defaults of a read tokenizer from the file's
/// keys, where it has them.
std::string readAddFlags(const Metadata &meta, kvrt_tokenizer *tokenizer) {
  std::optional<bool> addBos = meta.flag("tokenizer.ggml.add_bos_token");
  std::optional<bool> addEos = meta.flag("tokenizer.ggml.add_eos_token");
  if (!meta.error().empty())
    return meta.error();
  if (addBos)
    tokenizer->impl->addBos = *addBos;
  if (addEos)
    tokenizer->impl->addEos = *addEos;
  return "";
}

/// The tokenizer.ggml.tokens array, checked against the model's vocabulary
/// (-1: none).
std::string tokenArray(const Metadata &meta, int32_t modelVocab,
                       const Value *&tokens) {
  tokens = meta.array("tokenizer.ggml.tokens", kString, /*required=*/true);
  if (!tokens)
    return meta.error();
  if (tokens->count == 0 || tokens->count > KVRT_TOKENIZER_MAX_VOCAB)
    return str("tokenizer.ggml.tokens has ", tokens->count, " tokens (1 to ",
               KVRT_TOKENIZER_MAX_VOCAB, " are allowed)");
  if (modelVocab >= 0 && tokens->count != uint64_t(modelVocab))
    return str("tokenizer.ggml.tokens has ", tokens->count,
               " tokens, the model's vocabulary ", modelVocab);
  return "";
}

/// Reads the special token ids of `keys` into `ids`, which hold their
/// defaults; "" or what is wrong (an id outside the `n` tokens).
template <size_t N>
std::string readSpecialIds(const Metadata &meta, const char *const (&keys)[N],
                           int32_t (&ids)[N], int32_t n) {
  for (size_t i = 0; i < N; ++i) {
    std::optional<int32_t> id = meta.count(keys[i]);
    if (!meta.error().empty())
      return meta.error();
    if (id)
      ids[i] = *id;
    if (ids[i] >= n)
      return str("key '", keys[i], "' = ", ids[i], " is outside the ", n,
                 " tokens");
  }
  return "";
}

/// A byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) of `tokens`
/// (tokenArray): tokens as they are spelled, token types, merges, the
/// pre-tokenizer and the special ids (none by default).
std::string readByteLevelBPE(const uint8_t *data, size_t size,
                             const Metadata &meta, const Value *tokens,
                             kvrt_tokenizer **out) {
  int32_t n = static_cast<int32_t>(tokens->count);
  const Value *types =
      meta.array("tokenizer.ggml.token_type", kI32, false, tokens);
  const Value *merges = meta.array("tokenizer.ggml.merges", kString);
  if (!meta.error().empty())
    return meta.error();
  if (!merges)
    return "missing key 'tokenizer.ggml.merges' (a gpt2 tokenizer needs its "
           "merges)";
  if (merges->count > KVRT_TOKENIZER_MAX_VOCAB)
    return str("tokenizer.ggml.merges has ", merges->count, " merges (at most ",
               KVRT_TOKENIZER_MAX_VOCAB, " are allowed)");
  std::optional<std::string_view> pre = meta.text("tokenizer.ggml.pre");
  if (!meta.error().empty())
    return meta.error();
  // llama.cpp reads a gpt2 vocabulary without a pre-tokenizer name with its
  // default rules.
  std::string preName(pre ? *pre : "default");

  const char *const idKeys[4] = {
      "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
  int32_t ids[4] = {-1, -1, -1, -1};
  std::string error = readSpecialIds(meta, idKeys, ids, n);
  if (!error.empty())
    return error;

  Reader r(data, size);
  std::vector<std::string_view> tokenTexts(n);
  std::vector<const char *> tokenPointers(n);
  std::vector<size_t> tokenLengths(n);
  r.seek(tokens->elements);
  for (int32_t i = 0; i < n; ++i) {
    if (!r.string(tokenTexts[i], str("token ", i)))
      return r.error();
    tokenPointers[i] = tokenTexts[i].data();
    tokenLengths[i] = tokenTexts[i].size();
  }
  std::vector<int32_t> tokenTypes;
  if (types) {
    tokenTypes.resize(n);
    std::memcpy(tokenTypes.data(), data + types->elements, 4 * size_t(n));
  }
  int32_t nMerges = static_cast<int32_t>(merges->count);
  std::vector<const char *> mergePointers(nMerges);
  std::vector<size_t> mergeLengths(nMerges);
  r.seek(merges->elements);
  for (int32_t i = 0; i < nMerges; ++i) {
    std::string_view merge;
    if (!r.string(merge, str("merge ", i)))
      return r.error();
    mergePointers[i] = merge.data();
    mergeLengths[i] = merge.size();
  }

  kvrt_bpe_vocab vocab = {};
  vocab.tokens = tokenPointers.data();
  vocab.token_lengths = tokenLengths.data();
  vocab.token_types = types ? tokenTypes.data() : nullptr;
  vocab.n_tokens = n;
  vocab.merges = mergePointers.data();
  vocab.merge_lengths = mergeLengths.data();
  vocab.n_merges = nMerges;
  vocab.pre_tokenizer = preName.c_str();
  vocab.unk_id = ids[0];
  vocab.bos_id = ids[1];
  vocab.eos_id = ids[2];
  vocab.pad_id = ids[3];
  // llama.cpp's defaults: BOS for Llama 3's pre-tokenizer, else nothing.
  std::optional<tok::PreTokenizerSpec> spec = tok::findPreTokenizer(preName);
  vocab.add_bos =
      spec && spec->rules == tok::PreRules::Llama3 && spec->ignoreMerges;
  vocab.add_eos = 0;
  if (kvrt_tokenizer_create_bpe(&vocab, out) != KVRT_OK)
    return str("bad tokenizer: ", kvrt_last_error());
  return "";
}

/// A SentencePiece vocabulary (tokenizer.ggml.model = llama) of `tokens`
/// (tokenArray): pieces with scores and token types, llama.cpp's special ids
/// by default.
std::string readSentencePiece(const uint8_t *data, size_t size,
                              const Metadata &meta, const Value *tokens,
                              kvrt_tokenizer **out) {
  int32_t n = static_cast<int32_t>(tokens->count);
  const Value *scores =
      meta.array("tokenizer.ggml.scores", kF32, false, tokens);
  const Value *types =
      meta.array("tokenizer.ggml.token_type", kI32, false, tokens);
  if (!meta.error().empty())
    return meta.error();
  const char *const specialKeys[3] = {"tokenizer.ggml.unknown_token_id",
                                      "tokenizer.ggml.bos_token_id",
                                      "tokenizer.ggml.eos_token_id"};
  int32_t special[3] = {0, 1, 2}; // llama.cpp's SentencePiece defaults
  std::string error = readSpecialIds(meta, specialKeys, special, n);
  if (!error.empty())
    return error;

  // Pieces with U+2581 turned into ' ', as llama2.c's tokenizer.bin has them.
  Reader r(data, size);
  r.seek(tokens->elements);
  std::vector<std::string> pieces(n);
  std::vector<const char *> pointers(n);
  std::vector<size_t> lengths(n);
  std::vector<float> pieceScores(n, 0.0f);
  const std::string_view space = "\xe2\x96\x81";
  for (int32_t i = 0; i < n; ++i) {
    std::string_view raw;
    if (!r.string(raw, str("token ", i)))
      return r.error();
    std::string &piece = pieces[i];
    for (size_t at = 0; at < raw.size();) {
      if (raw.substr(at, 3) == space) {
        piece += ' ';
        at += 3;
      } else {
        piece += raw[at++];
      }
    }
    if (piece.empty())
      return str("token ", i, " is empty");
    if (scores) {
      std::memcpy(&pieceScores[i], data + scores->elements + 4 * size_t(i), 4);
      if (!std::isfinite(pieceScores[i]))
        return str("token ", i, " has a non-finite score");
    }
    if (types) {
      int32_t type;
      std::memcpy(&type, data + types->elements + 4 * size_t(i), 4);
      unsigned byte;
      char tail;
      if (type == kByte &&
          (piece.size() != 6 ||
           std::sscanf(piece.c_str(), "<0x%2X>%c", &byte, &tail) != 1))
        return str("token ", i,
                   " has the byte type but is not spelled "
                   "<0xHH>");
    }
    pointers[i] = piece.data();
    lengths[i] = piece.size();
  }
  if (kvrt_tokenizer_create(pointers.data(), lengths.data(), pieceScores.data(),
                            n, special[0], special[1], special[2],
                            out) != KVRT_OK)
    return str("bad tokenizer: ", kvrt_last_error());
  return "";
}

std::string readTokenizer(const uint8_t *data, size_t size,
                          const Parsed &parsed, int32_t modelVocab,
                          kvrt_tokenizer **out) {
  Metadata meta(parsed);
  std::optional<std::string_view> model = meta.text("tokenizer.ggml.model");
  if (!meta.error().empty())
    return meta.error();
  if (!model)
    return "";
  bool byteLevel = *model == "gpt2";
  if (!byteLevel && *model != "llama")
    return str("tokenizer model '", *model,
               "' is not supported (llama, SentencePiece BPE, and gpt2, "
               "byte-level BPE, are)");
  const Value *tokens = nullptr;
  std::string error = tokenArray(meta, modelVocab, tokens);
  if (error.empty())
    error = byteLevel ? readByteLevelBPE(data, size, meta, tokens, out)
                      : readSentencePiece(data, size, meta, tokens, out);
  if (error.empty())
    error = readAddFlags(meta, *out);
  if (!error.empty() && *out) {
    kvrt_tokenizer_release(*out);
    *out = nullptr;
  }
  return error;
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

/// A read-only mapping of a whole file: its bytes, and the handle that
/// unmaps them when the last owner (the reader, then the model) lets go.
struct Mapping {
  const uint8_t *data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

/// The bytes of the file `path` for the reader, in `out`: mapped read-only
/// (private: the page cache is shared between the processes that map the
/// file, nothing is copied) at a 2 MiB-aligned address (HugePages.h), or with
/// `read`, read into memory of their own (2 MiB pages where the kernel grants
/// them, whatever pages the file's cache is in). "" or what went wrong.
std::string openFile(const char *path, bool read, Mapping &out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return str("cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = str("cannot read the size of '", path, "': ", std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    error = str("'", path, "' is not a regular file");
  } else if (st.st_size > 0 && !read) {
    size_t size = static_cast<size_t>(st.st_size);
    void *p = mapFileStreamed(fd, size);
    if (!p) {
      error = str("cannot map '", path, "': ", std::strerror(errno));
    } else {
      out.data = static_cast<const uint8_t *>(p);
      out.size = size;
      out.owner = std::shared_ptr<const void>(
          p, [size](const void *q) { ::munmap(const_cast<void *>(q), size); });
    }
  } else if (st.st_size > 0) {
    size_t size = static_cast<size_t>(st.st_size);
    std::shared_ptr<void> bytes(allocateStreamed(size), std::free);
    size_t done = 0;
    while (bytes && done < size) {
      ssize_t got =
          ::pread(fd, static_cast<uint8_t *>(bytes.get()) + done,
                  std::min<size_t>(size - done, size_t(1) << 30), off_t(done));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        error = got < 0
                    ? str("cannot read '", path, "': ", std::strerror(errno))
                    : str("cannot read '", path, "': it ended at byte ", done,
                          " of ", size);
        break;
      }
      done += size_t(got);
    }
    if (!bytes) {
      error =
          str("cannot read '", path, "': no memory for its ", size, " bytes");
    } else if (error.empty()) {
      out.data = static_cast<const uint8_t *>(bytes.get());
      out.size = size;
      out.owner = std::move(bytes);
    }
  }
  ::close(fd);
  return error;
}

/// readBuffer, with the model's weights pointing into `storage` where it is
/// given (the bytes `data` belongs to), else into a copy.
std::string readAll(const uint8_t *data, size_t size,
                    std::shared_ptr<const void> storage, kvrt_model **model,
                    kvrt_tokenizer **tokenizer) {
  if (model)
    *model = nullptr;
  if (tokenizer)
    *tokenizer = nullptr;
  Parsed parsed;
  std::string error = parseStructure(data, size, parsed);
  if (!error.empty())
    return error;
  kvrt_model *m = nullptr;
  int32_t vocab = -1;
  if (model || tokenizer) {
    // The tokenizer is checked against the model's vocabulary: read the
    // model's config even when only the tokenizer is asked for.
    if (model) {
      error = readModel(data, parsed, std::move(storage), &m);
      if (!error.empty())
        return error;
      vocab = m->config.vocab_size;
    } else if (!parsed.tensors.empty()) {
      // (A vocabulary-only file, with no tensors, is a tokenizer alone.)
      Metadata meta(parsed);
      kvrt_model_config c;
      const TensorInfo *ropeFreqs = nullptr;
      error = readConfig(meta, parsed, c, ropeFreqs);
      if (!error.empty())
        return error;
      vocab = c.vocab_size;
    }
  }
  kvrt_tokenizer *t = nullptr;
  error = readTokenizer(data, size, parsed, vocab, &t);
  if (!error.empty()) {
    kvrt_model_release(m);
    return error;
  }
  if (model)
    *model = m;
  else
    kvrt_model_release(m);
  if (tokenizer)
    *tokenizer = t;
  else
    kvrt_tokenizer_release(t);
  return "";
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

std::string kvrt::gguf::architectureNames() {
  std::string names;
  size_t n = std::size(kArchitectures);
  for (size_t i = 0; i < n; ++i)
    names += std::string(i == 0       ? ""
                         : i + 1 == n ? " and "
                                      : ", ") +
             kArchitectures[i].name;
  return names;
}

bool kvrt::gguf::hasMagic(const void *data, size_t size) {
  uint32_t magic;
  if (size < 4)
    return false;
  std::memcpy(&magic, data, 4);
  return magic == kMagic;
}

bool kvrt::gguf::fileHasMagic(const char *path) {
  // Only a regular file is peeked at: opening and reading a FIFO would block
  // (and consume what the real loader must read, and refuse).
  int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st;
  uint8_t head[4];
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            ::pread(fd, head, 4, 0) == 4 && hasMagic(head, 4);
  ::close(fd);
  return ok;
}

std::string kvrt::gguf::readBuffer(const uint8_t *data, size_t size,
                                   kvrt_model **model,
                                   kvrt_tokenizer **tokenizer) {
  return readAll(data, size, nullptr, model, tokenizer);
}

std::string kvrt::gguf::readFile(const char *path, kvrt_model **model,
                                 kvrt_tokenizer **tokenizer, bool read) {
  Mapping mapping;
  std::string error = openFile(path, read, mapping);
  if (error.empty())
    error =
        readAll(mapping.data, mapping.size, mapping.owner, model, tokenizer);
  if (error.empty() && model && *model && !read) {
    (*model)->mappedBegin = mapping.data;
    (*model)->mappedBytes = mapping.size;
  }
  if (!error.empty() && error.find(path) == std::string::npos)
    error = str("bad GGUF file '", path, "': ", error);
  return error;
}

extern "C" kvrt_status
kvrt_model_load_gguf_buffer(const void *data, size_t size, kvrt_model **out) {
  if ((!data && size) || !out)
    return nullArgument(__func__);
  *out = nullptr;
  return guard([&] {
    std::string error =
        readBuffer(static_cast<const uint8_t *>(data), size, out, nullptr);
    if (!error.empty())
      return fail(KVRT_ERR_BAD_MODEL, "bad GGUF model: " + error);
    return KVRT_OK;
  });
}
