//===- ModelConfig.cpp - The one model and KV configuration -----*- C++ -*-===//

#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

using kvrt::str;

const char *kvir::ropeLayoutName(kvrt_rope_layout layout) {
  switch (layout) {
  case KVRT_ROPE_INTERLEAVED:
    return "interleaved";
  case KVRT_ROPE_HALF:
    return "half";
  }
  return "unknown";
}

const char *kvir::ropeLayoutLlamaCppName(kvrt_rope_layout layout) {
  switch (layout) {
  case KVRT_ROPE_INTERLEAVED:
    return "normal";
  case KVRT_ROPE_HALF:
    return "neox";
  }
  return "unknown";
}

std::optional<kvrt_rope_layout> kvir::parseRopeLayout(std::string_view name) {
  // The layouts are numbered from 0 without gaps: every one has a name.
  for (int i = 0; i < KVRT_ROPE_LAYOUT_COUNT; ++i) {
    auto layout = static_cast<kvrt_rope_layout>(i);
    if (name == ropeLayoutName(layout) ||
        name == ropeLayoutLlamaCppName(layout))
      return layout;
  }
  return std::nullopt;
}

const char *kvir::kvDtypeName(kvrt_kv_dtype dtype) {
  switch (dtype) {
  case KVRT_KV_F32:
    return "f32";
  case KVRT_KV_F16:
    return "f16";
  case KVRT_KV_BF16:
    return "bf16";
  }
  return "unknown";
}

std::optional<kvrt_kv_dtype> kvir::parseKvDtype(std::string_view name) {
  for (kvrt_kv_dtype dtype : {KVRT_KV_F32, KVRT_KV_F16, KVRT_KV_BF16})
    if (name == kvDtypeName(dtype))
      return dtype;
  return std::nullopt;
}

std::string kvir::describeKvDtypeError(const kvrt_kv_dtype &dtype) {
  int32_t value;
  static_assert(sizeof(dtype) == sizeof(value));
  std::memcpy(&value, &dtype, sizeof(value));
  if (value >= KVRT_KV_F32 && value <= KVRT_KV_BF16)
    return "";
  return "dtype = " + std::to_string(value) +
         " is not f32 (0), f16 (1) or bf16 (2)";
}

int64_t kvir::kvDtypeBytes(kvrt_kv_dtype dtype) {
  switch (dtype) {
  case KVRT_KV_F32:
    return 4;
  case KVRT_KV_F16:
  case KVRT_KV_BF16:
    return 2;
  }
  return 0;
}

std::string kvir::describeArchitectureError(const kvrt_model_config &c) {
  struct Field {
    const char *name;
    int32_t value;
  };
  for (Field f :
       {Field{"dim", c.dim}, Field{"hidden_dim", c.hidden_dim},
        Field{"n_layers", c.n_layers}, Field{"n_heads", c.n_heads},
        Field{"n_kv_heads", c.n_kv_heads}, Field{"vocab_size", c.vocab_size}})
    if (f.value <= 0)
      return str(f.name, " = ", f.value, " must be positive");
  if (c.dim % c.n_heads != 0)
    return str("dim ", c.dim, " is not divisible by n_heads ", c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    return str("n_heads ", c.n_heads, " is not divisible by n_kv_heads ",
               c.n_kv_heads);
  if (headSize(c) % 2 != 0)
    return str("head size ", headSize(c), " (dim ", c.dim, " / n_heads ",
               c.n_heads, ") is odd: RoPE rotates pairs of dimensions");
  // Read as the integer the C ABI passes: the enum may hold anything.
  int32_t layout;
  static_assert(sizeof(c.rope_layout) == sizeof(layout));
  std::memcpy(&layout, &c.rope_layout, sizeof(layout));
  if (layout < 0 || layout >= KVRT_ROPE_LAYOUT_COUNT) {
    std::string known;
    for (int i = 0; i < KVRT_ROPE_LAYOUT_COUNT; ++i)
      known += str(i ? ", " : "", i, " ",
                   ropeLayoutName(static_cast<kvrt_rope_layout>(i)));
    return str("rope_layout = ", layout, " is not a known layout (", known,
               ")");
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    return str("rope_theta = ", c.rope_theta, " must be positive and finite");
  if (!(std::isfinite(c.rms_eps) && c.rms_eps > 0))
    return str("rms_eps = ", c.rms_eps, " must be positive and finite");
  if (c.rope_dim < 0 || c.rope_dim % 2 != 0 || c.rope_dim > headSize(c))
    return str("rope_dim = ", c.rope_dim,
               " must be 0 (the whole head) or even and at most the head "
               "size ",
               headSize(c));
  if (!(std::isfinite(c.rope_scale) && c.rope_scale >= 0))
    return str("rope_scale = ", c.rope_scale,
               " must be finite and positive (0 for none)");
  int32_t pairs = ropeDims(c) / 2;
  if (c.n_rope_freq_factors != 0 && c.n_rope_freq_factors != pairs)
    return str("n_rope_freq_factors = ", c.n_rope_freq_factors,
               " must be 0 or the number of rotary pairs ", pairs);
  if (c.n_rope_freq_factors > KVRT_MAX_ROPE_PAIRS)
    return str("n_rope_freq_factors = ", c.n_rope_freq_factors, " exceeds the ",
               KVRT_MAX_ROPE_PAIRS, " a config can hold");
  for (int32_t i = 0; i < c.n_rope_freq_factors; ++i)
    if (!(std::isfinite(c.rope_freq_factors[i]) && c.rope_freq_factors[i] > 0))
      return str("rope_freq_factors[", i, "] = ", c.rope_freq_factors[i],
                 " must be positive and finite");
  return "";
}

bool kvir::ropeHasFrequencyDivisor(const kvrt_model_config &c) {
  return ropeScale(c) != 1.0 || c.n_rope_freq_factors != 0;
}

double kvir::ropeFrequencyDivisor(const kvrt_model_config &c, int32_t i) {
  double factor = i < c.n_rope_freq_factors
                      ? static_cast<double>(c.rope_freq_factors[i])
                      : 1.0;
  return factor * ropeScale(c);
}

double kvir::ropeFrequency(const kvrt_model_config &c, int32_t i) {
  int32_t dims = ropeDims(c);
  if (2 * i >= dims)
    return 0.0;
  double frequency = std::pow(c.rope_theta, -2.0 * i / dims);
  if (!ropeHasFrequencyDivisor(c))
    return frequency;
  return frequency / ropeFrequencyDivisor(c, i);
}

std::vector<float> kvir::llama3RopeFreqFactors(int32_t rotaryDims, double theta,
                                               double factor,
                                               double lowFreqFactor,
                                               double highFreqFactor,
                                               double originalContext) {
  const double pi = 3.14159265358979323846;
  double lowWavelength = originalContext / lowFreqFactor;
  double highWavelength = originalContext / highFreqFactor;
  std::vector<float> factors;
  for (int32_t i = 0; 2 * i < rotaryDims; ++i) {
    double frequency = std::pow(theta, -2.0 * i / rotaryDims);
    double wavelength = 2 * pi / frequency;
    double f;
    if (wavelength < highWavelength) {
      f = 1.0;
    } else if (wavelength > lowWavelength) {
      f = factor;
    } else {
      double smooth = (originalContext / wavelength - lowFreqFactor) /
                      (highFreqFactor - lowFreqFactor);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    factors.push_back(static_cast<float>(f));
  }
  return factors;
}

std::optional<kvrt_kv_dtype> kvir::kvDtypeOfKey(const char *key) {
  if (!key)
    return KVRT_KV_F32;
  std::string_view k(key);
  size_t at = k.rfind(" kv=");
  if (at == std::string_view::npos)
    return KVRT_KV_F32;
  // The RoPE frequency variants follow it, separated by spaces.
  std::string_view value = k.substr(at + 4);
  return parseKvDtype(value.substr(0, value.find(' ')));
}

std::string kvir::configKey(const kvrt_model_config &c, kvrt_kv_dtype dtype) {
  uint64_t theta, eps;
  std::memcpy(&theta, &c.rope_theta, sizeof(theta));
  std::memcpy(&eps, &c.rms_eps, sizeof(eps));
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "dim=%d hidden=%d layers=%d heads=%d kv_heads=%d vocab=%d "
                "rope=%s theta=0x%016" PRIx64 " eps=0x%016" PRIx64 " kv=%s",
                c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                c.vocab_size, ropeLayoutName(c.rope_layout), theta, eps,
                kvDtypeName(dtype));
  std::string key = buf;
  // The frequency variants only where they are in effect, so that the keys
  // (and forward names) of plain configs stay what they were.
  if (ropeDims(c) != headSize(c))
    key += str(" rope_dim=", ropeDims(c));
  if (ropeScale(c) != 1.0) {
    double scale = ropeScale(c);
    uint64_t bits;
    std::memcpy(&bits, &scale, sizeof(bits));
    std::snprintf(buf, sizeof(buf), " rope_scale=0x%016" PRIx64, bits);
    key += buf;
  }
  if (c.qkv_bias)
    key += " qkv_bias";
  if (c.n_rope_freq_factors) {
    key += " rope_freqs=";
    for (int32_t i = 0; i < c.n_rope_freq_factors; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &c.rope_freq_factors[i], sizeof(bits));
      std::snprintf(buf, sizeof(buf), "%s%08" PRIx32, i ? "," : "", bits);
      key += buf;
    }
  }
  return key;
}

std::string kvir::forwardKey(const kvrt_model_config &c, kvrt_kv_dtype dtype,
                             const WeightFormats &formats) {
  std::string key = configKey(c, dtype);
  if (!formats.allF32())
    key += " weights=" + formats.spec();
  return key;
}

std::string kvir::forwardPrefix(const kvrt_model_config &c, kvrt_kv_dtype dtype,
                                const WeightFormats &formats) {
  // FNV-1a: stable across machines and compilers, unlike std::hash.
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char ch : forwardKey(c, dtype, formats)) {
    hash ^= ch;
    hash *= 0x100000001b3ULL;
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "kv_fwd_%016" PRIx64, hash);
  return buf;
}
