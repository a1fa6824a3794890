//===- Q8TileModel.h - A hand-written Q8_0 decode tile ----------*- C++ -*-===//

#ifndef KVIR_BENCH_KERNELS_Q8TILEMODEL_H
#define KVIR_BENCH_KERNELS_Q8TILEMODEL_H

#include "runtime/core/WeightFormat.h"

#include <cstdint>

namespace kvir::bench {

/// How a Q8TileModel's weights lie in memory.
enum class Q8Layout {
  /// As in a GGUF file: row after row, a row's 34-byte blocks in order (the
  /// layout the generated decode tile reads).
  File,
  /// Repacked for decode (kvrt::repackQ8Rows16, Quant.h): rows in groups of
  /// 16, and per group and block of 32 the group's 16 f16 scales, then its
  /// quants 4 a row at a time, stored + 128: one 512-bit load holds 4 quants
  /// of each of 16 rows, so a vpdpbusd against the token's 4 quants
  /// broadcast leaves each row's sum in its own lane, and the scales convert
  /// and multiply once a block for 16 rows.
  Rows16,
};

/// `matrices` matrices of kRows Q8_0 rows of kK elements (TinyLlama's gate
/// and up projections), on huge pages, and one decode step's product of each
/// with a token by hand-written AVX-512 VNNI tiles (Q8TileModel.cpp): for
/// Q8Layout::File a copy of the generated Q8_0 decode tile, what the decode
/// pattern reads a second on this machine; for Rows16 the same product over
/// the repacked rows. Beside what a plain read does (BM_ReadBandwidth).
class Q8TileModel {
public:
  static constexpr int64_t kRows = 5632, kK = 2048,
                           kGroupRows = kvrt::kQ8Rows16;
  static_assert(kRows % kGroupRows == 0, "whole groups of rows");

  explicit Q8TileModel(int64_t matrices, Q8Layout layout = Q8Layout::File);
  ~Q8TileModel();
  Q8TileModel(const Q8TileModel &) = delete;
  Q8TileModel &operator=(const Q8TileModel &) = delete;

  /// Whether this CPU runs the tile (AVX-512 F/BW/VL, VNNI and F16C).
  static bool supported();
  /// Whether the weights could be allocated.
  bool valid() const { return bytes != nullptr; }
  /// The weight bytes one run() reads.
  int64_t bytesRead() const;
  /// One product of every matrix on the runtime pool's threads; returns the
  /// sum of the outputs (for the optimizer's sake).
  float run() const;
  /// Whether one run's outputs of four rows (first, last, between) equal a
  /// scalar Q8_0 dot of the same bytes (relative 1e-4), and (Rows16) four
  /// repacked rows hold the values of the file layout they came from.
  bool matchesScalar() const;

  /// Repacks `rows` Q8_0 rows of kK elements from `file` (Q8Layout::File)
  /// into `packed` (Rows16, kvrt::q8Rows16Bytes of them) by
  /// kvrt::repackQ8Rows16 on the runtime pool's threads.
  static void repackRows16(const uint8_t *file, uint8_t *packed, int64_t rows);

  const int64_t matrices, rows, rowBytes;
  const Q8Layout layout;
  uint8_t *bytes = nullptr;

private:
  void runInto(float *out) const;
  /// Quant i and the f16 scale of block b of row `row` (of all matrices).
  int8_t quant(int64_t row, int64_t b, int64_t i) const;
  uint16_t scale(int64_t row, int64_t b) const;

  bool repackMatches = true;
};

} // namespace kvir::bench

#endif // KVIR_BENCH_KERNELS_Q8TILEMODEL_H
