//===- Quant.h - The bytes of every weight format ---------------*- C++ -*-===//
//
// Reading and writing rows of the weight formats (WeightFormat.h has their
// layouts): the exact dequantisation every reader shares (the oracle, the
// runtime's embedding lookup, the writers, the tests), the check of every
// block's scales a loader makes, the quantisers kv-convert writes with, and
// the repacking of Q8_0 and Q4_K rows for the CPU's decode steps (kQ8Rows16).
//
// Dequantisation is ggml's, operation for operation in f32 (no contraction
// into fused multiply-adds): Q8_0 d * q; Q4_0 d * (q - 8); Q4_K and Q5_K
// (d * sc) * q - (dmin * m); Q6_K (d * sc) * (q - 32). The generated forward
// widens blocks with the same operations (ForwardEmitter's dequantisation),
// so the oracle and the generated code multiply the same f32 weights.
//
// The quantisers are KVIR's own (docs/models.md states their error): per
// block, a scale (and a min) fitted by least squares over a few rounds of
// assign-and-refit, then (K-quants) the sub-block scales and mins quantised
// against the super-block's f16 d and dmin, and every q assigned again
// against the scales as they are stored.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_QUANT_H
#define KVIR_RUNTIME_CORE_QUANT_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/WeightFormat.h"

#include <cstdint>
#include <string>

namespace kvrt {

/// `cols` elements (whole blocks) of a row in `format` at `src`, as f32.
void dequantizeRow(kvrt_weight_format format, const void *src, float *dst,
                   int64_t cols);

/// What is wrong with `elements` elements (whole blocks) in `format` at
/// `src`, or "": a non-finite element of f32, f16 and bf16 ("element 7 is
/// inf"), a non-finite scale of a block ("Q8_0 block 5 has a non-finite
/// scale (nan)", "Q4_K block 2 has a non-finite min scale (inf)").
std::string checkWeightData(kvrt_weight_format format, const void *src,
                            int64_t elements);

/// Writes `cols` elements (whole blocks) of `src` in `format` at `dst`
/// (weightRowBytes(format, cols) bytes). f16 and bf16 round to nearest
/// even.
void quantizeRow(kvrt_weight_format format, const float *src, void *dst,
                 int64_t cols);

/// Bytes of `rows` Q8_0 rows of `cols` elements (whole blocks) repacked for
/// a decode step (WeightFormat.h, kQ8Rows16): as many as in the file's
/// layout, the rows rounded up to whole groups.
int64_t q8Rows16Bytes(int64_t rows, int64_t cols);
/// Writes groups `groupBegin` .. `groupEnd` - 1 of the repacked `rows` rows
/// of `cols` elements (whole blocks) at `src` (the file's layout) to `dst`
/// (q8Rows16Bytes of them): callers split the groups between threads.
void repackQ8Rows16(const void *src, int64_t rows, int64_t cols, void *dst,
                    int64_t groupBegin, int64_t groupEnd);
/// The same for Q4_K rows (WeightFormat.h, kQ4KRows16BlockBytes): bytes of
/// `rows` rows repacked, and groups `groupBegin` .. `groupEnd` - 1 written.
int64_t q4kRows16Bytes(int64_t rows, int64_t cols);
void repackQ4KRows16(const void *src, int64_t rows, int64_t cols, void *dst,
                     int64_t groupBegin, int64_t groupEnd);
/// Either of the above by format (decodeGroupBlockBytes(format) > 0).
int64_t decodeRowsBytes(kvrt_weight_format format, int64_t rows, int64_t cols);
void repackDecodeRows(kvrt_weight_format format, const void *src, int64_t rows,
                      int64_t cols, void *dst, int64_t groupBegin,
                      int64_t groupEnd);

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_QUANT_H
