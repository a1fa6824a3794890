//===- CpuTestSupport.h - Models and oracle calls for CPU tests -*- C++ -*-===//
//
// What the CPU backend's tests share: the backend, the f32 tolerance, the
// synthetic models they run, stories260K, and the oracle's prefill.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TEST_UNIT_CPU_CPUTESTSUPPORT_H
#define KVIR_TEST_UNIT_CPU_CPUTESTSUPPORT_H

#include "runtime/cpu/CpuBackend.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include <algorithm>

namespace kvir::test {

/// The f32 path's tolerance on logits against the oracle, 1e-4 absolute
/// (the oracle accumulates in double).
constexpr double kCpuLogitTolerance = 1e-4;

/// The CPU backend, one per test binary.
inline ComputeBackend &cpuBackend() {
  static std::unique_ptr<ComputeBackend> backend =
      kvir::cpu::createCpuBackend();
  return *backend;
}

/// A GQA model (2 query heads per KV head, head size 12) with half RoPE.
inline const kvrt_model *gqaHalfModel() {
  static ModelPtr model = syntheticModel(smallConfig(KVRT_ROPE_HALF), 7);
  return model.get();
}

/// Multi-query attention (4 query heads on 1 KV head, head size 16),
/// interleaved RoPE with theta 500000, sizes that are not multiples of 16.
inline const kvrt_model *mqaModel() {
  static ModelPtr model = [] {
    kvrt_model_config c = makeConfig(64, 100, 2, 4, 1, 97, 256);
    c.rope_theta = 500000.0;
    c.rms_eps = 1e-6;
    return syntheticModel(c, 11);
  }();
  return model.get();
}

inline const kvrt_model *storiesModel() {
  static ModelPtr model = loadModel(testModelPath());
  return model.get();
}

/// Prefill result: logits and the new view.
struct Prefilled {
  std::vector<float> logits;
  ViewPtr view;
};

/// The oracle's prefill of `tokens` at `pos` over `view`.
inline Prefilled refPrefill(const kvrt_model *model, const kvrt_view *view,
                            const std::vector<int32_t> &tokens, int64_t pos) {
  Prefilled result;
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvir::reference::prefill(model, view, tokens.data(), tokens.size(),
                                     pos, "ref", &result.logits, &out),
            KVRT_OK)
      << kvrt_last_error();
  result.view.reset(out);
  return result;
}

/// Largest |a[i] - b[i]|; the sizes must agree.
inline double maxDiff(const std::vector<float> &a,
                      const std::vector<float> &b) {
  EXPECT_EQ(a.size(), b.size());
  return maxAbsDiff(a.data(), b.data(), std::min(a.size(), b.size()));
}

} // namespace kvir::test

#endif // KVIR_TEST_UNIT_CPU_CPUTESTSUPPORT_H
