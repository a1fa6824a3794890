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
// The same product over the rows repacked 16 at a time (Q8Layout::Rows16)
// asks what a layout other than the file's would let a decode step reach:
// the file's layout costs a row and pair of blocks two loads, a bias flip, a
// dot, two scale loads, a conversion, a spread, a multiply and an FMA; the
// repacked one a dot per 64 bytes and, per block and 16 rows, one scale
// conversion, one multiply, one FMA.
//
//===----------------------------------------------------------------------===//

#include "bench/kernels/Q8TileModel.h"

#include "runtime/core/HugePages.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/Quant.h"

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
/// Rows16: a block of a group (16 scales, 16 x 32 quants), and the groups a
/// tile reads side by side (spread a tile count apart, as the file layout's
/// rows are).
constexpr int64_t kGroupRows = Q8TileModel::kGroupRows;
constexpr int64_t kGroupBlockBytes = kGroupRows * kBlockBytes;
constexpr int64_t kTileGroups = 2;

/// Token t's quantised activations in the layout the generated tile reads:
/// per pair of blocks 64 quants, 16 i32 lanes of -128 x (sum of 4 quants),
/// 16 f32 lanes of scales (block 0's in lanes 0-7, block 1's in 8-15).
struct Activations {
  alignas(64) int8_t quants[Q8TileModel::kK];
  alignas(64) int32_t bias[Q8TileModel::kK / 4];
  alignas(64) float scales[Q8TileModel::kK / 4];
  /// Per block of 32: -128 x (sum of its quants), its scale (Rows16).
  alignas(64) int32_t blockBias[Q8TileModel::kK / 32];
  alignas(64) float blockScales[Q8TileModel::kK / 32];
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

/// Tile `tile` of matrix `matrix` over the repacked rows: kTileGroups groups
/// of 16 rows, each block's 8 runs of 4 quants dotted against the token's 4
/// quants broadcast (two chains, so that the dots overlap), the sums of the
/// group's 16 rows in the lanes of one register, scaled once a block.
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vl,f16c"))) void
runTileRows16(const Task &task, int64_t matrix, int64_t tile) {
  const Q8TileModel &m = *task.model;
  const Activations &act = *task.act;
  int64_t groups = m.rows / kGroupRows;
  int64_t tiles = (groups + kTileGroups - 1) / kTileGroups;
  int64_t blocks = Q8TileModel::kK / 32;
  const uint8_t *base = m.bytes + matrix * m.rows * m.rowBytes;
  const uint8_t *group[kTileGroups];
  for (int64_t g = 0; g < kTileGroups; ++g)
    group[g] =
        base + std::min(tile + g * tiles, groups - 1) * kGroupRows * m.rowBytes;
  __m512 acc[kTileGroups];
  for (__m512 &a : acc)
    a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t quants[8];
    std::memcpy(quants, act.quants + 32 * b, sizeof(quants));
    __m512i bias = _mm512_set1_epi32(act.blockBias[b]);
    __m512 d = _mm512_set1_ps(act.blockScales[b]);
    for (int64_t g = 0; g < kTileGroups; ++g) {
      const uint8_t *at = group[g] + b * kGroupBlockBytes;
      __m512i even = bias, odd = _mm512_setzero_si512();
      for (int64_t run = 0; run < 8; run += 2) {
        even = _mm512_dpbusd_epi32(even, _mm512_loadu_si512(at + 32 + 64 * run),
                                   _mm512_set1_epi32(quants[run]));
        odd = _mm512_dpbusd_epi32(odd,
                                  _mm512_loadu_si512(at + 32 + 64 * (run + 1)),
                                  _mm512_set1_epi32(quants[run + 1]));
      }
      __m512 scales = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
                                        reinterpret_cast<const __m256i *>(at))),
                                    d);
      acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)),
                               scales, acc[g]);
    }
  }
  for (int64_t g = 0; g < kTileGroups; ++g)
    if (tile + g * tiles < groups)
      _mm512_storeu_ps(
          task.out + matrix * m.rows + (tile + g * tiles) * kGroupRows, acc[g]);
}

/// Blocks of scale 1/64 (f16 0x2400) and quants from a linear congruence,
/// in the file's layout.
void fillFileLayout(uint8_t *bytes, size_t size) {
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

} // namespace

Q8TileModel::Q8TileModel(int64_t matrices, Q8Layout layout)
    : matrices(matrices), rows(kRows), rowBytes(kK / 32 * kBlockBytes),
      layout(layout) {
  size_t size = size_t(matrices * rows * rowBytes);
  bytes = static_cast<uint8_t *>(kvrt::allocateStreamed(size));
  if (!bytes || layout == Q8Layout::File) {
    if (bytes)
      fillFileLayout(bytes, size);
    return;
  }
  void *file = kvrt::allocateStreamed(size);
  if (!file) {
    std::free(bytes);
    bytes = nullptr;
    return;
  }
  const auto *from = static_cast<const uint8_t *>(file);
  fillFileLayout(static_cast<uint8_t *>(file), size);
  repackRows16(from, bytes, matrices * rows);
  // The repacked rows hold the file's values (first, last, between).
  for (int64_t row : {int64_t(0), int64_t(17), rows - 1, matrices * rows - 5})
    for (int64_t b = 0; b < kK / 32; ++b) {
      const uint8_t *block = from + row * rowBytes + b * kBlockBytes;
      repackMatches &= scale(row, b) == uint16_t(block[0] | block[1] << 8);
      for (int64_t i = 0; i < 32; ++i)
        repackMatches &= quant(row, b, i) == int8_t(block[2 + i]);
    }
  std::free(file);
}

Q8TileModel::~Q8TileModel() { std::free(bytes); }

void Q8TileModel::repackRows16(const uint8_t *file, uint8_t *packed,
                               int64_t rows) {
  struct Item {
    const uint8_t *file;
    uint8_t *packed;
    int64_t rows;
  } item{file, packed, rows};
  kvrt_parallel_for((rows + kGroupRows - 1) / kGroupRows,
                    [](void *context, int64_t begin, int64_t end) {
                      auto &i = *static_cast<Item *>(context);
                      kvrt::repackQ8Rows16(i.file, i.rows, kK, i.packed, begin,
                                           end);
                    },
                    &item);
}

int8_t Q8TileModel::quant(int64_t row, int64_t b, int64_t i) const {
  if (layout == Q8Layout::File)
    return int8_t(bytes[row * rowBytes + b * kBlockBytes + 2 + i]);
  const uint8_t *block =
      bytes + (row / kGroupRows) * kGroupRows * rowBytes + b * kGroupBlockBytes;
  return int8_t(block[32 + 64 * (i / 4) + 4 * (row % kGroupRows) + i % 4] ^
                0x80);
}

uint16_t Q8TileModel::scale(int64_t row, int64_t b) const {
  const uint8_t *at = layout == Q8Layout::File
                          ? bytes + row * rowBytes + b * kBlockBytes
                          : bytes + (row / kGroupRows) * kGroupRows * rowBytes +
                                b * kGroupBlockBytes + 2 * (row % kGroupRows);
  return uint16_t(at[0] | at[1] << 8);
}

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
    for (int64_t b = 0; b < Q8TileModel::kK / 32; ++b) {
      a.blockBias[b] = 0;
      for (int64_t lane = 8 * b; lane < 8 * b + 8; ++lane)
        a.blockBias[b] += a.bias[lane];
      a.blockScales[b] = a.scales[8 * b];
    }
    return a;
  }();
  return act;
}

} // namespace

void Q8TileModel::runInto(float *out) const {
  Task task{this, &token(), out};
  bool file = layout == Q8Layout::File;
  int64_t tiles = file ? (rows + kTileRows - 1) / kTileRows
                       : (rows / kGroupRows + kTileGroups - 1) / kTileGroups;
  // A loop over each matrix's tiles, as the generated step runs one per
  // weight: the runtime's pool, its claims and its wait at the end.
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    struct Item {
      const Task *task;
      int64_t matrix;
      bool file;
    } item{&task, matrix, file};
    kvrt_parallel_for(
        tiles,
        [](void *context, int64_t begin, int64_t end) {
          auto &i = *static_cast<Item *>(context);
          for (int64_t tile = begin; tile < end; ++tile)
            if (i.file)
              runTile(*i.task, i.matrix, tile);
            else
              runTileRows16(*i.task, i.matrix, tile);
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
  if (!repackMatches)
    return false;
  std::vector<float> out(size_t(matrices * rows));
  runInto(out.data());
  const Activations &act = token();
  for (int64_t at : {int64_t(0), int64_t(1), rows - 1, matrices * rows - 5}) {
    double expected = 0;
    for (int64_t b = 0; b < kK / 32; ++b) {
      int64_t dot = 0;
      for (int64_t i = 0; i < 32; ++i)
        dot += int64_t(quant(at, b, i)) * act.quants[32 * b + i];
      expected += double(kvrt::halfToFloat(scale(at, b))) * act.scales[8 * b] *
                  double(dot);
    }
    if (std::abs(out[size_t(at)] - expected) > 1e-4 * (1 + std::abs(expected)))
      return false;
  }
  return true;
}

} // namespace kvir::bench
