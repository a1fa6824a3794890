//===- CpuHost.cpp - The CPU backend over kernel function pointers -*- C++ -*-//

#include "runtime/cpu/CpuHost.h"
#include "runtime/core/Support.h"

#include <cstring>

using namespace kvir;
using namespace kvir::cpu;
using kvrt::fail;
using kvrt::str;

void RunTable::append(const int32_t *runPages, int64_t nPages,
                      int64_t slotBegin, int64_t nTokens, int64_t basePos,
                      int64_t delta) {
  int64_t row[kRunWidth] = {
      int64_t(pages.size()), slotBegin, nTokens, basePos, delta, 0, 0, 0};
  pages.insert(pages.end(), runPages, runPages + nPages);
  rows.insert(rows.end(), row, row + kRunWidth);
}

MemRef<int32_t, 1> RunTable::pagesRef() {
  return memref1D(pages.data(), int64_t(pages.size()));
}

MemRef<int64_t, 2> RunTable::rowsRef() {
  return {rows.data(), rows.data(), 0, {numRuns(), kRunWidth}, {kRunWidth, 1}};
}

kvrt_status kvir::cpu::buildRunTable(const kvrt_view *view, RunTable *table) {
  if (!view || !table)
    return kvrt::nullArgument(__func__);
  int64_t n = kvrt_view_num_runs(view);
  for (int64_t r = 0; r < n; ++r) {
    kvrt_run run;
    if (kvrt_status s = kvrt_view_get_run(view, r, &run))
      return s;
    table->append(run.pages, run.n_pages, run.slot_begin, run.n_tokens,
                  run.base_pos, run.delta);
  }
  return KVRT_OK;
}

namespace {

class CpuBackend final : public ComputeBackend {
public:
  explicit CpuBackend(KernelProvider provider)
      : provider(std::move(provider)) {}

  const char *name() const override { return "cpu"; }

  kvrt_status prefill(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      const char *label, bool lastOnly,
                      std::vector<float> *logits, kvrt_view **out) override {
    if (!model || !view || !logits || !out)
      return kvrt::nullArgument("cpu prefill");
    *out = nullptr;
    return kvrt::guard([&] {
      return prefillImpl(model, view, tokens, n, pos, label, lastOnly, *logits,
                         out);
    });
  }

  kvrt_status layerKV(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    if (!model || !view || !k || !v)
      return kvrt::nullArgument("cpu layerKV");
    return kvrt::guard([&]() -> kvrt_status {
      Call call;
      if (kvrt_status s = prepare(model, tokens, n, pos, "layerKV", call))
        return s;
      if (layer < 0 || layer >= call.config.n_layers)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("layerKV: layer ", layer, " is outside [0, ",
                        call.config.n_layers, ")"));
      // Layers 0 .. layer of a prefill into scratch pages, read back and
      // released: nothing is appended and the pool ends as it was.
      Scratch scratch;
      if (kvrt_status s = run(call, view, tokens, n, pos, layer + 1,
                              /*logitsFrom=*/n, nullptr, scratch))
        return s;
      int64_t kvDim = int64_t(call.config.n_kv_heads) *
                      (call.config.dim / call.config.n_heads);
      k->resize(n * kvDim);
      v->resize(n * kvDim);
      return kvrt_pool_read_kv(scratch.pool, scratch.pages->pages.data(), 0, n,
                               layer, k->data(), v->data());
    });
  }

private:
  static MemRef<float, 1> weight(const float *data, int64_t size) {
    return memref1D(const_cast<float *>(data), size);
  }

  /// What a call needs: the model's config, weights and kernels.
  struct Call {
    kvrt_model_config config;
    kvrt_model_weights weights;
    std::shared_ptr<const CpuKernels> kernels;
  };

  /// Fills `call` for `model` and checks the tokens and positions.
  kvrt_status prepare(const kvrt_model *model, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *what, Call &call) const {
    if (kvrt_status s = kvrt_model_get_config(model, &call.config))
      return s;
    if (kvrt_status s = kvrt_model_get_weights(model, &call.weights))
      return s;
    if (kvrt_status s =
            kvrt::checkPrefillArguments(call.config, tokens, n, pos, what))
      return s;
    if (kvrt_status s = provider(call.config, &call.kernels))
      return s;
    const CpuKernels *k = call.kernels.get();
    if (!k || !k->prefill || !k->attention)
      return fail(KVRT_ERR_INTERNAL, "cpu backend: incomplete kernel table");
    return KVRT_OK;
  }

  /// The embedding rows of the tokens (a copy, not math).
  static std::vector<float> embed(const kvrt_model_config &c,
                                  const kvrt_model_weights &w,
                                  const int32_t *tokens, int64_t n) {
    std::vector<float> x(n * c.dim);
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&x[t * c.dim], w.token_embedding + int64_t(tokens[t]) * c.dim,
                  sizeof(float) * c.dim);
    return x;
  }

  /// The pages a kernel call wrote its new run into, held until released.
  struct Scratch {
    kvrt_pool *pool = nullptr;
    std::unique_ptr<kvrt::PageRefs> pages;
  };

  /// Runs layers 0 .. nLayers-1 of the forward of the tokens over `view`
  /// into fresh pages (returned in `scratch`, not sealed), and the logits of
  /// positions logitsFrom .. n-1 into `logits` when all layers run.
  kvrt_status run(const Call &call, const kvrt_view *view,
                  const int32_t *tokens, int64_t n, int64_t pos,
                  int64_t nLayers, int64_t logitsFrom,
                  std::vector<float> *logits, Scratch &scratch) {
    const kvrt_model_config &c = call.config;
    const kvrt_model_weights &w = call.weights;
    kvrt_pool *pool = kvrt_view_pool(view);
    kvrt_page_layout layout;
    if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
      return s;
    int32_t headSize = c.dim / c.n_heads;
    if (layout.n_layers != c.n_layers || layout.n_kv_heads != c.n_kv_heads ||
        layout.head_size != headSize)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("the view's pool holds ", layout.n_layers, " layers x ",
                      layout.n_kv_heads, " kv heads x head size ",
                      layout.head_size, ", the model needs ", c.n_layers, " x ",
                      c.n_kv_heads, " x ", headSize));
    RunTable table;
    if (kvrt_status s = buildRunTable(view, &table))
      return s;

    // All pages are taken before any work, so exhaustion changes nothing.
    int64_t nPages = (n + layout.page_tokens - 1) / layout.page_tokens;
    std::vector<int32_t> pages(nPages);
    if (kvrt_status s = kvrt_pool_alloc_pages(pool, nPages, pages.data()))
      return s;
    scratch.pool = pool;
    // The pages go back to the pool when `scratch` is destroyed, unless the
    // caller seals them into a view first (which takes its own references).
    scratch.pages.reset(new kvrt::PageRefs{pool, std::move(pages)});
    table.append(scratch.pages->pages.data(), nPages, 0, n, pos, 0);

    std::vector<float> x = embed(c, w, tokens, n);
    std::vector<float> result((n - logitsFrom) * int64_t(c.vocab_size));
    int64_t L = c.n_layers, D = c.dim, H = c.hidden_dim;
    int64_t KV = int64_t(c.n_kv_heads) * headSize;
    auto xr = memref1D(x.data(), int64_t(x.size()));
    auto rmsAtt = weight(w.rms_att, L * D), wq = weight(w.wq, L * D * D);
    auto wk = weight(w.wk, L * KV * D), wv = weight(w.wv, L * KV * D);
    auto wo = weight(w.wo, L * D * D), rmsFfn = weight(w.rms_ffn, L * D);
    auto w1 = weight(w.w1, L * H * D), w2 = weight(w.w2, L * D * H);
    auto w3 = weight(w.w3, L * H * D), rmsFinal = weight(w.rms_final, D);
    auto wcls = weight(w.wcls, int64_t(c.vocab_size) * D);
    auto kv = memref1D(layout.base, layout.capacity_pages * layout.page_stride);
    auto pageRef = table.pagesRef();
    auto runRef = table.rowsRef();
    auto lg = memref1D(result.data(), int64_t(result.size()));
    call.kernels->prefill(&xr, &rmsAtt, &wq, &wk, &wv, &wo, &rmsFfn, &w1, &w2,
                          &w3, &rmsFinal, &wcls, &kv, &pageRef, &runRef,
                          layout.page_tokens, pos, n, nLayers, logitsFrom, &lg);
    if (logits)
      *logits = std::move(result);
    return KVRT_OK;
  }

  kvrt_status prefillImpl(const kvrt_model *model, const kvrt_view *view,
                          const int32_t *tokens, int64_t n, int64_t pos,
                          const char *label, bool lastOnly,
                          std::vector<float> &logits, kvrt_view **out) {
    Call call;
    if (kvrt_status s = prepare(model, tokens, n, pos, "prefill", call))
      return s;
    Scratch scratch;
    std::vector<float> result;
    if (kvrt_status s = run(call, view, tokens, n, pos, call.config.n_layers,
                            lastOnly ? n - 1 : 0, &result, scratch))
      return s;
    const std::vector<int32_t> &pages = scratch.pages->pages;
    for (int32_t page : pages)
      if (kvrt_status s = kvrt_pool_seal_page(scratch.pool, page))
        return s;
    kvrt_run newRun{pages.data(), int64_t(pages.size()), 0, n, pos, 0, tokens,
                    label};
    if (kvrt_status s = kvrt_view_append(view, &newRun, out))
      return s;
    logits = std::move(result);
    return KVRT_OK;
  }

  KernelProvider provider;
};

} // namespace

std::unique_ptr<ComputeBackend>
kvir::cpu::createCpuBackendFromKernels(KernelProvider provider) {
  return std::make_unique<CpuBackend>(std::move(provider));
}
