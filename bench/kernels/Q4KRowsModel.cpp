//===- Q4KRowsModel.cpp - A hand-written Q4_K decode tile -------*- C++ -*-===//
//
// The Q4_K rows repacked for decode (WeightFormat.h, kQ4KRows16BlockBytes)
// and the tile that reads them, written by hand: per block of 256 and
// sub-block s, each of the tile's two groups takes four 64-byte loads of
// quants, masked by 0x0F and 0xF0 and dotted (vpdpbusd) against the token's
// quants broadcast, the sub-block's sum scaled by the rows' scales (vpmulld)
// in i32; per block the mins by vpdpwssd with the token's sums of 32, and two
// FMAs. The generated tile (emitRepackedQ4KDecodeTile) holds the same
// instructions in the same order; this one asks what they read a second
// from memory when nothing else of a decode step runs between them.
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/Q4KRowsModel.h"

#include "runtime/core/HugePages.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/Quant.h"

#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kvir::bench {
namespace {

constexpr int64_t kFileBlockBytes = 144, kTileGroups = 2;
constexpr int64_t kGroupBlockBytes = kvrt::kQ4KRows16BlockBytes;
constexpr int64_t kBlocks = Q4KRowsModel::kK / 256;
constexpr int64_t kGroups = Q4KRowsModel::kRows / Q4KRowsModel::kGroupRows;
constexpr int64_t kMatrixBytes = kGroups * kBlocks * kGroupBlockBytes;

/// Token t's quantised activations as the generated tile reads them (Q8_K:
/// a scale per 256, the sums of each run of 32 quants).
struct Activations {
  alignas(64) int8_t quants[Q4KRowsModel::kK];
  alignas(64) int16_t sums[Q4KRowsModel::kK / 32];
  float scales[kBlocks];
};

/// The token every run multiplies: quants from a linear formula, every
/// block's scale 0.01.
const Activations &token() {
  static Activations act = [] {
    Activations a;
    for (int64_t i = 0; i < Q4KRowsModel::kK; ++i)
      a.quants[i] = int8_t((i * 37) % 255 - 127);
    for (int64_t run = 0; run < Q4KRowsModel::kK / 32; ++run) {
      int32_t sum = 0;
      for (int64_t i = 0; i < 32; ++i)
        sum += a.quants[32 * run + i];
      a.sums[run] = int16_t(sum);
    }
    for (float &scale : a.scales)
      scale = 0.01f;
    return a;
  }();
  return act;
}

/// Tile `tile` of the matrix at `base`: groups tile and tile + tiles.
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl,f16c"))) void
runTile(const uint8_t *base, float *out, int64_t tile, int64_t tiles) {
  const Activations &act = token();
  const uint8_t *group[kTileGroups];
  for (int64_t g = 0; g < kTileGroups; ++g)
    group[g] = base + std::min(tile + g * tiles, kGroups - 1) * kBlocks *
                          kGroupBlockBytes;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i high = _mm512_set1_epi8(char(0xF0));
  __m512 acc[kTileGroups];
  for (__m512 &a : acc)
    a = _mm512_setzero_ps();
  for (int64_t b = 0; b < kBlocks; ++b) {
    const int8_t *x = act.quants + 256 * b;
    __m512i sums[kTileGroups], mins[kTileGroups];
    for (int64_t g = 0; g < kTileGroups; ++g)
      sums[g] = mins[g] = _mm512_setzero_si512();
    for (int64_t s = 0; s < 8; ++s)
      for (int64_t g = 0; g < kTileGroups; ++g) {
        const uint8_t *at = group[g] + b * kGroupBlockBytes;
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        for (int64_t i = 0; i < 4; ++i) {
          __m512i w = _mm512_loadu_si512(at + 320 + 256 * s + 64 * i);
          int32_t xl, xh;
          std::memcpy(&xl, x + 32 * s + 4 * i, 4);
          std::memcpy(&xh, x + 32 * s + 16 + 4 * i, 4);
          lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(w, low),
                                   _mm512_set1_epi32(xl));
          hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(w, high),
                                   _mm512_set1_epi32(xh));
        }
        __m512i dot = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
        __m512i scales = _mm512_cvtepu8_epi32(_mm_loadu_si128(
            reinterpret_cast<const __m128i *>(at + 64 + 16 * s)));
        sums[g] = _mm512_add_epi32(sums[g], _mm512_mullo_epi32(dot, scales));
      }
    __m512 dx = _mm512_set1_ps(act.scales[b]);
    for (int64_t g = 0; g < kTileGroups; ++g) {
      const uint8_t *at = group[g] + b * kGroupBlockBytes;
      for (int64_t pair = 0; pair < 4; ++pair) {
        int32_t two;
        std::memcpy(&two, act.sums + 8 * b + 2 * pair, 4);
        __m512i m = _mm512_cvtepu8_epi16(_mm256_loadu_si256(
            reinterpret_cast<const __m256i *>(at + 192 + 32 * pair)));
        mins[g] = _mm512_dpwssd_epi32(mins[g], m, _mm512_set1_epi32(two));
      }
      __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
                                   reinterpret_cast<const __m256i *>(at))),
                               dx);
      __m512 dmin =
          _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
                            reinterpret_cast<const __m256i *>(at + 32))),
                        _mm512_sub_ps(_mm512_setzero_ps(), dx));
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[g]), d, acc[g]);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins[g]), dmin, acc[g]);
    }
  }
  for (int64_t g = 0; g < kTileGroups; ++g) {
    int64_t first = (tile + g * tiles) * Q4KRowsModel::kGroupRows;
    if (first < Q4KRowsModel::kRows)
      _mm512_storeu_ps(out + first, acc[g]);
  }
}

/// Q4_K file rows of pseudo-random quants, scales and mins, every block's d
/// 0.01 and dmin 0.005.
void fillFileLayout(uint8_t *bytes, size_t size, uint32_t seed) {
  uint16_t d = kvrt::floatToHalf(0.01f), dmin = kvrt::floatToHalf(0.005f);
  for (size_t at = 0; at < size; at += kFileBlockBytes) {
    std::memcpy(bytes + at, &d, 2);
    std::memcpy(bytes + at + 2, &dmin, 2);
    for (int64_t i = 4; i < kFileBlockBytes; ++i) {
      seed = seed * 1664525u + 1013904223u;
      bytes[at + i] = uint8_t(seed >> 24);
    }
  }
}

} // namespace

Q4KRowsModel::Q4KRowsModel(int64_t matrices) : matrices(matrices) {
  bytes = static_cast<uint8_t *>(
      kvrt::allocateStreamed(size_t(matrices * kMatrixBytes)));
  if (!bytes)
    return;
  std::vector<uint8_t> file(size_t(kRows * kBlocks * kFileBlockBytes));
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    fillFileLayout(file.data(), file.size(), uint32_t(12345 + matrix));
    struct Item {
      const uint8_t *file;
      uint8_t *packed;
    } item{file.data(), bytes + matrix * kMatrixBytes};
    kvrt_parallel_for(
        kGroups,
        [](void *context, int64_t begin, int64_t end) {
          auto &i = *static_cast<Item *>(context);
          kvrt::repackQ4KRows16(i.file, kRows, kK, i.packed, begin, end);
        },
        &item);
    if (matrix == 0)
      firstFile = file;
  }
}

Q4KRowsModel::~Q4KRowsModel() { std::free(bytes); }

bool Q4KRowsModel::supported() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
}

int64_t Q4KRowsModel::bytesRead() const { return matrices * kMatrixBytes; }

void Q4KRowsModel::runInto(float *out) const {
  int64_t tiles = (kGroups + kTileGroups - 1) / kTileGroups;
  // A loop over each matrix's tiles, as the generated step runs one per
  // weight: the runtime's pool, its claims and its wait at the end.
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    struct Item {
      const uint8_t *base;
      float *out;
      int64_t tiles;
    } item{bytes + matrix * kMatrixBytes, out + matrix * kRows, tiles};
    kvrt_parallel_for(
        tiles,
        [](void *context, int64_t begin, int64_t end) {
          auto &i = *static_cast<Item *>(context);
          for (int64_t tile = begin; tile < end; ++tile)
            runTile(i.base, i.out, tile, i.tiles);
        },
        &item);
  }
}

namespace {

/// The sum of the `count` outputs `into` writes (for the optimizer's sake).
template <typename Into> float sumOfOutputs(int64_t count, Into into) {
  std::vector<float> out(static_cast<size_t>(count));
  into(out.data());
  float sum = 0;
  for (float v : out)
    sum += v;
  return sum;
}

} // namespace

float Q4KRowsModel::run() const {
  return sumOfOutputs(matrices * kRows, [&](float *out) { runInto(out); });
}

bool Q4KRowsModel::matchesScalar() const {
  std::vector<float> out(size_t(matrices * kRows));
  runInto(out.data());
  return firstMatrixMatches(out.data());
}

bool Q4KRowsModel::compileGenerated() {
  if (generated)
    return true;
  const Activations &act = token();
  tokenFloats.resize(size_t(kK));
  for (int64_t i = 0; i < kK; ++i)
    tokenFloats[size_t(i)] = float(act.quants[i]) * act.scales[i / 256];
  return kvir::compiler::compileQuantMatmul(KVRT_WEIGHT_Q4_K, kRows, kK,
                                            &generated) == KVRT_OK;
}

void Q4KRowsModel::runGeneratedInto(float *out) {
  kvrt_memref_f32 a = kvir::memrefF32(tokenFloats.data(), kK);
  kvrt_memref_weight b = {bytes, bytes, 0, {matrices * kMatrixBytes}, {1}};
  // One matrix a call, as the forward multiplies one weight a loop: the
  // table names where its rows start.
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    int64_t at = matrix * kMatrixBytes;
    kvrt_memref_i64 rowsOffset = {&at, &at, 0, {1}, {1}};
    kvrt_memref_f32 c = kvir::memrefF32(out + matrix * kRows, kRows);
    generated(&a, &b, &c, 1, &rowsOffset);
  }
}

float Q4KRowsModel::runGenerated() {
  return sumOfOutputs(matrices * kRows,
                      [&](float *out) { runGeneratedInto(out); });
}

float Q4KRowsModel::runGeneratedFile(float *out) {
  kvrt_memref_f32 a = kvir::memrefF32(tokenFloats.data(), kK);
  auto *file = const_cast<uint8_t *>(firstFile.data());
  kvrt_memref_weight b = {file, file, 0, {int64_t(firstFile.size())}, {1}};
  int64_t none = -1;
  kvrt_memref_i64 rowsOffset = {&none, &none, 0, {1}, {1}};
  kvrt_memref_f32 c = kvir::memrefF32(out, kRows);
  generated(&a, &b, &c, 1, &rowsOffset);
  return out[0];
}

bool Q4KRowsModel::generatedFileMatchesScalar() {
  std::vector<float> out(static_cast<size_t>(kRows));
  runGeneratedFile(out.data());
  return firstMatrixMatches(out.data());
}

bool Q4KRowsModel::generatedMatchesScalar() {
  std::vector<float> out(size_t(matrices * kRows));
  runGeneratedInto(out.data());
  return firstMatrixMatches(out.data());
}

bool Q4KRowsModel::firstMatrixMatches(const float *out) const {
  const Activations &act = token();
  std::vector<float> w(static_cast<size_t>(kK));
  int64_t rowBytes = kBlocks * kFileBlockBytes;
  for (int64_t row : {int64_t(0), int64_t(17), kRows / 2, kRows - 1}) {
    kvrt::dequantizeRow(KVRT_WEIGHT_Q4_K, firstFile.data() + row * rowBytes,
                        w.data(), kK);
    double expected = 0;
    for (int64_t i = 0; i < kK; ++i)
      expected += double(w[size_t(i)]) * act.quants[i] * act.scales[i / 256];
    if (std::abs(out[size_t(row)] - expected) > 1e-4 * (1 + std::abs(expected)))
      return false;
  }
  return true;
}

} // namespace kvir::bench
