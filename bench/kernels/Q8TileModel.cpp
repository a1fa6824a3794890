//===- Q8TileModel.cpp - A hand-written Q8_0 decode tile --------*- C++ -*-===//
//
// The yardstick of the Q8_0 decode step's memory side (issue 20's 0.8 share):
// the generated tile (emitBlock32DecodeTile) written by hand with AVX-512
// VNNI intrinsics, the same loads, arithmetic and prefetches a row and pair
// of blocks, over matrices of Q8_0 rows on huge pages. The plain read
// (BM_ReadBandwidth) streams one sequence a thread with nothing to compute;
// this one reads as a decode step does (12 rows a tile spread a tile count
// apart, 68 bytes of each a step, 512 bytes of prefetch), so its bytes/s is
// what the pattern can reach on this machine, and the generated step's
// figure against it is the compiler's share.
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/Q8TileModel.h"

#include "runtime/core/HugePages.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvir::bench {
namespace {

constexpr int64_t kBlockBytes = 34, kPairBytes = 2 * kBlockBytes;
constexpr int64_t kTileRows = 12, kPrefetchBytes = 512;

/// Token t's quantised activations in the layout the generated tile reads:
/// per pair of blocks 64 quants, 16 i32 lanes of -128 x (sum of 4 quants),
/// 16 f32 lanes of scales (block 0's in lanes 0-7, block 1's in 8-15).
struct Activations {
  alignas(64) int8_t quants[Q8TileModel::kK];
  alignas(64) int32_t bias[Q8TileModel::kK / 4];
  alignas(64) float scales[Q8TileModel::kK / 4];
};

struct Task {
  const Q8TileModel *model;
  const Activations *act;
  float *out;
};

/// Tile `tile` of matrix `matrix`: the generated tile's loop, row for row.
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl,f16c"))) void
runTile(const Task &task, int64_t matrix, int64_t tile) {
  const Q8TileModel &m = *task.model;
  const Activations &act = *task.act;
  int64_t tiles = (m.rows + kTileRows - 1) / kTileRows;
  const uint8_t *base = m.bytes + matrix * m.rows * m.rowBytes;
  const uint8_t *row[kTileRows];
  for (int64_t r = 0; r < kTileRows; ++r)
    row[r] = base + std::min(tile + r * tiles, m.rows - 1) * m.rowBytes;
  const __m512i flip = _mm512_set1_epi8(-128);
  const __m512i spread =
      _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[kTileRows];
  for (__m512 &a : acc)
    a = _mm512_setzero_ps();
  for (int64_t p = 0; p < m.rowBytes / kPairBytes; ++p) {
    int64_t at = p * kPairBytes;
    for (const uint8_t *r : row) {
      _mm_prefetch(reinterpret_cast<const char *>(r + at + kPrefetchBytes),
                   _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(r + at + kPrefetchBytes + 64),
                   _MM_HINT_T0);
    }
    __m512i quants = _mm512_load_si512(act.quants + 64 * p);
    __m512i bias = _mm512_load_si512(act.bias + 16 * p);
    __m128 d = _mm_setr_ps(act.scales[16 * p], act.scales[16 * p + 8], 0, 0);
    for (int64_t r = 0; r < kTileRows; ++r) {
      const uint8_t *pair = row[r] + at;
      __m512i q = _mm512_inserti64x4(
          _mm512_castsi256_si512(
              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pair + 2))),
          _mm256_loadu_si256(
              reinterpret_cast<const __m256i *>(pair + kBlockBytes + 2)),
          1);
      __m512i dot =
          _mm512_dpbusd_epi32(bias, _mm512_xor_si512(q, flip), quants);
      uint16_t d0, d1;
      std::memcpy(&d0, pair, 2);
      std::memcpy(&d1, pair + kBlockBytes, 2);
      __m128 two = _mm_mul_ps(
          _mm_cvtph_ps(_mm_setr_epi16(short(d0), short(d1), 0, 0, 0, 0, 0, 0)),
          d);
      __m512 scale = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(two));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
    }
  }
  for (int64_t r = 0; r < kTileRows; ++r)
    if (tile + r * tiles < m.rows)
      task.out[matrix * m.rows + tile + r * tiles] =
          _mm512_reduce_add_ps(acc[r]);
}

} // namespace

Q8TileModel::Q8TileModel(int64_t matrices)
    : matrices(matrices), rows(kRows), rowBytes(kK / 32 * kBlockBytes) {
  size_t size = size_t(matrices * rows * rowBytes);
  bytes = static_cast<uint8_t *>(kvrt::allocateStreamed(size));
  if (!bytes)
    return;
  // Blocks of scale 1/64 (f16 0x2400) and quants from a linear congruence.
  uint32_t state = 12345;
  for (size_t at = 0; at < size; at += kBlockBytes) {
    bytes[at] = 0x00;
    bytes[at + 1] = 0x24;
    for (int64_t i = 2; i < kBlockBytes; ++i) {
      state = state * 1664525u + 1013904223u;
      bytes[at + i] = uint8_t(state >> 24);
    }
  }
}

Q8TileModel::~Q8TileModel() { std::free(bytes); }

bool Q8TileModel::supported() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
}

int64_t Q8TileModel::bytesRead() const { return matrices * rows * rowBytes; }

namespace {

/// The token every run multiplies: quants from a linear formula, every
/// block's scale 0.01.
const Activations &token() {
  static Activations act = [] {
    Activations a;
    for (int64_t i = 0; i < Q8TileModel::kK; ++i)
      a.quants[i] = int8_t((i * 37) % 255 - 127);
    for (int64_t lane = 0; lane < Q8TileModel::kK / 4; ++lane) {
      int32_t sum = 0;
      for (int64_t j = 0; j < 4; ++j)
        sum += a.quants[4 * lane + j];
      a.bias[lane] = -128 * sum;
      a.scales[lane] = 0.01f;
    }
    return a;
  }();
  return act;
}

} // namespace

void Q8TileModel::runInto(float *out) const {
  Task task{this, &token(), out};
  int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  // A loop over each matrix's tiles, as the generated step runs one per
  // weight: the runtime's pool, its claims and its wait at the end.
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    struct Item {
      const Task *task;
      int64_t matrix;
    } item{&task, matrix};
    kvrt_parallel_for(
        tiles,
        [](void *context, int64_t begin, int64_t end) {
          auto &i = *static_cast<Item *>(context);
          for (int64_t tile = begin; tile < end; ++tile)
            runTile(*i.task, i.matrix, tile);
        },
        &item);
  }
}

float Q8TileModel::run() const {
  std::vector<float> out(size_t(matrices * rows));
  runInto(out.data());
  float sum = 0;
  for (float v : out)
    sum += v;
  return sum;
}

bool Q8TileModel::matchesScalar() const {
  std::vector<float> out(size_t(matrices * rows));
  runInto(out.data());
  const Activations &act = token();
  for (int64_t at : {int64_t(0), int64_t(1), rows - 1, matrices * rows - 5}) {
    const uint8_t *row = bytes + at * rowBytes;
    double expected = 0;
    for (int64_t b = 0; b < kK / 32; ++b) {
      const uint8_t *block = row + b * kBlockBytes;
      int64_t dot = 0;
      for (int64_t i = 0; i < 32; ++i)
        dot += int64_t(int8_t(block[2 + i])) * act.quants[32 * b + i];
      expected +=
          double(kvrt::halfToFloat(uint16_t(block[0] | block[1] << 8))) *
          act.scales[8 * b] * double(dot);
    }
    if (std::abs(out[size_t(at)] - expected) > 1e-4 * (1 + std::abs(expected)))
      return false;
  }
  return true;
}

} // namespace kvir::bench
