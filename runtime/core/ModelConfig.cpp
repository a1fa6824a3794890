//===- ModelConfig.cpp - The one model and KV configuration -----*- C++ -*-===//

#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

namespace {

/// `text` as a decimal int32; false where it is not exactly that.
bool parseInt32(std::string_view text, int32_t &out) {
  if (text.empty() || text.size() > 11)
    return false;
  std::string s(text);
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end || errno || v < INT32_MIN || v > INT32_MAX)
    return false;
  out = int32_t(v);
  return true;
}

/// `text` as "0x" and exactly `digits` lowercase hex digits (the bits of a
/// double or a float, as configKey writes them).
bool parseHexBits(std::string_view text, int digits, uint64_t &out) {
  if (text.size() != size_t(digits) + 2 || text.substr(0, 2) != "0x")
    return false;
  out = 0;
  for (char c : text.substr(2)) {
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (v < 0)
      return false;
    out = out << 4 | uint64_t(v);
  }
  return true;
}

} // namespace

bool kvir::parseForwardKey(std::string_view key, kvrt_model_config &c,
                           kvrt_kv_dtype &dtype, WeightFormats &formats,
                           std::string &error) {
  c = kvrt_model_config{};
  dtype = KVRT_KV_F32;
  std::string weights;
  // The fields configKey() always writes, in its order; then the optional
  // ones, each at most once.
  const char *required[] = {"dim",   "hidden", "layers", "heads", "kv_heads",
                            "vocab", "rope",   "theta",  "eps",   "kv"};
  size_t next = 0;
  bool seenRopeDim = false, seenScale = false, seenFreqs = false;
  auto bad = [&](std::string_view field) {
    error = str("a forward key with a bad '", field, "': '", key, "'");
    return false;
  };
  size_t pos = 0;
  while (pos < key.size()) {
    size_t end = key.find(' ', pos);
    if (end == std::string_view::npos)
      end = key.size();
    std::string_view field = key.substr(pos, end - pos);
    pos = end + 1;
    size_t eq = field.find('=');
    std::string_view name = field.substr(0, eq);
    std::string_view value = eq == std::string_view::npos
                                 ? std::string_view()
                                 : field.substr(eq + 1);
    if (next < std::size(required)) {
      if (name != required[next++] || eq == std::string_view::npos)
        return bad(field);
      uint64_t bits = 0;
      bool ok = true;
      if (name == "dim")
        ok = parseInt32(value, c.dim);
      else if (name == "hidden")
        ok = parseInt32(value, c.hidden_dim);
      else if (name == "layers")
        ok = parseInt32(value, c.n_layers);
      else if (name == "heads")
        ok = parseInt32(value, c.n_heads);
      else if (name == "kv_heads")
        ok = parseInt32(value, c.n_kv_heads);
      else if (name == "vocab")
        ok = parseInt32(value, c.vocab_size);
      else if (name == "rope") {
        std::optional<kvrt_rope_layout> layout = parseRopeLayout(value);
        ok = layout && value == ropeLayoutName(*layout);
        if (ok)
          c.rope_layout = *layout;
      } else if (name == "theta" || name == "eps") {
        ok = parseHexBits(value, 16, bits);
        std::memcpy(name == "theta" ? &c.rope_theta : &c.rms_eps, &bits,
                    sizeof(bits));
      } else {
        std::optional<kvrt_kv_dtype> parsed = parseKvDtype(value);
        ok = parsed && value == kvDtypeName(*parsed);
        if (ok)
          dtype = *parsed;
      }
      if (!ok)
        return bad(field);
      continue;
    }
    if (name == "rope_dim" && !seenRopeDim && weights.empty()) {
      seenRopeDim = true;
      if (!parseInt32(value, c.rope_dim) || c.rope_dim <= 0)
        return bad(field);
    } else if (name == "rope_scale" && !seenScale && weights.empty()) {
      seenScale = true;
      uint64_t bits = 0;
      if (!parseHexBits(value, 16, bits))
        return bad(field);
      std::memcpy(&c.rope_scale, &bits, sizeof(bits));
    } else if (field == "qkv_bias" && !c.qkv_bias && weights.empty()) {
      c.qkv_bias = 1;
    } else if (name == "rope_freqs" && !seenFreqs && weights.empty()) {
      seenFreqs = true;
      size_t at = 0;
      while (true) {
        size_t comma = value.find(',', at);
        std::string_view one = value.substr(at, comma - at);
        uint64_t bits = 0;
        if (c.n_rope_freq_factors >= KVRT_MAX_ROPE_PAIRS ||
            !parseHexBits(str("0x", one), 8, bits))
          return bad(field);
        uint32_t word = uint32_t(bits);
        std::memcpy(&c.rope_freq_factors[c.n_rope_freq_factors++], &word,
                    sizeof(word));
        if (comma == std::string_view::npos)
          break;
        at = comma + 1;
      }
    } else if (name == "weights" && weights.empty() && !value.empty()) {
      weights = std::string(value);
    } else {
      return bad(field);
    }
  }
  if (next < std::size(required))
    return bad(required[next]);
  if (std::string problem = describeArchitectureError(c); !problem.empty()) {
    error = str("the forward key names an unsupported config: ", problem);
    return false;
  }
  formats = WeightFormats();
  if (!weights.empty()) {
    std::optional<WeightFormats> parsed =
        WeightFormats::parse(weights, c.n_layers, error);
    if (!parsed)
      return false;
    formats = *parsed;
  }
  // What was read writes back the same key, or it was not one.
  if (forwardKey(c, dtype, formats) != key)
    return bad(key);
  return true;
}

std::string kvir::forwardPrefix(const kvrt_model_config &c, kvrt_kv_dtype dtype,
                                const WeightFormats &formats) {
  uint64_t hash = kvrt::fnv1a(forwardKey(c, dtype, formats));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "kv_fwd_%016" PRIx64, hash);
  return buf;
}
