//===- Attribution.cpp - Which segments' K/V drive an edited answer -------===//

#include "runtime/exec/Attribution.h"
#include "runtime/core/ModelCost.h"
#include "runtime/core/Support.h"

#include <chrono>
#include <cmath>

using namespace kvir;
using namespace kvir::exec;
using kvrt::str;

namespace {

/// A segment of the old cache: consecutive runs with one label.
struct Piece {
  std::string label;
  int64_t begin = 0, end = 0;
};

/// The segments of `view` in order; false with `error` for an unlabelled
/// run or a segment whose runs are not contiguous.
bool piecesOf(const kvrt_view *view, std::vector<Piece> &pieces,
              std::string &error) {
  int64_t at = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run)) {
      error = kvrt_last_error();
      return false;
    }
    if (!run.label) {
      error = str("run ", r, " of the old cache (tokens ", at, "..",
                  at + run.n_tokens, ") has no segment label");
      return false;
    }
    if (pieces.empty() || pieces.back().label != run.label) {
      for (const Piece &p : pieces)
        if (p.label == run.label) {
          error = str("segment @", p.label,
                      " is split in the old cache (its runs are not "
                      "contiguous)");
          return false;
        }
      pieces.push_back({run.label, at, at});
    }
    at += run.n_tokens;
    pieces.back().end = at;
  }
  return true;
}

/// The index of the piece labelled `name`, or -1.
int64_t find(const std::vector<Piece> &pieces, const std::string &name) {
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces[i].label == name)
      return int64_t(i);
  return -1;
}

/// Runs view operations, turning failures into `error`.
struct Views {
  std::string &error;

  ViewRef slice(const ViewRef &view, int64_t begin, int64_t end) {
    kvrt_view *out = nullptr;
    if (kvrt_view_slice(view.get(), begin, end, &out))
      return failed();
    return adoptView(out);
  }
  ViewRef shift(const ViewRef &view, int64_t delta) {
    if (!view || delta == 0)
      return view;
    kvrt_view *out = nullptr;
    if (kvrt_view_shift(view.get(), delta, &out))
      return failed();
    return adoptView(out);
  }
  ViewRef concat(const ViewRef &a, const ViewRef &b) {
    kvrt_view *out = nullptr;
    if (!a || !b || kvrt_view_concat(a.get(), b.get(), &out))
      return failed();
    return adoptView(out);
  }
  ViewRef failed() {
    if (error.empty())
      error = str("attribution: ", kvrt_last_error());
    return nullptr;
  }
};

} // namespace

double kvir::exec::l2Distance(const float *a, const float *b, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    sum += d * d;
  }
  return std::sqrt(sum);
}

bool kvir::exec::recoveredFractions(
    const std::vector<float> &zNew, const std::vector<float> &zOld,
    const std::vector<std::vector<float>> &zPatched,
    std::vector<double> &recovered, double &oldDistance, std::string &error) {
  recovered.clear();
  size_t n = zNew.size();
  if (zOld.size() != n) {
    error = str("attribution: z_old has ", zOld.size(), " logits, z_new ", n);
    return false;
  }
  std::vector<float> zero(n, 0.0f);
  double newNorm = l2Distance(zNew.data(), zero.data(), n);
  oldDistance = l2Distance(zOld.data(), zNew.data(), n);
  if (!(oldDistance > kAttributionMinChange * newNorm) ||
      !std::isfinite(oldDistance)) {
    error = str("the edit does not change the answer's logits (|z_old - "
                "z_new| = ",
                oldDistance, ", |z_new| = ", newNorm,
                "): there is nothing to attribute");
    return false;
  }
  for (const std::vector<float> &z : zPatched) {
    if (z.size() != n) {
      error = str("attribution: a patched answer has ", z.size(),
                  " logits, z_new ", n);
      return false;
    }
    recovered.push_back(1.0 -
                        l2Distance(z.data(), zNew.data(), n) / oldDistance);
  }
  return true;
}

bool kvir::exec::attribute(ComputeBackend &backend, const Forward &forward,
                           const kvrt_model *model, kvrt_pool *pool,
                           const AttributionRequest &request, Attribution &out,
                           std::string &error) {
  out = Attribution();
  out.edited = request.edited;
  out.answer = request.answer;
  const kvrt_view *old = request.oldCache.get();
  if (!old) {
    error = "attribution: no old cache";
    return false;
  }
  std::vector<Piece> pieces;
  if (!piecesOf(old, pieces, error))
    return false;
  int64_t e = find(pieces, request.edited), a = find(pieces, request.answer);
  if (e < 0 || a < 0) {
    error = str("the old cache holds no tokens of segment @",
                e < 0 ? request.edited : request.answer);
    return false;
  }
  if (e == a) {
    error = str("the edited segment @", request.edited,
                " is the answer: there is no answer to compare");
    return false;
  }
  if (e > a) {
    error =
        str("the edited segment @", request.edited, " comes after the answer @",
            request.answer, ": the answer cannot depend on it");
    return false;
  }
  Views views{error};
  ViewRef oldRef = request.oldCache;
  const Piece &edited = pieces[e], &answer = pieces[a];
  ViewRef upToAnswer = views.slice(oldRef, 0, answer.end);
  if (!upToAnswer)
    return false;
  if (!hasContiguousPositions(upToAnswer.get())) {
    error = "attribution needs the old context at positions 0..n-1 (its "
            "runs sit at other positions, e.g. a block composed at a gap)";
    return false;
  }
  std::vector<int32_t> oldTokens = viewTokens(old);
  auto at = [&](int64_t begin, int64_t end) {
    return std::vector<int32_t>(oldTokens.begin() + begin,
                                oldTokens.begin() + end);
  };
  if (at(edited.begin, edited.end) == request.newTokens) {
    error = str("the edit gives @", request.edited,
                " the tokens it had: there is nothing to attribute");
    return false;
  }
  int64_t delta =
      int64_t(request.newTokens.size()) - (edited.end - edited.begin);
  std::vector<int32_t> answerTokens = at(answer.begin, answer.end);
  std::vector<int32_t> context = at(0, edited.begin);
  context.insert(context.end(), request.newTokens.begin(),
                 request.newTokens.end());
  std::vector<int32_t> between = at(edited.end, answer.begin);
  context.insert(context.end(), between.begin(), between.end());
  int64_t head = int64_t(context.size()), rows = int64_t(answerTokens.size());
  context.insert(context.end(), answerTokens.begin(), answerTokens.end());
  out.answerRows = rows;
  out.oldTokens = edited.end - edited.begin;
  out.newTokens = int64_t(request.newTokens.size());
  out.contextTokens = int64_t(context.size());

  // z_new, and the K/V of the edited context (the view the answer attended).
  Logits full;
  if (!fullPrefill(backend, forward, model, pool, context, rows, full, out.work,
                   error))
    return false;
  ViewRef fresh = full.context;

  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  ModelCost cost = costOnPool(config, pool);
  // The answer recomputed over `view`, at its position in the edited context.
  auto answerOver = [&](const ViewRef &view, std::vector<float> &logits) {
    auto start = std::chrono::steady_clock::now();
    kvrt_view *result = nullptr;
    if (backend.prefill(forward, model, view.get(), answerTokens.data(), rows,
                        head, nullptr, LogitRows::all(), &logits, &result)) {
      error = str("attribution: ", kvrt_last_error());
      return false;
    }
    kvrt_view_release(result);
    ++out.work.prefillCalls;
    out.work.prefillTokens += rows;
    out.work.logitsRows += rows;
    out.work.flops +=
        cost.prefillFlops(kvrt_view_num_tokens(view.get()), rows, rows);
    out.work.kvBytesWritten += cost.kvBytes(rows);
    out.work.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return true;
  };
  // The old context before the answer, segments after the edited one shifted
  // by Δ, and segment `patched` (-1: none) taken from the edited context.
  auto patchedView = [&](int64_t patched) -> ViewRef {
    kvrt_view *empty = nullptr;
    if (kvrt_view_create(pool, &empty))
      return views.failed();
    ViewRef view = adoptView(empty);
    for (int64_t i = 0; i < a && view; ++i) {
      const Piece &p = pieces[i];
      int64_t shift = i > e ? delta : 0;
      ViewRef piece =
          i != patched
              ? views.shift(views.slice(oldRef, p.begin, p.end), shift)
              : views.slice(fresh, p.begin + shift,
                            i == e ? p.begin + out.newTokens : p.end + shift);
      view = piece ? views.concat(view, piece) : nullptr;
    }
    return view;
  };

  std::vector<float> zOld;
  ViewRef oldView = patchedView(-1);
  if (!oldView || !answerOver(oldView, zOld))
    return false;
  std::vector<std::vector<float>> zPatched(a);
  for (int64_t i = 0; i < a; ++i) {
    ViewRef view = patchedView(i);
    if (!view || !answerOver(view, zPatched[i]))
      return false;
  }
  std::vector<double> recovered;
  if (!recoveredFractions(full.data, zOld, zPatched, recovered, out.oldDistance,
                          error))
    return false;
  std::vector<float> zero(full.data.size(), 0.0f);
  out.newNorm = l2Distance(full.data.data(), zero.data(), zero.size());
  for (int64_t i = 0; i < a; ++i) {
    SegmentAttribution row;
    row.segment = pieces[i].label;
    for (const SegmentInfo &info : request.segments)
      if (info.name == row.segment)
        row.kind = info.kind;
    row.edited = i == e;
    row.tokens = row.edited ? out.newTokens : pieces[i].end - pieces[i].begin;
    row.distance =
        l2Distance(zPatched[i].data(), full.data.data(), full.data.size());
    row.recovered = recovered[i];
    out.segments.push_back(std::move(row));
  }
  return true;
}
