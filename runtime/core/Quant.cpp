//===- Quant.cpp - The bytes of every weight format -------------*- C++ -*-===//

#include "runtime/core/Quant.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

using namespace kvrt;

namespace {

/// The f16 at `p` (little-endian, any alignment), as f32.
float loadHalf(const uint8_t *p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return halfToFloat(bits);
}

void storeHalf(uint8_t *p, float value) {
  // A scale past f16's range is stored as its largest finite value: a
  // stored infinity would make the block unreadable.
  uint16_t bits = floatToHalf(std::clamp(value, -65504.0f, 65504.0f));
  std::memcpy(p, &bits, 2);
}

//===----------------------------------------------------------------------===//
// Dequantisation: one block of each format (WeightFormat.h)
//===----------------------------------------------------------------------===//

void dequantizeQ8_0(const uint8_t *b, float *y) {
  float d = loadHalf(b);
  for (int j = 0; j < 32; ++j)
    y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequantizeQ4_0(const uint8_t *b, float *y) {
  float d = loadHalf(b);
  const uint8_t *qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

/// Q4_K (qh null) and Q5_K.
void dequantizeK4K5(const uint8_t *b, const uint8_t *qh, const uint8_t *qs,
                    float *y) {
  float d = loadHalf(b), dmin = loadHalf(b + 2);
  const uint8_t *scales = b + 4;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    scaleMinK4(s, scales, sc, m);
    float d1 = d * static_cast<float>(sc);
    float m1 = dmin * static_cast<float>(m);
    const uint8_t *q = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      int v = s % 2 ? q[l] >> 4 : q[l] & 0xF;
      if (qh && (qh[l] >> s) & 1)
        v += 16;
      y[32 * s + l] = d1 * static_cast<float>(v) - m1;
    }
  }
}

/// Q6_K's q of element j (0..255) of a block, 0..63.
int q6Of(const uint8_t *b, int j) {
  int half = j / 128, r = j % 128, g = r / 32, l = r % 32;
  const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
  int low = (g % 2 ? ql[l + 32] : ql[l]);
  low = g < 2 ? low & 0xF : low >> 4;
  return low | (((qh[l] >> (2 * g)) & 3) << 4);
}

void dequantizeQ6_K(const uint8_t *b, float *y) {
  float d = loadHalf(b + 208);
  const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192);
  for (int j = 0; j < 256; ++j)
    y[j] = d * static_cast<float>(scales[j / 16]) *
           static_cast<float>(q6Of(b, j) - 32);
}

//===----------------------------------------------------------------------===//
// Quantisation
//===----------------------------------------------------------------------===//

/// Round to nearest, ties away from zero, clamped to [lo, hi]: what
/// clamping std::lround(x * inverse) gives (NaN: lo, as x86's lround gives
/// LONG_MIN), without a call or a branch. The quantisers' searches call it
/// ~100 times per weight: the libm call and the mispredicted branches on
/// which way to round took most of kv-convert's time.
int quantizeOne(float x, float inverse, int lo, int hi) {
  float v = x * inverse;
  v = v >= static_cast<float>(lo) ? v : static_cast<float>(lo);
  v = v <= static_cast<float>(hi) ? v : static_cast<float>(hi);
  // lo <= v <= hi: v - trunc(v) is exact, and rounding stays in [lo, hi].
  int q = static_cast<int>(v);
  float fraction = v - static_cast<float>(q);
  return q + int(fraction >= 0.5f) - int(fraction <= -0.5f);
}

/// The most starting points a fit refits from (fitAffine's 21).
constexpr int kMaxStarts = 21;

// The refits below run every starting point's search in lockstep, element
// by element: one search's sums are chains of dependent additions, and the
// searches are independent, so side by side they overlap (kv-convert spent
// its time waiting on those chains). Each search still adds in element
// order, so its sums, its choices and the bytes written are what it gives
// alone.

/// Assign-and-refit rounds for x ≈ a * q - b, q in [lo, hi], from each of
/// the `starts` pairs (a[c], b[c]): each q nearest, then a least squares for
/// those q; the pair becomes the best seen from start c, `error[c]` its
/// squared error. `Affine`: a and b fitted (b >= 0); else b is null and
/// x ≈ a * q.
template <bool Affine>
void refit(const float *x, int n, int lo, int hi, int starts, float *a,
           float *b, double *error) {
  float bestA[kMaxStarts], bestB[kMaxStarts] = {};
  bool active[kMaxStarts];
  for (int c = 0; c < starts; ++c) {
    bestA[c] = a[c];
    if constexpr (Affine)
      bestB[c] = b[c];
    error[c] = INFINITY;
    active[c] = !Affine || a[c] > 0;
  }
  for (int round = 0; round < 4; ++round) {
    float inverse[kMaxStarts];
    double sqx[kMaxStarts] = {}, sum[kMaxStarts] = {};
    int64_t sq[kMaxStarts] = {}, sqq[kMaxStarts] = {};
    double sx = 0;
    for (int c = 0; c < starts; ++c)
      inverse[c] = 1.0f / a[c];
    for (int i = 0; i < n; ++i) {
      sx += x[i];
      for (int c = 0; c < starts; ++c) {
        int q;
        double e;
        if constexpr (Affine) {
          q = quantizeOne(x[i] + b[c], inverse[c], lo, hi);
          e = double(a[c]) * q - b[c] - x[i];
          sq[c] += q;
        } else {
          q = quantizeOne(x[i], inverse[c], lo, hi);
          e = double(a[c]) * q - x[i];
        }
        sum[c] += e * e;
        sqq[c] += q * q;
        sqx[c] += double(q) * x[i];
      }
    }
    bool any = false;
    for (int c = 0; c < starts; ++c) {
      if (!active[c])
        continue;
      if (sum[c] < error[c]) {
        error[c] = sum[c];
        bestA[c] = a[c];
        bestB[c] = Affine ? b[c] : 0;
      }
      double sqc = double(sq[c]), sqqc = double(sqq[c]);
      if constexpr (Affine) {
        double det = sqqc * n - sqc * sqc;
        double na = det > 0 ? (n * sqx[c] - sqc * sx) / det : 0;
        double nb = det > 0 ? (sqc * sqx[c] - sqqc * sx) / det : 0;
        if (nb < 0) {
          nb = 0;
          na = sqx[c] / sqqc;
        }
        active[c] = det > 0 && na > 0;
        if (active[c]) {
          a[c] = static_cast<float>(na);
          b[c] = static_cast<float>(nb);
        }
      } else {
        float next = sqqc != 0 ? static_cast<float>(sqx[c] / sqqc) : 0;
        active[c] = next != 0 && next != a[c];
        if (active[c])
          a[c] = next;
      }
      any = any || active[c];
    }
    if (!any)
      break;
  }
  for (int c = 0; c < starts; ++c) {
    a[c] = bestA[c];
    if constexpr (Affine)
      b[c] = bestB[c];
  }
}

/// x ≈ a * q with q in [lo, hi]: refits (refit) from the largest
/// magnitude mapped to lo + t (the longer side of the range), t from -0.5 to
/// 1 by 0.1, keeping the best. Returns a (0 for an all-zero block).
float fitSymmetric(const float *x, int n, int lo, int hi) {
  float extreme = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(extreme))
      extreme = x[i];
  if (extreme == 0)
    return 0;
  constexpr int starts = 16;
  float a[starts];
  double error[starts];
  for (int t = -5; t <= 10; ++t)
    a[t + 5] = extreme / (static_cast<float>(lo) + 0.1f * float(t));
  refit<false>(x, n, lo, hi, starts, a, nullptr, error);
  float best = extreme / static_cast<float>(lo);
  double bestError = INFINITY;
  for (int c = 0; c < starts; ++c)
    if (error[c] < bestError) {
      bestError = error[c];
      best = a[c];
    }
  return best;
}

/// x ≈ a * q - b with q in [0, hi], a >= 0, b >= 0 (the offset of a
/// K-quant's sub-block is a subtracted min): refits (refit) from the
/// range of the values (a minimum above 0 taken as 0) spread over hi + t
/// steps, t from -1 to 1 by 0.1 (a slightly wider or narrower grid often
/// rounds better), keeping the best.
void fitAffine(const float *x, int n, int hi, float &a, float &b) {
  float lo = 0, top = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    top = std::max(top, x[i]);
  }
  a = (top - lo) / static_cast<float>(hi);
  b = -lo;
  if (a == 0)
    return;
  constexpr int starts = 21;
  static_assert(starts <= kMaxStarts);
  float ta[starts], tb[starts];
  double error[starts];
  for (int t = -10; t <= 10; ++t) {
    ta[t + 10] = (top - lo) / (static_cast<float>(hi) + 0.1f * float(t));
    tb[t + 10] = -lo;
  }
  refit<true>(x, n, 0, hi, starts, ta, tb, error);
  double bestError = INFINITY;
  for (int c = 0; c < starts; ++c)
    if (error[c] < bestError) {
      bestError = error[c];
      a = ta[c];
      b = tb[c];
    }
}

void quantizeQ4_0(const float *x, uint8_t *out) {
  float a = fitSymmetric(x, 32, -8, 7);
  storeHalf(out, a);
  float d = loadHalf(out);
  float inverse = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j) {
    int lo = quantizeOne(x[j], inverse, -8, 7) + 8;
    int hi = quantizeOne(x[j + 16], inverse, -8, 7) + 8;
    out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

/// Quantises `scale` (>= 0) against `unit`: round(scale / unit) in [0, top].
int quantizeScale(float scale, float unit, int top) {
  return unit > 0 ? quantizeOne(scale, 1.0f / unit, 0, top) : 0;
}

/// Q4_K (`bits` 4) and Q5_K (5).
void quantizeK4K5(const float *x, uint8_t *out, int bits) {
  int hi = (1 << bits) - 1;
  float a[8], b[8], maxA = 0, maxB = 0;
  for (int s = 0; s < 8; ++s) {
    fitAffine(x + 32 * s, 32, hi, a[s], b[s]);
    maxA = std::max(maxA, a[s]);
    maxB = std::max(maxB, b[s]);
  }
  storeHalf(out, maxA / 63);
  storeHalf(out + 2, maxB / 63);
  float d = loadHalf(out), dmin = loadHalf(out + 2);
  uint8_t *scales = out + 4;
  std::memset(scales, 0, 12);
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = static_cast<uint8_t>(quantizeScale(a[s], d, 63));
    mn[s] = static_cast<uint8_t>(quantizeScale(b[s], dmin, 63));
    // The packing scaleMinK4 reads (WeightFormat.h).
    if (s < 4) {
      scales[s] |= sc[s];
      scales[s + 4] |= mn[s];
    } else {
      scales[s + 4] =
          static_cast<uint8_t>((sc[s] & 0xF) | ((mn[s] & 0xF) << 4));
      scales[s - 4] |= static_cast<uint8_t>((sc[s] >> 4) << 6);
      scales[s] |= static_cast<uint8_t>((mn[s] >> 4) << 6);
    }
  }
  uint8_t *qh = bits == 5 ? out + 16 : nullptr;
  uint8_t *qs = out + (bits == 5 ? 48 : 16);
  if (qh)
    std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    // The scale and min as dequantisation computes them.
    float d1 = d * static_cast<float>(sc[s]);
    float m1 = dmin * static_cast<float>(mn[s]);
    float inverse = d1 != 0 ? 1.0f / d1 : 0.0f;
    for (int l = 0; l < 32; ++l) {
      int q = quantizeOne(x[32 * s + l] + m1, inverse, 0, hi);
      uint8_t &byte = qs[32 * (s / 2) + l];
      byte |= static_cast<uint8_t>((q & 0xF) << (s % 2 ? 4 : 0));
      if (qh && q > 15)
        qh[l] |= static_cast<uint8_t>(1 << s);
    }
  }
}

void quantizeQ6_K(const float *x, uint8_t *out) {
  float a[16], maxA = 0;
  for (int s = 0; s < 16; ++s) {
    a[s] = fitSymmetric(x + 16 * s, 16, -32, 31);
    maxA = std::max(maxA, std::fabs(a[s]));
  }
  storeHalf(out + 208, maxA / 127);
  float d = loadHalf(out + 208);
  int8_t *scales = reinterpret_cast<int8_t *>(out + 192);
  int q[256];
  for (int s = 0; s < 16; ++s) {
    int sc = d > 0 ? quantizeOne(a[s], 1.0f / d, -128, 127) : 0;
    scales[s] = static_cast<int8_t>(sc);
    float scale = d * static_cast<float>(sc);
    float inverse = scale != 0 ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 16; ++l)
      q[16 * s + l] = quantizeOne(x[16 * s + l], inverse, -32, 31) + 32;
  }
  // The packing q6Of reads: per half of 128, quarter g of 32 in ql (low 4
  // bits: g 0 and 2 share bytes 0..31, g 1 and 3 bytes 32..63) and qh (2
  // bits at 2g).
  std::memset(out, 0, 192);
  for (int half = 0; half < 2; ++half) {
    uint8_t *ql = out + 64 * half, *qh = out + 128 + 32 * half;
    for (int l = 0; l < 32; ++l) {
      const int *v = q + 128 * half + l;
      ql[l] = static_cast<uint8_t>((v[0] & 0xF) | ((v[64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((v[32] & 0xF) | ((v[96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((v[0] >> 4) | ((v[32] >> 4) << 2) |
                                   ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Rows
//===----------------------------------------------------------------------===//

void kvrt::dequantizeRow(kvrt_weight_format format, const void *src, float *dst,
                         int64_t cols) {
  const auto *p = static_cast<const uint8_t *>(src);
  BlockLayout block = blockLayout(format);
  int64_t blocks = cols / block.elements;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t *b = p + i * block.bytes;
    float *y = dst + i * block.elements;
    switch (format) {
    case KVRT_WEIGHT_F32:
      std::memcpy(y, b, 4);
      break;
    case KVRT_WEIGHT_F16:
      *y = loadHalf(b);
      break;
    case KVRT_WEIGHT_BF16: {
      uint16_t bits;
      std::memcpy(&bits, b, 2);
      *y = bfloatToFloat(bits);
      break;
    }
    case KVRT_WEIGHT_Q8_0:
      dequantizeQ8_0(b, y);
      break;
    case KVRT_WEIGHT_Q4_0:
      dequantizeQ4_0(b, y);
      break;
    case KVRT_WEIGHT_Q4_K:
      dequantizeK4K5(b, nullptr, b + 16, y);
      break;
    case KVRT_WEIGHT_Q5_K:
      dequantizeK4K5(b, b + 16, b + 48, y);
      break;
    case KVRT_WEIGHT_Q6_K:
      dequantizeQ6_K(b, y);
      break;
    }
  }
}

namespace {

/// Whether no element of `elements` f32, f16 or bf16 values at `p` has its
/// exponent bits all ones (inf or NaN), read as integers: memcpy'd words,
/// OR-reduced per chunk so that the loop has no early exit.
template <typename Word>
bool exponentsFinite(const uint8_t *p, int64_t elements, Word exponent) {
  constexpr int64_t kChunk = 4096;
  for (int64_t begin = 0; begin < elements; begin += kChunk) {
    int64_t end = std::min(elements, begin + kChunk);
    Word bad = 0;
    for (int64_t i = begin; i < end; ++i) {
      Word w;
      std::memcpy(&w, p + i * int64_t(sizeof(Word)), sizeof(Word));
      bad |= Word((w & exponent) == exponent);
    }
    if (bad)
      return false;
  }
  return true;
}

bool allExponentsFinite(kvrt_weight_format format, const uint8_t *p,
                        int64_t elements) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return exponentsFinite<uint32_t>(p, elements, 0x7F800000u);
  case KVRT_WEIGHT_F16:
    return exponentsFinite<uint16_t>(p, elements, 0x7C00u);
  case KVRT_WEIGHT_BF16:
    return exponentsFinite<uint16_t>(p, elements, 0x7F80u);
  default:
    return false;
  }
}

} // namespace

std::string kvrt::checkWeightData(kvrt_weight_format format, const void *src,
                                  int64_t elements) {
  const auto *p = static_cast<const uint8_t *>(src);
  BlockLayout block = blockLayout(format);
  if (!isBlockFormat(format)) {
    // Every element is read at load: first a scan of the exponent bits that
    // the compiler vectorises (a 2 GB F16 file took seconds through
    // dequantizeRow one element at a time), then, only if it finds an
    // element that is not finite, the exact element and value below.
    if (allExponentsFinite(format, p, elements))
      return "";
    for (int64_t i = 0; i < elements; ++i) {
      float v;
      dequantizeRow(format, p + i * block.bytes, &v, 1);
      if (!std::isfinite(v))
        return str("element ", i, " is ", v, " (weights must be finite)");
    }
    return "";
  }
  // The f16 scales of each block: where they are and what they are called.
  struct Scale {
    int64_t at;
    const char *what;
  };
  Scale scales[2] = {{0, "scale"}, {-1, ""}};
  switch (format) {
  case KVRT_WEIGHT_Q4_K:
  case KVRT_WEIGHT_Q5_K:
    scales[1] = {2, "min scale"};
    break;
  case KVRT_WEIGHT_Q6_K:
    scales[0] = {208, "scale"};
    break;
  case KVRT_WEIGHT_F32:
  case KVRT_WEIGHT_F16:
  case KVRT_WEIGHT_BF16:
  case KVRT_WEIGHT_Q8_0:
  case KVRT_WEIGHT_Q4_0:
    break;
  }
  for (int64_t i = 0; i < elements / block.elements; ++i)
    for (const Scale &s : scales) {
      if (s.at < 0)
        continue;
      float v = loadHalf(p + i * block.bytes + s.at);
      if (!std::isfinite(v))
        return str(ggmlTypeName(ggmlTypeOf(format)), " block ", i,
                   " has a non-finite ", s.what, " (", v, ")");
    }
  return "";
}

void kvrt::quantizeRow(kvrt_weight_format format, const float *src, void *dst,
                       int64_t cols) {
  auto *p = static_cast<uint8_t *>(dst);
  BlockLayout block = blockLayout(format);
  for (int64_t i = 0; i < cols / block.elements; ++i) {
    const float *x = src + i * block.elements;
    uint8_t *b = p + i * block.bytes;
    switch (format) {
    case KVRT_WEIGHT_F32:
      std::memcpy(b, x, 4);
      break;
    case KVRT_WEIGHT_F16:
      storeHalf(b, *x);
      break;
    case KVRT_WEIGHT_BF16: {
      uint16_t bits = floatToBFloat(*x);
      std::memcpy(b, &bits, 2);
      break;
    }
    case KVRT_WEIGHT_Q8_0: {
      // llama.cpp's quantize_row_q8_0: scale max|x| / 127 rounded to f16,
      // q = round(x / scale).
      float amax = 0;
      for (int j = 0; j < 32; ++j)
        amax = std::max(amax, std::fabs(x[j]));
      float d = amax / 127.0f;
      float inverse = d != 0.0f ? 1.0f / d : 0.0f;
      storeHalf(b, d);
      for (int j = 0; j < 32; ++j)
        b[2 + j] = static_cast<uint8_t>(
            static_cast<int8_t>(quantizeOne(x[j], inverse, -127, 127)));
      break;
    }
    case KVRT_WEIGHT_Q4_0:
      quantizeQ4_0(x, b);
      break;
    case KVRT_WEIGHT_Q4_K:
      quantizeK4K5(x, b, 4);
      break;
    case KVRT_WEIGHT_Q5_K:
      quantizeK4K5(x, b, 5);
      break;
    case KVRT_WEIGHT_Q6_K:
      quantizeQ6_K(x, b);
      break;
    }
  }
}

int64_t kvrt::q8Rows16Bytes(int64_t rows, int64_t cols) {
  int64_t groups = (rows + kQ8Rows16 - 1) / kQ8Rows16;
  return groups * kQ8Rows16 * weightRowBytes(KVRT_WEIGHT_Q8_0, cols);
}

void kvrt::repackQ8Rows16(const void *src, int64_t rows, int64_t cols,
                          void *dst, int64_t groupBegin, int64_t groupEnd) {
  constexpr int64_t kBlockBytes = 34;
  constexpr int64_t kGroupBlockBytes = kQ8Rows16 * kBlockBytes;
  int64_t blocks = cols / 32;
  int64_t rowBytes = blocks * kBlockBytes;
  const auto *from = static_cast<const uint8_t *>(src);
  auto *to = static_cast<uint8_t *>(dst) + groupBegin * kQ8Rows16 * rowBytes;
  for (int64_t g = groupBegin; g < groupEnd; ++g)
    for (int64_t b = 0; b < blocks; ++b, to += kGroupBlockBytes) {
      for (int64_t r = 0; r < kQ8Rows16; ++r) {
        int64_t row = g * kQ8Rows16 + r;
        if (row >= rows) {
          std::memset(to + 2 * r, 0, 2);
          for (int64_t i = 0; i < 32; i += 4)
            std::memset(to + 32 + 16 * i + 4 * r, 0x80, 4);
          continue;
        }
        const uint8_t *block = from + row * rowBytes + b * kBlockBytes;
        std::memcpy(to + 2 * r, block, 2);
        // Four quants at a time, each + 128.
        for (int64_t i = 0; i < 32; i += 4) {
          uint32_t four;
          std::memcpy(&four, block + 2 + i, 4);
          four ^= 0x80808080u;
          std::memcpy(to + 32 + 16 * i + 4 * r, &four, 4);
        }
      }
    }
}

int64_t kvrt::q4kRows16Bytes(int64_t rows, int64_t cols) {
  int64_t groups = (rows + kQ8Rows16 - 1) / kQ8Rows16;
  return groups * (cols / 256) * kQ4KRows16BlockBytes;
}

void kvrt::repackQ4KRows16(const void *src, int64_t rows, int64_t cols,
                           void *dst, int64_t groupBegin, int64_t groupEnd) {
  constexpr int64_t kBlockBytes = 144;
  int64_t blocks = cols / 256;
  int64_t rowBytes = blocks * kBlockBytes;
  const auto *from = static_cast<const uint8_t *>(src);
  auto *to =
      static_cast<uint8_t *>(dst) + groupBegin * blocks * kQ4KRows16BlockBytes;
  for (int64_t g = groupBegin; g < groupEnd; ++g)
    for (int64_t b = 0; b < blocks; ++b, to += kQ4KRows16BlockBytes) {
      // Rows past the last: all zero (d, dmin, scales, mins and quants).
      std::memset(to, 0, kQ4KRows16BlockBytes);
      for (int64_t r = 0; r < kQ8Rows16; ++r) {
        int64_t row = g * kQ8Rows16 + r;
        if (row >= rows)
          break;
        const uint8_t *block = from + row * rowBytes + b * kBlockBytes;
        std::memcpy(to + 2 * r, block, 2);
        std::memcpy(to + 32 + 2 * r, block + 2, 2);
        for (int s = 0; s < 8; ++s) {
          uint8_t scale, min;
          scaleMinK4(s, block + 4, scale, min);
          to[64 + 16 * s + r] = scale;
          to[192 + 32 * (s / 2) + 2 * r + s % 2] = min;
          // Sub-block s: the low (even s) or high nibbles of qs[32 (s / 2)
          // ..]; four elements 4i .. and four 4i + 16 .. in one word each.
          const uint8_t *qs = block + 16 + 32 * (s / 2);
          int shift = 4 * (s % 2);
          for (int i = 0; i < 4; ++i) {
            uint32_t low, high;
            std::memcpy(&low, qs + 4 * i, 4);
            std::memcpy(&high, qs + 16 + 4 * i, 4);
            uint32_t four = ((low >> shift) & 0x0F0F0F0Fu) |
                            (((high >> shift) & 0x0F0F0F0Fu) << 4);
            std::memcpy(to + 320 + 256 * s + 64 * i + 4 * r, &four, 4);
          }
        }
      }
    }
}

int64_t kvrt::decodeRowsBytes(kvrt_weight_format format, int64_t rows,
                              int64_t cols) {
  assert(decodeGroupBlockBytes(format) > 0 && "no layout for decode");
  return format == KVRT_WEIGHT_Q4_K ? q4kRows16Bytes(rows, cols)
                                    : q8Rows16Bytes(rows, cols);
}

void kvrt::repackDecodeRows(kvrt_weight_format format, const void *src,
                            int64_t rows, int64_t cols, void *dst,
                            int64_t groupBegin, int64_t groupEnd) {
  assert(decodeGroupBlockBytes(format) > 0 && "no layout for decode");
  if (format == KVRT_WEIGHT_Q4_K)
    repackQ4KRows16(src, rows, cols, dst, groupBegin, groupEnd);
  else
    repackQ8Rows16(src, rows, cols, dst, groupBegin, groupEnd);
}
