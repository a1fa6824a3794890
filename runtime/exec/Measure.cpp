//===- Measure.cpp - What runners measure beyond a run ----------*- C++ -*-===//

#include "runtime/exec/Measure.h"
#include "runtime/core/ModelCost.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

using namespace kvir;
using namespace kvir::exec;
using kvrt::str;

std::vector<int32_t> kvir::exec::viewTokens(const kvrt_view *view) {
  std::vector<int32_t> tokens;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) == KVRT_OK)
      tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
  }
  return tokens;
}

bool kvir::exec::hasContiguousPositions(const kvrt_view *view) {
  int64_t next = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) != KVRT_OK ||
        run.base_pos + run.delta != next)
      return false;
    next += run.n_tokens;
  }
  return true;
}

int64_t kvir::exec::endPosition(const kvrt_view *view) {
  int64_t n = kvrt_view_num_runs(view);
  kvrt_run run;
  if (n == 0 || kvrt_view_get_run(view, n - 1, &run) != KVRT_OK)
    return 0;
  return run.base_pos + run.delta + run.n_tokens;
}

bool kvir::exec::fullPrefill(ComputeBackend &backend, const Forward &forward,
                             const kvrt_model *model, kvrt_pool *pool,
                             const std::vector<int32_t> &tokens, int64_t rows,
                             Logits &out, WorkStats &work, std::string &error) {
  int64_t n = tokens.size();
  if (n == 0 || rows < 1 || rows > n) {
    error = str("full prefill needs 1 <= rows <= tokens (", rows, " rows of ",
                n, " tokens)");
    return false;
  }
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  ModelCost cost = costOnPool(config, pool);
  auto start = std::chrono::steady_clock::now();
  kvrt_view *empty = nullptr;
  if (kvrt_view_create(pool, &empty)) {
    error = kvrt_last_error();
    return false;
  }
  ViewRef view = adoptView(empty);
  out = Logits();
  out.vocab = config.vocab_size;
  int64_t head = n - rows;
  std::vector<float> scratch;
  if (head > 0) {
    kvrt_view *next = nullptr;
    if (backend.prefill(forward, model, view.get(), tokens.data(), head, 0,
                        nullptr, LogitRows::last(), &scratch, &next)) {
      error = str("full prefill: ", kvrt_last_error());
      return false;
    }
    view = adoptView(next);
    ++work.prefillCalls;
    work.logitsRows += 1;
    work.flops += cost.prefillFlops(0, head, 0);
  }
  out.context = view;
  kvrt_view *next = nullptr;
  if (backend.prefill(
          forward, model, view.get(), tokens.data() + head, rows, head, nullptr,
          rows == 1 ? LogitRows::last() : LogitRows::all(), &out.data, &next)) {
    error = str("full prefill: ", kvrt_last_error());
    return false;
  }
  out.result = adoptView(next);
  out.rows = rows;
  out.tokens.assign(tokens.begin() + head, tokens.end());
  out.position = head;
  out.lastOnly = rows == 1;
  ++work.prefillCalls;
  work.prefillTokens += n;
  // Like with like: the logits of the compared rows only (the head's one
  // extra row is not counted).
  work.logitsRows += rows;
  work.flops += cost.prefillFlops(head, rows, rows);
  work.kvBytesWritten += cost.kvBytes(n);
  work.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return true;
}

bool kvir::exec::greedyContinue(ComputeBackend &backend, const Forward &forward,
                                const kvrt_model *model, const Logits &logits,
                                ViewRef cache, int64_t n,
                                std::vector<int32_t> &out, std::string &error) {
  out.clear();
  if (logits.rows == 0) {
    error = "no logits to continue from";
    return false;
  }
  std::vector<float> row(logits.data.end() - logits.vocab, logits.data.end());
  int64_t position = endPosition(cache.get());
  for (int64_t i = 0; i < n; ++i) {
    int32_t next =
        int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(next);
    if (i + 1 == n)
      break;
    kvrt_view *view = nullptr;
    if (backend.prefill(forward, model, cache.get(), &next, 1, position,
                        nullptr, LogitRows::last(), &row, &view)) {
      error = str("greedy continuation: ", kvrt_last_error());
      return false;
    }
    cache = adoptView(view);
    ++position;
  }
  return true;
}

Fidelity kvir::exec::compareLogits(const float *approx, const float *full,
                                   int64_t rows, int64_t vocab) {
  Fidelity f;
  f.rows = rows;
  if (rows == 0)
    return f;
  f.cosineMin = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float *a = approx + r * vocab, *b = full + r * vocab;
    double dot = 0, na = 0, nb = 0, maxA = -INFINITY, maxB = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) {
      dot += double(a[i]) * b[i];
      na += double(a[i]) * a[i];
      nb += double(b[i]) * b[i];
      maxA = std::max(maxA, double(a[i]));
      maxB = std::max(maxB, double(b[i]));
      f.maxAbsDiff = std::max(f.maxAbsDiff, std::fabs(double(a[i]) - b[i]));
    }
    double cosine = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
    f.cosineMin = std::min(f.cosineMin, cosine);
    f.cosineMean += cosine / rows;
    // log-softmax of both, then KL(full || approx).
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      sa += std::exp(a[i] - maxA);
      sb += std::exp(b[i] - maxB);
    }
    double lseA = maxA + std::log(sa), lseB = maxB + std::log(sb), kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      double lb = b[i] - lseB, la = a[i] - lseA;
      kl += std::exp(lb) * (lb - la);
    }
    kl = std::max(kl, 0.0);
    f.klMean += kl / rows;
    f.klMax = std::max(f.klMax, kl);
    if (std::max_element(a, a + vocab) - a ==
        std::max_element(b, b + vocab) - b)
      ++f.top1Agree;
  }
  return f;
}

std::vector<int32_t> kvir::exec::topK(const float *row, int64_t vocab,
                                      int64_t k) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) {
                      return row[a] > row[b] || (row[a] == row[b] && a < b);
                    });
  order.resize(k);
  return order;
}
