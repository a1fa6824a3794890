//===- Reference.cpp - The reference forward (test oracle) ------*- C++ -*-===//

#include "runtime/reference/Reference.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelTensors.h"
#include "runtime/core/Support.h"
#include "runtime/core/ViewRebuild.h"

#include <cmath>
#include <limits>

using namespace kvir::reference;
using kvir::ropePair;
using kvrt::fail;
using kvrt::str;

namespace {

/// Where keys and values live: the pool layout and the runs to attend.
struct KVSpan {
  kvrt_page_layout layout;
  std::vector<kvrt_run> runs;

  /// The arena index of the K (kind 0) or V (kind 1) vector of token `j` of
  /// `run`.
  int64_t index(const kvrt_run &run, int64_t j, int32_t layer, int32_t kvHead,
                int kind) const {
    int64_t slot = run.slot_begin + j;
    int64_t page = run.pages[slot / layout.page_tokens];
    return page * layout.page_stride + layer * layout.layer_stride +
           kvHead * layout.head_stride + kind * layout.kv_stride +
           (slot % layout.page_tokens) * layout.token_stride;
  }

  /// Reads that vector into `out` (head_size values), converted to f32.
  void load(const kvrt_run &run, int64_t j, int32_t layer, int32_t kvHead,
            int kind, float *out) const {
    int64_t at = index(run, j, layer, kvHead, kind);
    for (int32_t d = 0; d < layout.head_size; ++d)
      out[d] = kvrt::loadElement(layout.base, at + d, layout.dtype);
  }

  /// Writes `in` (head_size values) as that vector, rounded to f32 and then
  /// to the pages' element type (as the generated forward stores them).
  template <typename T>
  void store(const kvrt_run &run, int64_t j, int32_t layer, int32_t kvHead,
             int kind, const T *in) const {
    int64_t at = index(run, j, layer, kvHead, kind);
    for (int32_t d = 0; d < layout.head_size; ++d)
      kvrt::storeElement(layout.base, at + d, layout.dtype,
                         static_cast<float>(in[d]));
  }
};

/// The running state of a softmax-weighted sum: max score, sum of
/// exp(score - max), and the sum of exp(score - max) * v.
struct Softmax {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  std::vector<double> acc;

  explicit Softmax(int32_t headSize) : acc(headSize, 0.0) {}

  /// Adds one key's score and value (online softmax).
  void add(double score, const float *v) {
    if (score > max) {
      rescale(std::exp(max - score));
      max = score;
    }
    double w = std::exp(score - max);
    sum += w;
    for (size_t d = 0; d < acc.size(); ++d)
      acc[d] += w * v[d];
  }

  /// Merges another partial softmax by log-sum-exp.
  void merge(const Softmax &other) {
    if (other.sum == 0)
      return;
    if (other.max > max) {
      rescale(std::exp(max - other.max));
      max = other.max;
    }
    double w = std::exp(other.max - max);
    sum += w * other.sum;
    for (size_t d = 0; d < acc.size(); ++d)
      acc[d] += w * other.acc[d];
  }

  /// The normalised result, zeros when nothing was added.
  void finish(double *out) const {
    for (size_t d = 0; d < acc.size(); ++d)
      out[d] = sum > 0 ? acc[d] / sum : 0.0;
  }

private:
  void rescale(double factor) {
    if (sum == 0)
      return;
    sum *= factor;
    for (double &a : acc)
      a *= factor;
  }
};

double dot(const double *a, const float *b, int32_t n) {
  double s = 0;
  for (int32_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

/// out[rows] = w[rows][cols] * x[cols].
void matvec(const float *w, const double *x, int64_t rows, int64_t cols,
            double *out) {
  for (int64_t r = 0; r < rows; ++r)
    out[r] = dot(x, w + r * cols, static_cast<int32_t>(cols));
}

/// x += b.
void addBias(double *x, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    x[i] += b[i];
}

/// out = x / sqrt(mean(x^2) + eps) * w.
void rmsnorm(const double *x, const float *w, int32_t n, double eps,
             double *out) {
  double ss = 0;
  for (int32_t i = 0; i < n; ++i)
    ss += x[i] * x[i];
  double scale = 1.0 / std::sqrt(ss / n + eps);
  for (int32_t i = 0; i < n; ++i)
    out[i] = x[i] * scale * w[i];
}

/// Attention of every query head over `span`, fused or materialized.
void attendSpan(const kvrt_model_config &c, const KVSpan &span, int32_t layer,
                const double *q, int64_t m, ShiftMode mode, double *out) {
  int32_t headSize = c.dim / c.n_heads;
  int32_t group = c.n_heads / c.n_kv_heads;
  double invSqrt = 1.0 / std::sqrt(static_cast<double>(headSize));
  std::vector<double> qRot(headSize), kRot(headSize);
  std::vector<float> kBuf(headSize), vBuf(headSize);
  float *k = kBuf.data(), *v = vBuf.data();
  for (int32_t h = 0; h < c.n_heads; ++h) {
    int32_t kvHead = h / group;
    const double *qh = q + int64_t(h) * headSize;
    Softmax total(headSize);
    if (mode == ShiftMode::Materialized) {
      qRot.assign(qh, qh + headSize);
      applyRope(qRot.data(), c, m);
    }
    for (const kvrt_run &run : span.runs) {
      if (mode == ShiftMode::Fused) {
        // (R(m) q) . (R(delta) k) = (R(m - delta) q) . k
        qRot.assign(qh, qh + headSize);
        applyRope(qRot.data(), c, m - run.delta);
      }
      Softmax partial(headSize);
      for (int64_t j = 0; j < run.n_tokens; ++j) {
        if (run.base_pos + j + run.delta > m)
          continue;
        span.load(run, j, layer, kvHead, 0, k);
        span.load(run, j, layer, kvHead, 1, v);
        if (mode == ShiftMode::Fused) {
          partial.add(dot(qRot.data(), k, headSize) * invSqrt, v);
          continue;
        }
        for (int32_t d = 0; d < headSize; ++d)
          kRot[d] = k[d];
        applyRope(kRot.data(), c, run.delta);
        double score = 0;
        for (int32_t d = 0; d < headSize; ++d)
          score += qRot[d] * kRot[d];
        total.add(score * invSqrt, v);
      }
      total.merge(partial);
    }
    total.finish(out + int64_t(h) * headSize);
  }
}

/// Collects the runs and layout of `view`, checking they fit the model.
kvrt_status spanOf(const kvrt_model_config &c, const kvrt_view *view,
                   KVSpan &span) {
  if (kvrt_status s = kvrt_pool_get_layout(kvrt_view_pool(view), &span.layout))
    return s;
  const kvrt_page_layout &l = span.layout;
  if (l.n_layers != c.n_layers || l.n_kv_heads != c.n_kv_heads ||
      l.head_size != c.dim / c.n_heads)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("the view's pool holds ", l.n_layers, " layers x ",
                    l.n_kv_heads, " kv heads x head size ", l.head_size,
                    ", the model needs ", c.n_layers, " x ", c.n_kv_heads,
                    " x ", c.dim / c.n_heads));
  span.runs.resize(kvrt_view_num_runs(view));
  for (size_t r = 0; r < span.runs.size(); ++r)
    if (kvrt_status s = kvrt_view_get_run(view, r, &span.runs[r]))
      return s;
  return KVRT_OK;
}

/// The oracle's view of a model's weights: every tensor of
/// ModelTensors.def as f32, its slices back to back (NULL where the model
/// does not have it). Weights of other formats are dequantised exactly
/// (Quant.h), once per model (kvrt::f32Weights keeps the copy).
struct Weights {
#define KVRT_MODEL_TENSOR(field, ...) const float *field = nullptr;
#include "runtime/core/ModelTensors.def"
};

Weights viewOf(const kvrt_model &model) {
  const float *p = kvrt::f32Weights(model).data();
  std::array<const float *, kvrt::kNumTensors> at{};
  for (const kvrt::TensorSpec &spec : kvrt::specsOf(model.config)) {
    at[size_t(spec.decl->id)] = p;
    p += spec.count;
  }
  for (const kvrt::TensorDecl &t : kvrt::kTensors)
    if (!at[size_t(t.id)] && t.absent != kvrt::TensorId::none)
      at[size_t(t.id)] = at[size_t(t.absent)];
  Weights view;
#define KVRT_MODEL_TENSOR(field, ...)                                          \
  view.field = at[size_t(kvrt::TensorId::field)];
#include "runtime/core/ModelTensors.def"
  return view;
}

/// The forward pass proper; `span` already holds the new run, whose pages
/// receive the new K/V.
void forward(const kvrt_model_config &c, const Weights &w, KVSpan &span,
             const int32_t *tokens, int64_t n, int64_t pos, int64_t logitsFrom,
             std::vector<float> *logits, int32_t layers = -1) {
  const kvrt_run &newRun = span.runs.back();
  int64_t dim = c.dim, hidden = c.hidden_dim, headSize = c.dim / c.n_heads;
  int64_t kvDim = headSize * c.n_kv_heads;
  std::vector<double> x(n * dim), q(n * dim), xb(dim), att(dim), proj(dim);
  std::vector<double> k(kvDim), v(kvDim), h1(hidden), h3(hidden);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i)
      x[t * dim + i] = w.token_embedding[int64_t(tokens[t]) * dim + i];

  // A partial forward (layers < n_layers) only fills the pages of the first
  // layers: it computes no logits.
  if (layers < 0)
    layers = c.n_layers;
  for (int32_t l = 0; l < layers; ++l) {
    const float *wq = w.wq + l * dim * dim, *wk = w.wk + l * kvDim * dim;
    const float *wv = w.wv + l * kvDim * dim, *wo = w.wo + l * dim * dim;
    // Projections of every new token; K is rotated and stored, Q kept raw.
    for (int64_t t = 0; t < n; ++t) {
      rmsnorm(&x[t * dim], w.rms_att + l * dim, c.dim, c.rms_eps, xb.data());
      matvec(wq, xb.data(), dim, dim, &q[t * dim]);
      matvec(wk, xb.data(), kvDim, dim, k.data());
      matvec(wv, xb.data(), kvDim, dim, v.data());
      if (c.qkv_bias) {
        addBias(&q[t * dim], w.bq + l * dim, dim);
        addBias(k.data(), w.bk + l * kvDim, kvDim);
        addBias(v.data(), w.bv + l * kvDim, kvDim);
      }
      for (int32_t g = 0; g < c.n_kv_heads; ++g) {
        double *kh = &k[g * headSize];
        applyRope(kh, c, pos + t);
        span.store(newRun, t, l, g, 0, kh);
        span.store(newRun, t, l, g, 1, &v[g * headSize]);
      }
    }
    // Attention and FFN of every new token.
    for (int64_t t = 0; t < n; ++t) {
      double *xt = &x[t * dim];
      attendSpan(c, span, l, &q[t * dim], pos + t, ShiftMode::Fused,
                 att.data());
      matvec(wo, att.data(), dim, dim, proj.data());
      for (int64_t i = 0; i < dim; ++i)
        xt[i] += proj[i];
      rmsnorm(xt, w.rms_ffn + l * dim, c.dim, c.rms_eps, xb.data());
      matvec(w.w1 + l * hidden * dim, xb.data(), hidden, dim, h1.data());
      matvec(w.w3 + l * hidden * dim, xb.data(), hidden, dim, h3.data());
      for (int64_t i = 0; i < hidden; ++i)
        h1[i] = h1[i] / (1.0 + std::exp(-h1[i])) * h3[i];
      matvec(w.w2 + l * dim * hidden, h1.data(), dim, hidden, proj.data());
      for (int64_t i = 0; i < dim; ++i)
        xt[i] += proj[i];
    }
  }

  if (layers < c.n_layers || !logits)
    return;
  std::vector<double> row(c.vocab_size);
  logits->resize((n - logitsFrom) * c.vocab_size);
  for (int64_t t = logitsFrom; t < n; ++t) {
    rmsnorm(&x[t * dim], w.rms_final, c.dim, c.rms_eps, xb.data());
    matvec(w.wcls, xb.data(), c.vocab_size, dim, row.data());
    for (int32_t i = 0; i < c.vocab_size; ++i)
      (*logits)[(t - logitsFrom) * c.vocab_size + i] =
          static_cast<float>(row[i]);
  }
}

/// Reads the model, checks the token arguments, and collects the view's runs.
kvrt_status prepare(const kvrt_model *model, const kvrt_view *view,
                    const int32_t *tokens, int64_t n, int64_t pos,
                    kvrt_model_config &c, Weights &w, KVSpan &span) {
  if (kvrt_status s = kvrt_model_get_config(model, &c))
    return s;
  w = viewOf(*model);
  if (kvrt_status s = kvrt::checkPrefillArguments(c, tokens, n, pos, "prefill"))
    return s;
  return spanOf(c, view, span);
}

kvrt_status prefillImpl(const kvrt_model *model, const kvrt_view *view,
                        const int32_t *tokens, int64_t n, int64_t pos,
                        const char *label, int64_t logitsFrom,
                        std::vector<float> *logits, kvrt_view **out) {
  kvrt_model_config c;
  Weights w;
  KVSpan span;
  if (kvrt_status s = prepare(model, view, tokens, n, pos, c, w, span))
    return s;

  // All pages are taken before any work, so exhaustion changes nothing. The
  // new view takes its own references; ours go when `held` does.
  kvrt_pool *pool = kvrt_view_pool(view);
  int64_t nPages = (n + span.layout.page_tokens - 1) / span.layout.page_tokens;
  std::vector<int32_t> pages(nPages);
  if (kvrt_status s = kvrt_pool_alloc_pages(pool, nPages, pages.data()))
    return s;
  kvrt::PageRefs held{pool, pages};
  kvrt_run run{pages.data(), nPages, 0, n, pos, 0, tokens, label};
  span.runs.push_back(run);
  forward(c, w, span, tokens, n, pos, logitsFrom, logits);
  for (int32_t page : pages)
    if (kvrt_status s = kvrt_pool_seal_page(pool, page))
      return s;
  return kvrt_view_append(view, &run, out);
}

} // namespace

void kvir::reference::applyRope(double *x, const kvrt_model_config &c,
                                int64_t pos) {
  int32_t headSize = kvir::headSize(c), dims = kvir::ropeDims(c);
  // Only the rotary pairs: the others have frequency 0 (the identity).
  for (int32_t i = 0; 2 * i < dims; ++i) {
    double angle = static_cast<double>(pos) * kvir::ropeFrequency(c, i);
    double cs = std::cos(angle), sn = std::sin(angle);
    auto [a, b] = ropePair(c.rope_layout, headSize, dims, i);
    double xa = x[a], xb = x[b];
    x[a] = xa * cs - xb * sn;
    x[b] = xa * sn + xb * cs;
  }
}

void kvir::reference::applyRope(double *x, int32_t headSize, int64_t pos,
                                kvrt_rope_layout layout, double theta) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = headSize;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.rope_layout = layout;
  c.rope_theta = theta;
  applyRope(x, c, pos);
}

kvrt_status kvir::reference::attention(const kvrt_model_config &config,
                                       const kvrt_view *view, int32_t layer,
                                       const double *q, int64_t m,
                                       ShiftMode mode, double *out) {
  if (!view || !q || !out)
    return kvrt::nullArgument(__func__);
  if (kvrt_status s = kvrt_model_config_validate(&config))
    return s;
  if (layer < 0 || layer >= config.n_layers)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("attention: layer ", layer, " is outside [0, ",
                    config.n_layers, ")"));
  return kvrt::guard([&] {
    KVSpan span;
    if (kvrt_status s = spanOf(config, view, span))
      return s;
    attendSpan(config, span, layer, q, m, mode, out);
    return KVRT_OK;
  });
}

kvrt_status kvir::reference::prefill(const kvrt_model *model,
                                     const kvrt_view *view,
                                     const int32_t *tokens, int64_t n,
                                     int64_t pos, const char *label,
                                     std::vector<float> *logits,
                                     kvrt_view **out, int64_t logitsFrom) {
  if (!model || !view || !out)
    return kvrt::nullArgument(__func__);
  *out = nullptr;
  return kvrt::guard([&] {
    return prefillImpl(model, view, tokens, n, pos, label, logitsFrom, logits,
                       out);
  });
}

kvrt_status kvir::reference::layerKV(const kvrt_model *model,
                                     const kvrt_view *view,
                                     const int32_t *tokens, int64_t n,
                                     int64_t pos, int32_t layer,
                                     std::vector<float> *k,
                                     std::vector<float> *v) {
  if (!model || !view || !k || !v)
    return kvrt::nullArgument(__func__);
  return kvrt::guard([&]() -> kvrt_status {
    kvrt_model_config c;
    Weights w;
    KVSpan span;
    if (kvrt_status s = prepare(model, view, tokens, n, pos, c, w, span))
      return s;
    if (layer < 0 || layer >= c.n_layers)
      return fail(
          KVRT_ERR_INVALID_ARGUMENT,
          str("layerKV: layer ", layer, " is outside [0, ", c.n_layers, ")"));
    // Layers 0 .. layer of a prefill into scratch pages, read back and
    // released: nothing is appended and the pool ends as it was.
    kvrt_pool *pool = kvrt_view_pool(view);
    int64_t nPages =
        (n + span.layout.page_tokens - 1) / span.layout.page_tokens;
    std::vector<int32_t> pages(nPages);
    if (kvrt_status s = kvrt_pool_alloc_pages(pool, nPages, pages.data()))
      return s;
    kvrt::PageRefs held{pool, pages};
    span.runs.push_back({pages.data(), nPages, 0, n, pos, 0, tokens, nullptr});
    forward(c, w, span, tokens, n, pos, /*logitsFrom=*/n, nullptr, layer + 1);
    int64_t kvDim = int64_t(c.n_kv_heads) * (c.dim / c.n_heads);
    k->resize(n * kvDim);
    v->resize(n * kvDim);
    return kvrt_pool_read_kv(pool, pages.data(), 0, n, layer, k->data(),
                             v->data());
  });
}

kvrt_status kvir::reference::materialize(const kvrt_model *model,
                                         const kvrt_view *view,
                                         kvrt_view **out) {
  if (!model || !view || !out)
    return kvrt::nullArgument(__func__);
  *out = nullptr;
  return kvrt::guard([&]() -> kvrt_status {
    kvrt_model_config c;
    if (kvrt_status s = kvrt_model_get_config(model, &c))
      return s;
    KVSpan span;
    if (kvrt_status s = spanOf(c, view, span))
      return s;
    const kvrt_page_layout &l = span.layout;
    kvrt::ShiftedRuns shifts;
    if (kvrt_status s = shifts.collect(view, kvrt::RewriteSlots::Packed))
      return s;
    std::vector<double> key(l.head_size);
    std::vector<float> k(l.head_size), v(l.head_size);
    for (const kvrt::ShiftedRuns::Shift &shift : shifts.shifts())
      for (int64_t j = 0; j < shift.from.n_tokens; ++j)
        for (int32_t layer = 0; layer < l.n_layers; ++layer)
          for (int32_t h = 0; h < l.n_kv_heads; ++h) {
            span.load(shift.from, j, layer, h, 0, k.data());
            span.load(shift.from, j, layer, h, 1, v.data());
            for (int32_t d = 0; d < l.head_size; ++d)
              key[d] = k[d];
            applyRope(key.data(), c, shift.from.delta);
            span.store(shift.to, j, layer, h, 0, key.data());
            span.store(shift.to, j, layer, h, 1, v.data());
          }
    return shifts.rebuild(out);
  });
}
