//===- KVElement.cpp - K/V page element conversions -------------*- C++ -*-===//

#include "runtime/core/KVElement.h"

#include <cstring>

using namespace kvrt;

namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

} // namespace

uint16_t kvrt::floatToHalf(float value) {
  uint32_t bits = bitsOf(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) // inf, or NaN kept quiet with its top payload bits
    return sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0u);
  int32_t e = int32_t(exponent) - 127 + 15;
  if (e >= 0x1f)
    return sign | 0x7c00u;
  if (e <= 0) {
    // Subnormal half (or zero): shift the full significand, implicit bit
    // included, and round the dropped bits to nearest even.
    if (e < -10)
      return sign;
    uint32_t significand = mantissa | 0x800000u;
    uint32_t shift = uint32_t(14 - e);
    uint32_t half = significand >> shift;
    uint32_t rest = significand & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u)))
      ++half; // may carry into the smallest normal: still the right bits
    return sign | uint16_t(half);
  }
  uint32_t half = (uint32_t(e) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half; // a carry out of the mantissa bumps the exponent, up to inf
  return sign | uint16_t(half);
}

float kvrt::halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f)
    return floatOf(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0)
      return floatOf(sign);
    // Subnormal: normalise into an f32 exponent.
    int32_t e = -1;
    do {
      mantissa <<= 1;
      ++e;
    } while (!(mantissa & 0x400u));
    return floatOf(sign | (uint32_t(127 - 15 - e) << 23) |
                   ((mantissa & 0x3ffu) << 13));
  }
  return floatOf(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

uint16_t kvrt::floatToBFloat(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

float kvrt::bfloatToFloat(uint16_t bits) {
  return floatOf(uint32_t(bits) << 16);
}

float kvrt::loadElement(const void *base, int64_t index, kvrt_kv_dtype dtype) {
  switch (dtype) {
  case KVRT_KV_F16:
    return halfToFloat(static_cast<const uint16_t *>(base)[index]);
  case KVRT_KV_BF16:
    return bfloatToFloat(static_cast<const uint16_t *>(base)[index]);
  case KVRT_KV_F32:
    break;
  }
  return static_cast<const float *>(base)[index];
}

void kvrt::storeElement(void *base, int64_t index, kvrt_kv_dtype dtype,
                        float value) {
  switch (dtype) {
  case KVRT_KV_F16:
    static_cast<uint16_t *>(base)[index] = floatToHalf(value);
    return;
  case KVRT_KV_BF16:
    static_cast<uint16_t *>(base)[index] = floatToBFloat(value);
    return;
  case KVRT_KV_F32:
    break;
  }
  static_cast<float *>(base)[index] = value;
}
