//===- Q4KRowsModel.h - A hand-written Q4_K decode tile ---------*- C++ -*-===//

#ifndef KVIR_BENCH_KERNELS_Q4KROWSMODEL_H
#define KVIR_BENCH_KERNELS_Q4KROWSMODEL_H

#include "driver/compiler/Compiler.h"
#include "runtime/core/WeightFormat.h"

#include <cstdint>
#include <vector>

namespace kvir::bench {

/// `matrices` matrices of kRows Q4_K rows of kK elements (TinyLlama's gate
/// and up projections) repacked for decode (kvrt::repackQ4KRows16, Quant.h),
/// on huge pages, and one decode step's product of each with a token by a
/// hand-written AVX-512 VNNI copy of the tile the generator emits for those
/// rows (emitRepackedQ4KDecodeTile, Q4KRowsModel.cpp): two groups of 16 rows
/// a tile, spread a tile count apart. What that layout and tile read a second
/// on this machine, beside a plain read (BM_ReadBandwidth) and the generated
/// step (kv-run).
class Q4KRowsModel {
public:
  static constexpr int64_t kRows = 5632, kK = 2048,
                           kGroupRows = kvrt::kQ8Rows16;
  static_assert(kRows % kGroupRows == 0, "whole groups of rows");

  explicit Q4KRowsModel(int64_t matrices);
  ~Q4KRowsModel();
  Q4KRowsModel(const Q4KRowsModel &) = delete;
  Q4KRowsModel &operator=(const Q4KRowsModel &) = delete;

  /// Whether this CPU runs the tile (AVX-512 F/BW/VL, VNNI and F16C).
  static bool supported();
  /// Whether the weights could be allocated.
  bool valid() const { return bytes != nullptr; }
  /// The weight bytes one run() reads.
  int64_t bytesRead() const;
  /// One product of every matrix on the runtime pool's threads; returns the
  /// sum of the outputs (for the optimizer's sake).
  float run() const;
  /// Whether one run's outputs of four rows of the first matrix equal the dot
  /// of the token with the file rows they were repacked from, dequantised
  /// (kvrt::dequantizeRow; relative 1e-4).
  bool matchesScalar() const;

  /// The same product by the generated decode matmul
  /// (kvir::compiler::compileQuantMatmul, its tiles emitRepackedQ4KDecodeTile)
  /// over the same rows, the token given as floats (its quants times its
  /// scales, which the generated matmul quantises back to the same quants):
  /// the generated tile beside the hand-written one, on one buffer. False
  /// where it cannot be compiled.
  bool compileGenerated();
  float runGenerated();
  /// Whether runGenerated's outputs of those four rows equal that dot.
  bool generatedMatchesScalar();
  /// The generated matmul over the first matrix in the file's layout (the
  /// table's offset -1): what the file rows' tile computes a second where
  /// it stays in the L3. Its outputs in `out` (kRows); the first of them.
  float runGeneratedFile(float *out);
  /// Whether its outputs of the four rows equal the dot of matchesScalar.
  bool generatedFileMatchesScalar();
  /// The bytes one runGeneratedFile() reads.
  int64_t fileBytesRead() const { return int64_t(firstFile.size()); }

  const int64_t matrices;
  uint8_t *bytes = nullptr;

private:
  void runInto(float *out) const;
  void runGeneratedInto(float *out);
  /// Whether `out` (a run's outputs) holds the four rows' dots.
  bool firstMatrixMatches(const float *out) const;

  kvir::compiler::QuantMatmulFn generated = nullptr;
  std::vector<float> tokenFloats;

  /// The first matrix in the file's layout.
  std::vector<uint8_t> firstFile;
};

} // namespace kvir::bench

#endif // KVIR_BENCH_KERNELS_Q4KROWSMODEL_H
