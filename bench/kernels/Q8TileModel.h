//===- Q8TileModel.h - A hand-written Q8_0 decode tile ----------*- C++ -*-===//

#ifndef KVIR_BENCH_KERNELS_Q8TILEMODEL_H
#define KVIR_BENCH_KERNELS_Q8TILEMODEL_H

#include <cstdint>

namespace kvir::bench {

/// `matrices` matrices of kRows Q8_0 rows of kK elements (TinyLlama's gate
/// and up projections), on huge pages, and one decode step's product of each
/// with a token by a hand-written copy of the generated Q8_0 decode tile
/// (Q8TileModel.cpp): what the decode pattern reads a second on this machine,
/// beside what a plain read does (BM_ReadBandwidth).
class Q8TileModel {
public:
  static constexpr int64_t kRows = 5632, kK = 2048;

  explicit Q8TileModel(int64_t matrices);
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
  /// scalar Q8_0 dot of the same bytes (relative 1e-4).
  bool matchesScalar() const;

  const int64_t matrices, rows, rowBytes;
  uint8_t *bytes = nullptr;

private:
  void runInto(float *out) const;
};

} // namespace kvir::bench

#endif // KVIR_BENCH_KERNELS_Q8TILEMODEL_H
