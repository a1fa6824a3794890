//===- WeightFormat.h - Weight formats and what a forward reads -*- C++ -*-===//
//
// The formats of kvrt_weight_format (KVRuntime.h): their block layouts, names
// and ggml type ids, and WeightFormats, the format of every slice of every
// tensor the generated forward reads: what a forward is specialised for,
// beside the model's configuration (ModelConfig.h's forwardKey). Plain C++,
// shared by the compiler and the runtime (KVConfig). The bytes of the block
// formats are read and written by Quant.h (KVRuntime).
//
// Block layouts (ggml's, ggml-common.h; little-endian, f16 scales):
//
//   format  elements bytes  layout of one block
//   Q8_0      32      34    d f16 | q[32] int8                  d * q
//   Q4_0      32      18    d f16 | qs[16]                      d * (q - 8)
//   Q4_K     256     144    d, dmin f16 | scales[12] | qs[128]
//   Q5_K     256     176    d, dmin f16 | scales[12] | qh[32] | qs[128]
//   Q6_K     256     210    ql[128] | qh[64] | scales[16] int8 | d f16
//
// Q4_0: q of element j < 16 is the low nibble of qs[j], of j >= 16 the high
// nibble of qs[j - 16]. Q4_K and Q5_K: eight sub-blocks of 32, sub-block s
// with a 6-bit scale sc and min m (scaleMinK4 below), element 32s + l =
// (d * sc) * q - (dmin * m); q is the low nibble of qs[32(s/2) + l] for even
// s, the high one for odd s, plus (Q5_K) 16 where bit s of qh[l] is set.
// Q6_K: sixteen sub-blocks of 16, element j = (d * scales[j / 16]) * (q -
// 32), q's low 4 bits in ql, high 2 in qh (Quant.cpp spells out where).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_WEIGHTFORMAT_H
#define KVIR_RUNTIME_CORE_WEIGHTFORMAT_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelTensors.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvrt {

/// A format's block: `elements` consecutive elements of a row in `bytes`
/// bytes (one element for f32, f16, bf16).
struct BlockLayout {
  int64_t elements;
  int64_t bytes;
};
BlockLayout blockLayout(kvrt_weight_format format);

/// Whether `format` is one of ggml's block formats (not f32, f16, bf16).
bool isBlockFormat(kvrt_weight_format format);

/// The lower-case name of a format ("f32", "q4_k"): options, keys, messages.
const char *weightFormatName(kvrt_weight_format format);
/// A format by its name (either case), or nullopt.
std::optional<kvrt_weight_format> parseWeightFormat(std::string_view name);
/// A format as an integer a caller of the C ABI passed, or nullopt.
std::optional<kvrt_weight_format> weightFormatOf(int64_t value);

/// The ggml tensor type id of a format (GGUF tensor infos), and the format
/// of a ggml type id (nullopt for the types KVIR does not read).
uint32_t ggmlTypeOf(kvrt_weight_format format);
std::optional<kvrt_weight_format> formatOfGgmlType(uint32_t type);
/// The name ggml gives a type id ("Q4_K"), "" past the known ones.
const char *ggmlTypeName(uint32_t type);

/// Q8_0 rows repacked for a decode step's integer dots (docs/cpu-backend.md,
/// "A layout for decode"): rows in groups of kQ8Rows16, and per group and
/// block of 32 the group's kQ8Rows16 f16 scales (32 bytes), then its quants
/// 4 a row at a time (at 32 + 64 (i / 4) + 4 r + i % 4 for quant i of row
/// r), stored + 128 (xor 0x80). One 64-byte load then holds 4 quants of each
/// of 16 rows, so a dot against the token's 4 quants broadcast sums each row
/// in its own lane. A group's blocks follow each other; a row past the last
/// (the last group filled up) has zero scales and quants.
///
/// Q4_K rows repacked for decode, in the same groups: per group and block of
/// 256 (kQ4KRows16BlockBytes), the 16 rows' f16 d (bytes 0 .. 31) and dmin
/// (32 .. 63); the 6-bit scales decoded to bytes, sub-block s of row r at 64
/// + 16 s + r; the mins decoded, two sub-blocks side by side, at 192 + 32 (s
/// / 2) + 2 r + s % 2; then the quants, sub-block s of 32 at 320 + 256 s, 4
/// of each row at a time as Q8_0's: at 64 i + 4 r + l the low nibble holds
/// element 4 i + l of the sub-block, the high nibble element 4 i + 16 + l. A
/// 64-byte load masked by 0x0F then holds 4 quants of each of 16 rows, as
/// does the same load masked by 0xF0 (times 16); the mins pair with the
/// token's sums of two sub-blocks in one word dot. 2368 bytes where the
/// file holds 16 x 144 = 2304 (the scales a byte each). The prefill's panels
/// of 16 outputs hold the same quants in the same order.
constexpr int64_t kQ8Rows16 = 16;
constexpr int64_t kQ4KRows16BlockBytes = 64 + 128 + 128 + 2048;

/// Whether the CPU's decode steps read rows of `format` repacked (the
/// layouts above: Q8_0 and Q4_K), and bytes of a group of kQ8Rows16 rows'
/// block there (0 for other formats).
inline int64_t decodeGroupBlockBytes(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_Q8_0:
    return kQ8Rows16 * 34;
  case KVRT_WEIGHT_Q4_K:
    return kQ4KRows16BlockBytes;
  default:
    return 0;
  }
}

/// Bytes of a row of `cols` elements in `format`, or -1 when the row is not
/// whole blocks.
int64_t weightRowBytes(kvrt_weight_format format, int64_t cols);

/// The 6-bit scale and min of sub-block `j` (0..7) of a Q4_K or Q5_K block
/// from its 12 scale bytes: j < 4 in the low 6 bits of bytes j and j + 4;
/// j >= 4 in the nibbles of byte j + 4 with the top 2 bits of bytes j - 4
/// (scale) and j (min).
inline void scaleMinK4(int j, const uint8_t *q, uint8_t &scale, uint8_t &min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

} // namespace kvrt

namespace kvir {

/// The format of every slice of every tensor the generated forward reads
/// (ModelTensors.def, reader Forward): what a forward is specialised for.
/// Default-constructed, every weight is f32. A per-layer tensor may have a
/// format per layer (llama.cpp's Q4_K_M keeps some layers of attn_v and
/// ffn_down in Q6_K). Norm vectors are always f32 in memory (the runtime
/// converts the few a file stores otherwise), so only matrices differ.
class WeightFormats {
public:
  WeightFormats() = default;

  /// The formats of a model's weights (`layers` = its n_layers).
  static WeightFormats of(const kvrt_model_weights &weights, int32_t layers);

  /// The format of slice `layer` of tensor `id` (layer 0 for a global one).
  kvrt_weight_format at(kvrt::TensorId id, int64_t layer) const;
  /// Sets it; the first call for a tensor sizes it for `layers` slices.
  void set(kvrt::TensorId id, int64_t layer, int64_t layers,
           kvrt_weight_format format);

  /// Whether every weight the forward reads is f32.
  bool allF32() const;

  /// The canonical spelling: "" when all are f32, else `field:fmt` for each
  /// tensor not all f32, `;`-separated, a per-layer list where layers
  /// differ, runs written `fmt*count`: "wq:q4_k;wv:q6_k,q4_k*2,q6_k".
  std::string spec() const;
  /// The spelling of messages: "f32" when all are f32, else spec().
  std::string describe() const;
  /// Parses spec() for a model of `layers` layers (a tensor not named is
  /// f32; "f32" alone is all f32); nullopt with `error` otherwise.
  static std::optional<WeightFormats> parse(std::string_view spec,
                                            int32_t layers, std::string &error);

  /// The formats that occur, in enum order.
  std::vector<kvrt_weight_format> used() const;

  bool operator==(const WeightFormats &other) const {
    return spec() == other.spec();
  }
  bool operator!=(const WeightFormats &other) const {
    return !(*this == other);
  }

private:
  /// Per tensor (by TensorId): empty (all f32), or one format per slice.
  std::array<std::vector<kvrt_weight_format>, kvrt::kNumTensors> formats;
};

} // namespace kvir

#endif // KVIR_RUNTIME_CORE_WEIGHTFORMAT_H
