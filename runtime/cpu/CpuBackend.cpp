//===- CpuBackend.cpp - The generated forward on the host -------*- C++ -*-===//

#include "runtime/cpu/CpuBackend.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/core/ViewRebuild.h"

#include <cstring>

using namespace kvir;
using kvrt::fail;
using kvrt::str;

namespace {

/// What a call needs: the model, its config and weights.
struct Model {
  const kvrt_model *model;
  kvrt_model_config config;
  kvrt_model_weights weights;
};

/// Fewer rows than this take the dot-product kernel, which reads the weights
/// where they lie (CpuKernels.h's kPackedMinRows): a call of so few rows
/// does not pack the model.
constexpr int64_t kPackedMinRows = 4;

/// The pages a forward call wrote its new run into, held until released.
struct Scratch {
  kvrt_pool *pool = nullptr;
  std::unique_ptr<kvrt::PageRefs> pages;
};

class CpuBackend final : public ComputeBackend {
public:
  const char *name() const override { return "cpu"; }
  bool runsGeneratedCode() const override { return true; }

  kvrt_status prefill(const Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *label, LogitRows rows,
                      std::vector<float> *logits, kvrt_view **out) override {
    if (!model || !view || !out)
      return kvrt::nullArgument("cpu prefill");
    *out = nullptr;
    return withModel(forward, model, ForwardEntry::Prefill, [&](Model &m) {
      if (kvrt_status s =
              kvrt::checkPrefillArguments(m.config, tokens, n, pos, "prefill"))
        return s;
      Scratch scratch;
      std::vector<float> result;
      if (kvrt_status s =
              run(forward, m, view, tokens, n, pos, m.config.n_layers,
                  logitsFrom(n, rows, logits), &result, scratch))
        return s;
      if (kvrt_status s =
              kvrt::appendPrefilled(view, *scratch.pages, tokens, n, pos, label,
                                    out, kvrt::TailPacking::Pack))
        return s;
      if (logits)
        *logits = std::move(result);
      return KVRT_OK;
    });
  }

  kvrt_status layerKV(const Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    if (!model || !view || !k || !v)
      return kvrt::nullArgument("cpu layerKV");
    return withModel(forward, model, ForwardEntry::Prefill, [&](Model &m) {
      if (kvrt_status s =
              kvrt::checkPrefillArguments(m.config, tokens, n, pos, "layerKV"))
        return s;
      if (kvrt_status s = checkLayer("layerKV", layer, m.config))
        return s;
      // Layers 0 .. layer of a prefill into scratch pages, read back and
      // released: nothing is appended and the pool ends as it was.
      Scratch scratch;
      if (kvrt_status s = run(forward, m, view, tokens, n, pos, layer + 1,
                              /*logitsFrom=*/n, nullptr, scratch))
        return s;
      k->resize(n * kvDim(m.config));
      v->resize(n * kvDim(m.config));
      return kvrt_pool_read_kv(scratch.pool, scratch.pages->pages.data(), 0, n,
                               layer, k->data(), v->data());
    });
  }

  kvrt_status attention(const Forward &forward, const kvrt_model *model,
                        const kvrt_view *view, const float *q, int64_t n,
                        int64_t pos, int32_t layer,
                        std::vector<float> *out) override {
    if (!model || !view || (n > 0 && !q) || !out)
      return kvrt::nullArgument("cpu attention");
    return withModel(forward, model, ForwardEntry::Attention, [&](Model &m) {
      const kvrt_model_config &c = m.config;
      if (kvrt_status s = checkLayer("attention", layer, c))
        return s;
      if (n < 0 || pos < 0 || pos > KVRT_MAX_POSITION - n)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("attention: ", n, " queries at position ", pos,
                        " are outside [0, 2^53)"));
      kvrt_page_layout layout;
      if (kvrt_status s = poolLayout(forward, c, view, layout))
        return s;
      RunTable table;
      if (kvrt_status s = table.appendView(view))
        return s;
      std::vector<float> queries(q, q + n * c.dim);
      out->assign(n * c.dim, 0.0f);
      if (n == 0)
        return KVRT_OK;
      kvrt_attention_args args{};
      args.q = memrefF32(queries.data(), int64_t(queries.size()));
      args.kv = arena(layout);
      args.pages = table.pagesRef();
      args.runs = table.rowsRef();
      args.tiles = memrefTable(nullptr, 0, KVRT_TILE_WIDTH);
      args.part = memrefF32(nullptr, 0);
      args.out = memrefF32(out->data(), int64_t(out->size()));
      args.page_tokens = layout.page_tokens;
      args.pos = pos;
      args.n = n;
      args.layer = layer;
      forward.attention(&args);
      return KVRT_OK;
    });
  }

  kvrt_status materialize(const Forward &forward, const kvrt_model *model,
                          const kvrt_view *view, kvrt_view **out) override {
    if (!model || !view || !out)
      return kvrt::nullArgument("cpu materialize");
    *out = nullptr;
    return withModel(forward, model, ForwardEntry::Materialize, [&](Model &m) {
      kvrt_page_layout layout;
      if (kvrt_status s = poolLayout(forward, m.config, view, layout))
        return s;
      // The shifted runs go through the kernel, into new pages parallel to
      // their page lists; the others are shared as they are.
      kvrt::ShiftedRuns shifts;
      if (kvrt_status s = shifts.collect(view, kvrt::RewriteSlots::Same))
        return s;
      if (!shifts.pages().empty()) {
        RunTable shifted;
        for (const kvrt::ShiftedRuns::Shift &shift : shifts.shifts())
          shifted.append(shift.from.pages, shift.from.n_pages,
                         shift.from.slot_begin, shift.from.n_tokens,
                         shift.from.base_pos, shift.from.delta);
        kvrt_materialize_args args{};
        args.kv = arena(layout);
        args.pages = shifted.pagesRef();
        args.runs = shifted.rowsRef();
        args.dst_pages = memrefI32(const_cast<int32_t *>(shifts.pages().data()),
                                   int64_t(shifts.pages().size()));
        args.page_tokens = layout.page_tokens;
        forward.materialize(&args);
      }
      return shifts.rebuild(out);
    });
  }

private:
  /// The config and weights of `model`, with `forward` checked against it.
  static kvrt_status prepare(const Forward &forward, const kvrt_model *model,
                             ForwardEntry entry, Model &m) {
    m.model = model;
    if (kvrt_status s = kvrt_model_get_config(model, &m.config))
      return s;
    if (kvrt_status s = kvrt_model_get_weights(model, &m.weights))
      return s;
    if (kvrt_status s = checkForward(forward, model, entry))
      return s;
    // Every call then allocates its working memory (tables, activations).
    return kvrt::allocationFault(KVRT_FAULT_SCRATCH, "cpu backend");
  }

  /// `body(m)` with `m` prepared for `entry`, under kvrt::guard (no
  /// exception leaves a call).
  template <typename Body>
  static kvrt_status withModel(const Forward &forward, const kvrt_model *model,
                               ForwardEntry entry, Body body) {
    return kvrt::guard([&]() -> kvrt_status {
      Model m;
      if (kvrt_status s = prepare(forward, model, entry, m))
        return s;
      return body(m);
    });
  }

  /// Fails unless `layer` is one of the model's; messages start with `what`.
  static kvrt_status checkLayer(const char *what, int32_t layer,
                                const kvrt_model_config &c) {
    if (layer >= 0 && layer < c.n_layers)
      return KVRT_OK;
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str(what, ": layer ", layer, " is outside [0, ", c.n_layers, ")"));
  }

  /// The page layout of the pool of `view`, checked against `forward`.
  static kvrt_status poolLayout(const Forward &forward,
                                const kvrt_model_config &c,
                                const kvrt_view *view,
                                kvrt_page_layout &layout) {
    if (kvrt_status s = kvrt_pool_get_layout(kvrt_view_pool(view), &layout))
      return s;
    return checkForwardLayout(forward, c, layout);
  }

  /// The pool's whole page arena, as the forward's `kv` field.
  static kvrt_memref_kv arena(const kvrt_page_layout &layout) {
    return memrefKV(layout.base, layout.capacity_pages * layout.page_stride);
  }

  /// Runs layers 0 .. nLayers-1 of the forward of the tokens over `view`
  /// into fresh pages (returned in `scratch`, not sealed), and the logits of
  /// positions logitsFrom .. n-1 into `logits` when all layers run.
  static kvrt_status run(const Forward &forward, const Model &m,
                         const kvrt_view *view, const int32_t *tokens,
                         int64_t n, int64_t pos, int64_t nLayers,
                         int64_t logitsFrom, std::vector<float> *logits,
                         Scratch &scratch) {
    const kvrt_model_config &c = m.config;
    kvrt_pool *pool = kvrt_view_pool(view);
    kvrt_page_layout layout;
    if (kvrt_status s = poolLayout(forward, c, view, layout))
      return s;
    RunTable table;
    if (kvrt_status s = table.appendView(view))
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

    std::vector<float> x = embedTokens(c, m.weights, tokens, n);
    std::vector<float> result((n - logitsFrom) * int64_t(c.vocab_size));
    kvrt_prefill_args args{};
    args.x = memrefF32(x.data(), int64_t(x.size()));
    WeightTable weights = hostWeightTable(c, m.weights);
    weights.fill(args);
    // The layers' f32 matrices packed once per model, for every call of at
    // least kPackedMinRows rows from then on.
    const PackedWeights *packed =
        n >= kPackedMinRows ? packedWeights(*m.model, cpu::hostPanelWidth())
                            : nullptr;
    if (packed) {
      args.packed = memrefF32(packed->data.get(), packed->floats);
      args.packed_offsets =
          memrefI64(packed->offsets.data(), int64_t(packed->offsets.size()));
      args.panel_width = packed->width;
    } else {
      args.packed = memrefF32(nullptr, 0);
      args.packed_offsets = memrefI64(nullptr, 0);
    }
    // The Q8_0 matrices repacked once per model for decode steps, which
    // read them (a prefill reads the file's rows).
    if (const DecodeRows *rows = decodeRows(*m.model)) {
      args.decode_rows = memrefBytes(rows->data.get(), rows->bytes);
      args.decode_rows_offsets =
          memrefI64(rows->offsets.data(), int64_t(rows->offsets.size()));
    } else {
      args.decode_rows = memrefBytes(nullptr, 0);
      args.decode_rows_offsets = memrefI64(nullptr, 0);
    }
    args.kv = arena(layout);
    args.pages = table.pagesRef();
    args.runs = table.rowsRef();
    args.tiles = memrefTable(nullptr, 0, KVRT_TILE_WIDTH);
    // The CPU forward allocates its intermediate values itself.
    args.scratch = memrefF32(nullptr, 0);
    args.part = memrefF32(nullptr, 0);
    args.logits = memrefF32(result.data(), int64_t(result.size()));
    args.page_tokens = layout.page_tokens;
    args.pos = pos;
    args.n = n;
    args.n_layers = nLayers;
    args.logits_from = logitsFrom;
    forward.prefill(&args);
    if (logits)
      *logits = std::move(result);
    return KVRT_OK;
  }
};

} // namespace

/// A forward built for another width (kv-opt's vector-bits) sees
/// panel_width differ from its own and packs per call: a wrong guess costs
/// time, never results.
int64_t kvir::cpu::hostPanelWidth() {
  return __builtin_cpu_supports("avx512f") ? 64 : 16;
}

std::unique_ptr<ComputeBackend> kvir::cpu::createCpuBackend() {
  return std::make_unique<CpuBackend>();
}
