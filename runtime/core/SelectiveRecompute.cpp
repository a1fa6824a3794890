//===- SelectiveRecompute.cpp - Repair by K/V deviation ---------*- C++ -*-===//

#include "runtime/core/SelectiveRecompute.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

using kvrt::fail;
using kvrt::str;

namespace {

/// Owns one view reference.
struct ViewDeleter {
  void operator()(kvrt_view *v) const { kvrt_view_release(v); }
};
using ViewPtr = std::unique_ptr<kvrt_view, ViewDeleter>;

/// One candidate token: where it lives and how it behaves.
struct Candidate {
  int32_t token;
  int64_t storedPos, delta;
  /// Index of the run (in the [begin, end) slice) it belongs to.
  int64_t run;
};

kvrt_status sliceView(const kvrt_view *view, int64_t begin, int64_t end,
                      ViewPtr &out) {
  kvrt_view *v = nullptr;
  kvrt_status s = kvrt_view_slice(view, begin, end, &v);
  out.reset(v);
  return s;
}

/// `acc` followed by `piece`; `acc` is replaced.
kvrt_status append(ViewPtr &acc, const kvrt_view *piece) {
  if (kvrt_view_num_tokens(piece) == 0)
    return KVRT_OK;
  kvrt_view *v = nullptr;
  if (kvrt_status s = kvrt_view_concat(acc.get(), piece, &v))
    return s;
  acc.reset(v);
  return KVRT_OK;
}

/// `view` itself, with one more reference: nothing was chosen.
kvrt_status unchanged(const kvrt_view *view, kvrt_view **out) {
  kvrt_view_retain(const_cast<kvrt_view *>(view));
  *out = const_cast<kvrt_view *>(view);
  return KVRT_OK;
}

kvrt_status run(kvir::ComputeBackend &backend, const kvir::Forward &forward,
                const kvrt_model *model, const kvrt_view *view, int64_t begin,
                int64_t end, const kvir::RepairBudget &budget, kvrt_view **out,
                kvir::SelectiveRecomputeStats &stats) {
  int64_t length = kvrt_view_num_tokens(view);
  if (begin < 0 || begin > end || end > length)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("selective recompute: range [", begin, ", ", end,
                    ") is outside the view's ", length, " tokens"));
  bool byFraction = budget.selection == kvir::RepairSelection::Fraction;
  if (byFraction && !(budget.amount >= 0 && budget.amount <= 1))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("selective recompute: fraction ", budget.amount,
                    " is outside [0, 1]"));
  if (!byFraction && budget.selection != kvir::RepairSelection::Deviation)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("selective recompute: unknown selection ",
                    int32_t(budget.selection)));
  if (!byFraction && !(budget.amount > 0 && std::isfinite(budget.amount)))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("selective recompute: deviation threshold ", budget.amount,
                    " is not finite and > 0"));
  int64_t n = end - begin;
  stats.candidates = n;
  if (n == 0 ||
      (byFraction && kvir::selectiveRecomputeCount(budget.amount, n) == 0))
    return unchanged(view, out);

  ViewPtr prefix, range, suffix;
  if (kvrt_status s = sliceView(view, 0, begin, prefix))
    return s;
  if (kvrt_status s = sliceView(view, begin, end, range))
    return s;
  if (kvrt_status s = sliceView(view, end, length, suffix))
    return s;

  kvrt_page_layout layout;
  if (kvrt_status s = kvrt_pool_get_layout(kvrt_view_pool(view), &layout))
    return s;
  kvrt_model_config config;
  if (kvrt_status s = kvrt_model_get_config(model, &config))
    return s;
  int64_t headSize = layout.head_size, kvHeads = layout.n_kv_heads;
  if (config.n_kv_heads != kvHeads || config.dim / config.n_heads != headSize)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "selective recompute: the view's pool does not fit the model");

  // The candidates and the deviation of each, one layerKV call per run (a
  // run's positions are consecutive).
  int32_t scanLayer = kvir::selectiveRecomputeScanLayer(config.n_layers);
  std::vector<Candidate> candidates;
  std::vector<kvrt_run> runs(kvrt_view_num_runs(range.get()));
  std::vector<double> deviation;
  std::vector<float> k, v, storedK, storedV;
  for (int64_t r = 0; r < int64_t(runs.size()); ++r) {
    kvrt_run &run = runs[r];
    if (kvrt_status s = kvrt_view_get_run(range.get(), r, &run))
      return s;
    if (kvrt_status s = backend.layerKV(
            forward, model, prefix.get(), run.tokens, run.n_tokens,
            run.base_pos + run.delta, scanLayer, &k, &v))
      return s;
    stats.calls.push_back({begin, run.n_tokens, scanLayer + 1, true});
    storedK.resize(k.size());
    storedV.resize(v.size());
    if (kvrt_status s = kvrt_pool_read_kv(
            kvrt_view_pool(view), run.pages, run.slot_begin, run.n_tokens,
            scanLayer, storedK.data(), storedV.data()))
      return s;
    int64_t width = kvHeads * headSize;
    for (int64_t j = 0; j < run.n_tokens; ++j) {
      Candidate c;
      c.token = run.tokens[j];
      c.storedPos = run.base_pos + j;
      c.delta = run.delta;
      c.run = r;
      double sum = 0;
      for (int64_t i = j * width; i < (j + 1) * width; ++i) {
        double diff = double(v[i]) - double(storedV[i]);
        sum += diff * diff;
      }
      candidates.push_back(c);
      deviation.push_back(std::sqrt(sum));
      stats.relativeDeviation.push_back(kvir::relativeDeviation(
          v.data() + j * width, storedV.data() + j * width, width));
    }
  }
  for (double r : stats.relativeDeviation) {
    stats.maxRelativeDeviation = std::max(stats.maxRelativeDeviation, r);
    stats.meanRelativeDeviation += r / double(n);
  }

  std::vector<int64_t> order;
  if (byFraction) {
    // The `count` largest deviations; ties go to the earlier token.
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
    // The index breaks ties, which makes the order total (and std::sort as
    // deterministic as a stable sort).
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return deviation[a] > deviation[b] ||
             (deviation[a] == deviation[b] && a < b);
    });
    order.resize(kvir::selectiveRecomputeCount(budget.amount, n));
  } else {
    order = kvir::selectAboveThreshold(stats.relativeDeviation, budget.amount);
  }
  if (order.empty())
    return unchanged(view, out);
  std::sort(order.begin(), order.end());
  stats.maxDeviation = stats.minChosenDeviation = deviation[order.front()];
  for (int64_t i : order) {
    stats.chosen.push_back(begin + i);
    stats.maxDeviation = std::max(stats.maxDeviation, deviation[i]);
    stats.minChosenDeviation = std::min(stats.minChosenDeviation, deviation[i]);
  }

  // Rebuild [begin, end) in order over the prefix.
  ViewPtr acc = std::move(prefix);
  int64_t cursor = 0;
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < order.size();) {
    // A group: consecutive chosen tokens of one run.
    size_t j = i + 1;
    while (j < order.size() && order[j] == order[j - 1] + 1 &&
           candidates[order[j]].run == candidates[order[i]].run)
      ++j;
    int64_t first = order[i], last = order[j - 1];
    if (first > cursor) {
      ViewPtr reused;
      if (kvrt_status s = sliceView(range.get(), cursor, first, reused))
        return s;
      if (kvrt_status s = append(acc, reused.get()))
        return s;
    }
    tokens.clear();
    for (int64_t t = first; t <= last; ++t)
      tokens.push_back(candidates[t].token);
    const Candidate &head = candidates[first];
    kvrt_view *next = nullptr;
    int64_t context = kvrt_view_num_tokens(acc.get());
    if (kvrt_status s = backend.prefill(
            forward, model, acc.get(), tokens.data(), int64_t(tokens.size()),
            head.storedPos + head.delta, runs[head.run].label,
            kvir::LogitRows::last(), &logits, &next))
      return s;
    stats.calls.push_back(
        {context, int64_t(tokens.size()), config.n_layers, false});
    acc.reset(next);
    cursor = last + 1;
    i = j;
  }
  if (cursor < n) {
    ViewPtr reused;
    if (kvrt_status s = sliceView(range.get(), cursor, n, reused))
      return s;
    if (kvrt_status s = append(acc, reused.get()))
      return s;
  }
  if (kvrt_status s = append(acc, suffix.get()))
    return s;
  *out = acc.release();
  return KVRT_OK;
}

} // namespace

double kvir::relativeDeviation(const float *fresh, const float *stored,
                               int64_t n) {
  double diff2 = 0, fresh2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    double diff = double(fresh[i]) - double(stored[i]);
    diff2 += diff * diff;
    fresh2 += double(fresh[i]) * double(fresh[i]);
  }
  if (diff2 == 0)
    return 0;
  if (fresh2 == 0)
    return std::numeric_limits<double>::infinity();
  return std::sqrt(diff2 / fresh2);
}

std::vector<int64_t>
kvir::selectAboveThreshold(const std::vector<double> &relative,
                           double threshold) {
  std::vector<int64_t> chosen;
  for (size_t i = 0; i < relative.size(); ++i)
    if (relative[i] > threshold)
      chosen.push_back(int64_t(i));
  return chosen;
}

int32_t kvir::selectiveRecomputeScanLayer(int32_t nLayers) {
  return nLayers > 1 ? 1 : 0;
}

int64_t kvir::selectiveRecomputeCount(double fraction, int64_t n) {
  if (n <= 0 || !(fraction > 0))
    return 0;
  int64_t count = static_cast<int64_t>(std::ceil(fraction * n - 1e-9));
  return std::clamp<int64_t>(count, 0, n);
}

kvrt_status
kvir::selectiveRecompute(ComputeBackend &backend, const Forward &forward,
                         const kvrt_model *model, const kvrt_view *view,
                         int64_t begin, int64_t end, const RepairBudget &budget,
                         kvrt_view **out, SelectiveRecomputeStats *stats) {
  if (!model || !view || !out)
    return kvrt::nullArgument(__func__);
  *out = nullptr;
  SelectiveRecomputeStats local;
  kvrt_status status = kvrt::guard([&] {
    return run(backend, forward, model, view, begin, end, budget, out, local);
  });
  if (stats)
    *stats = std::move(local);
  return status;
}
