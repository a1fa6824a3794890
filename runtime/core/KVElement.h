//===- KVElement.h - K/V page element conversions ---------------*- C++ -*-===//
//
// The runtime's one conversion between f32 and IEEE binary16 / bfloat16
// (round to nearest even, NaN kept quiet; integer arithmetic only, so the
// floating-point rounding mode cannot change it), and element-wise access to
// a page arena of any kvrt_kv_dtype. The pool, the GGUF reader and writer
// (F16, BF16 and Q8_0 scales), the oracle and the tests share them, so every
// writer of a page rounds the same way as the generated forward
// (arith.truncf, also round to nearest even).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_KVELEMENT_H
#define KVIR_RUNTIME_CORE_KVELEMENT_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>

namespace kvrt {

/// f32 -> IEEE half, round to nearest even; overflow gives +-inf, NaN stays
/// NaN (quiet), values below the smallest subnormal round to +-0.
uint16_t floatToHalf(float value);
/// IEEE half -> f32, exact (subnormals included).
float halfToFloat(uint16_t bits);
/// f32 -> bfloat16, round to nearest even; NaN stays NaN (quiet).
uint16_t floatToBFloat(float value);
/// bfloat16 -> f32, exact.
float bfloatToFloat(uint16_t bits);

/// Element `index` of an arena of `dtype` elements, as f32.
float loadElement(const void *base, int64_t index, kvrt_kv_dtype dtype);
/// Stores `value`, rounded to `dtype`, as element `index` of an arena.
void storeElement(void *base, int64_t index, kvrt_kv_dtype dtype, float value);

} // namespace kvrt

#endif // KVIR_RUNTIME_CORE_KVELEMENT_H
