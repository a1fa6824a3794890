//===- ReferenceBackend.cpp - The oracle as a ComputeBackend ----*- C++ -*-===//
//
// `kv-run --backend reference`: every computation done by the plain C++
// oracle of Reference.cpp; the generated forward is not called.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/Support.h"
#include "runtime/reference/Reference.h"

namespace {

class ReferenceBackend final : public kvir::ComputeBackend {
public:
  const char *name() const override { return "reference"; }
  bool runsGeneratedCode() const override { return false; }

  kvrt_status prefill(const kvir::Forward &, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *label, kvir::LogitRows rows,
                      std::vector<float> *logits, kvrt_view **out) override {
    if (kvrt_status s = scratchFault())
      return s;
    return kvir::reference::prefill(model, view, tokens, n, pos, label, logits,
                                    out, rows.first(n));
  }

  kvrt_status layerKV(const kvir::Forward &, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    if (kvrt_status s = scratchFault())
      return s;
    return kvir::reference::layerKV(model, view, tokens, n, pos, layer, k, v);
  }

  kvrt_status attention(const kvir::Forward &, const kvrt_model *model,
                        const kvrt_view *view, const float *q, int64_t n,
                        int64_t pos, int32_t layer,
                        std::vector<float> *out) override {
    if (!model || !view || (n > 0 && !q) || !out)
      return kvrt::nullArgument("reference attention");
    if (kvrt_status s = scratchFault())
      return s;
    return kvrt::guard([&]() -> kvrt_status {
      kvrt_model_config c;
      if (kvrt_status s = kvrt_model_get_config(model, &c))
        return s;
      int64_t dim = c.dim;
      std::vector<double> qd(dim), od(dim);
      out->assign(n * dim, 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < dim; ++i)
          qd[i] = q[t * dim + i];
        if (kvrt_status s = kvir::reference::attention(
                c, view, layer, qd.data(), pos + t,
                kvir::reference::ShiftMode::Fused, od.data()))
          return s;
        for (int64_t i = 0; i < dim; ++i)
          (*out)[t * dim + i] = static_cast<float>(od[i]);
      }
      return KVRT_OK;
    });
  }

  kvrt_status materialize(const kvir::Forward &, const kvrt_model *model,
                          const kvrt_view *view, kvrt_view **out) override {
    if (kvrt_status s = scratchFault())
      return s;
    return kvir::reference::materialize(model, view, out);
  }

private:
  /// Every call allocates its working memory first (KVFaults.h).
  static kvrt_status scratchFault() {
    return kvrt::allocationFault(KVRT_FAULT_SCRATCH, "reference backend");
  }
};

} // namespace

std::unique_ptr<kvir::ComputeBackend> kvir::createReferenceBackend() {
  return std::make_unique<ReferenceBackend>();
}
