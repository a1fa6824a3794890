//===- SyntheticModel.cpp - Seeded synthetic models -------------*- C++ -*-===//
//
// Weights drawn from one splitmix64 stream, in llama2.c tensor order, with an
// exact integer-to-float conversion: the same seed gives bit-identical models
// on every machine.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Model.h"
#include "runtime/core/Support.h"

#include <cmath>

using namespace kvrt;

namespace {

/// Sebastiano Vigna's splitmix64.
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t seed) : state(seed) {}

  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform in [-1, 1) with 24 random bits: (k - 2^23) / 2^23 for the top 24
  /// bits k, exactly representable, so no rounding mode can change it.
  float nextSymmetric() {
    int32_t k = static_cast<int32_t>(next() >> 40);
    return static_cast<float>(k - (1 << 23)) * 0x1.0p-23f;
  }

private:
  uint64_t state;
};

} // namespace

extern "C" kvrt_status kvrt_model_synthetic(const kvrt_model_config *config,
                                            uint64_t seed, kvrt_model **out) {
  if (!config || !out)
    return nullArgument(__func__);
  *out = nullptr;
  if (kvrt_status s = kvrt_model_config_validate(config))
    return s;
  return guard([&] {
    std::optional<std::vector<TensorSpec>> specs = tensorSpecs(*config);
    uint64_t total = 0;
    bool overflow = !specs;
    if (specs)
      for (const TensorSpec &spec : *specs)
        overflow |= __builtin_add_overflow(total, spec.count, &total);
    if (overflow || total > (uint64_t(1) << 40))
      return fail(KVRT_ERR_BAD_MODEL,
                  "invalid model config: more than 2^40 weights");
    if (kvrt_status s =
            allocationFault(KVRT_FAULT_WEIGHTS, "synthetic model weights"))
      return s;
    std::vector<float> data(total);
    SplitMix64 rng(seed);
    float *p = data.data();
    for (const TensorSpec &spec : *specs) {
      // Correctly rounded float operations: portable.
      float scale = 1.0f / std::sqrt(static_cast<float>(spec.fanIn));
      for (uint64_t i = 0; i < spec.count; ++i) {
        float u = rng.nextSymmetric();
        switch (spec.kind) {
        case TensorKind::Embedding:
          p[i] = u;
          break;
        case TensorKind::Norm:
          p[i] = 1.0f + 0.25f * u;
          break;
        case TensorKind::Matrix:
          p[i] = u * scale;
          break;
        case TensorKind::Bias:
          p[i] = 0.5f * u;
          break;
        }
      }
      p += spec.count;
    }
    *out = makeModel(*config, std::move(data));
    return KVRT_OK;
  });
}
