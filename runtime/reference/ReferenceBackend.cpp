//===- ReferenceBackend.cpp - The oracle as a ComputeBackend ----*- C++ -*-===//
//
// `kv-run --backend reference`: prefill and one layer's K/V computed by the
// plain C++ oracle of Reference.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ComputeBackend.h"
#include "runtime/reference/Reference.h"

namespace {

class ReferenceBackend final : public kvir::ComputeBackend {
public:
  const char *name() const override { return "reference"; }

  kvrt_status prefill(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      const char *label, bool lastOnly,
                      std::vector<float> *logits, kvrt_view **out) override {
    return kvir::reference::prefill(model, view, tokens, n, pos, label, logits,
                                    out, lastOnly);
  }

  kvrt_status layerKV(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    return kvir::reference::layerKV(model, view, tokens, n, pos, layer, k, v);
  }
};

} // namespace

std::unique_ptr<kvir::ComputeBackend> kvir::createReferenceBackend() {
  return std::make_unique<ReferenceBackend>();
}
