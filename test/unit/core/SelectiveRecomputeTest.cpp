//===- SelectiveRecomputeTest.cpp - The deviation repair steps --*- C++ -*-===//

#include "runtime/core/SelectiveRecompute.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include <cmath>
#include <limits>
#include <random>
#include <set>

using namespace kvir::test;

namespace {

ViewPtr prefill(kvir::ComputeBackend &backend, const kvrt_model *model,
                const kvrt_view *view, const std::vector<int32_t> &tokens,
                int64_t pos, std::vector<float> *logits = nullptr,
                const char *label = nullptr) {
  std::vector<float> scratch;
  kvrt_view *out = nullptr;
  EXPECT_EQ(backend.prefill(kvir::Forward(), model, view, tokens.data(),
                            tokens.size(), pos, label, kvir::LogitRows::all(),
                            logits ? logits : &scratch, &out),
            KVRT_OK)
      << kvrt_last_error();
  return ViewPtr(out);
}

/// The reference backend, with the scanned values of chosen token ids
/// perturbed, so that the deviation scan has something to find.
class PerturbedBackend : public kvir::ComputeBackend {
public:
  PerturbedBackend(std::set<int32_t> perturbed, double amount)
      : inner(kvir::createReferenceBackend()), perturbed(std::move(perturbed)),
        amount(amount) {}
  const char *name() const override { return "perturbed"; }
  bool runsGeneratedCode() const override { return false; }
  kvrt_status prefill(const kvir::Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *label, kvir::LogitRows rows,
                      std::vector<float> *logits, kvrt_view **out) override {
    return inner->prefill(forward, model, view, tokens, n, pos, label, rows,
                          logits, out);
  }
  kvrt_status layerKV(const kvir::Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    kvrt_status s =
        inner->layerKV(forward, model, view, tokens, n, pos, layer, k, v);
    int64_t width = n ? int64_t(v->size()) / n : 0;
    for (int64_t t = 0; t < n; ++t)
      if (perturbed.count(tokens[t]))
        (*v)[t * width] += amount * (1 + tokens[t] % 7);
    return s;
  }

  kvrt_status attention(const kvir::Forward &forward, const kvrt_model *model,
                        const kvrt_view *view, const float *q, int64_t n,
                        int64_t pos, int32_t layer,
                        std::vector<float> *out) override {
    return inner->attention(forward, model, view, q, n, pos, layer, out);
  }
  kvrt_status materialize(const kvir::Forward &forward, const kvrt_model *model,
                          const kvrt_view *view, kvrt_view **out) override {
    return inner->materialize(forward, model, view, out);
  }

private:
  std::unique_ptr<kvir::ComputeBackend> inner;
  std::set<int32_t> perturbed;
  double amount;
};

struct Fixture {
  ModelPtr model = syntheticModel(smallConfig(KVRT_ROPE_INTERLEAVED), 7);
  PoolPtr pool = poolFor(model.get(), 256, 4);
  std::unique_ptr<kvir::ComputeBackend> backend =
      kvir::createReferenceBackend();
  std::vector<int32_t> prefixTokens = randomTokens(10, 64, 1);
  std::vector<int32_t> blockTokens = randomTokens(20, 64, 2);
  ViewPtr prefix, block, composed, inPlace;

  /// A prefix of 10 tokens, then a block of 20 prefilled alone at position 0
  /// and appended shifted by 10: the situation of a composed block; and the
  /// same block prefilled over the prefix, where it sits (`inPlace`).
  Fixture() {
    ViewPtr empty = emptyView(pool.get());
    prefix = prefill(*backend, model.get(), empty.get(), prefixTokens, 0);
    block = prefill(*backend, model.get(), empty.get(), blockTokens, 0, nullptr,
                    "block");
    composed = concat(prefix.get(), shifted(block.get(), 10).get());
    inPlace = prefill(*backend, model.get(), prefix.get(), blockTokens, 10,
                      nullptr, "block");
  }
};

/// The view indices of the block tokens whose id is in `ids` (the block
/// starts at index 10).
std::set<int64_t> positionsOf(const Fixture &f, const std::set<int32_t> &ids) {
  std::set<int64_t> positions;
  for (int64_t i = 0; i < int64_t(f.blockTokens.size()); ++i)
    if (ids.count(f.blockTokens[i]))
      positions.insert(10 + i);
  return positions;
}

TEST(SelectiveRecomputeTest, Count) {
  EXPECT_EQ(kvir::selectiveRecomputeCount(0.15, 120), 18);
  EXPECT_EQ(kvir::selectiveRecomputeCount(0.15, 121), 19);
  EXPECT_EQ(kvir::selectiveRecomputeCount(0.0, 50), 0);
  EXPECT_EQ(kvir::selectiveRecomputeCount(1.0, 50), 50);
  EXPECT_EQ(kvir::selectiveRecomputeCount(0.01, 1), 1);
  EXPECT_EQ(kvir::selectiveRecomputeCount(0.5, 0), 0);
}

TEST(SelectiveRecomputeTest, FractionZeroKeepsTheView) {
  Fixture f;
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30, 0.0, &out,
                                     &stats),
            KVRT_OK);
  ViewPtr result(out);
  EXPECT_EQ(result.get(), f.composed.get());
  EXPECT_TRUE(stats.chosen.empty());
  EXPECT_TRUE(stats.calls.empty());
}

// Tokens computed in the context they sit in do not deviate: the scan
// recomputes them at their effective positions over the same prefix, with the
// same math, so the values come back bit for bit and ties pick the first.
TEST(SelectiveRecomputeTest, TokensInTheirOwnContextDoNotDeviate) {
  Fixture f;
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.inPlace.get(), 10, 30, 0.15, &out,
                                     &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(stats.candidates, 20);
  EXPECT_EQ(stats.chosen, (std::vector<int64_t>{10, 11, 12}));
  EXPECT_EQ(stats.maxDeviation, 0.0);
  ASSERT_EQ(stats.calls.size(), 2u);
  EXPECT_TRUE(stats.calls[0].scan);
  EXPECT_EQ(stats.calls[0].layers, 2); // layers 0 and 1
  EXPECT_EQ(stats.calls[0].tokens, 20);
  EXPECT_FALSE(stats.calls[1].scan);
  EXPECT_EQ(stats.calls[1].contextTokens, 10);
  EXPECT_EQ(stats.calls[1].tokens, 3);
}

// A block prefilled alone and composed after a prefix never saw the prefix:
// from layer 1 on its values differ from those it gets in the new context,
// and the scan sees it (layer 0 alone could not: it ignores the context).
TEST(SelectiveRecomputeTest, ComposedBlockDeviatesAtLayerOne) {
  Fixture f;
  EXPECT_EQ(kvir::selectiveRecomputeScanLayer(2), 1);
  EXPECT_EQ(kvir::selectiveRecomputeScanLayer(1), 0);
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30, 0.15, &out,
                                     &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(stats.chosen.size(), 3u);
  EXPECT_GT(stats.minChosenDeviation, 0.0);
  EXPECT_GE(stats.maxDeviation, stats.minChosenDeviation);
}

// Chosen tokens are the ones that deviate most; the view keeps its tokens,
// order and effective positions, the chosen ones recomputed over the new
// prefix, the others reused with their offsets.
TEST(SelectiveRecomputeTest, RecomputesTheMostDeviatingTokens) {
  Fixture f;
  // Token ids at block indices 4, 5 and 13, made to deviate.
  std::set<int32_t> ids = {f.blockTokens[4], f.blockTokens[5],
                           f.blockTokens[13]};
  std::set<int64_t> expected = positionsOf(f, ids);
  PerturbedBackend backend(ids, 1.0);
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  double fraction = double(expected.size()) / 20;
  ASSERT_EQ(kvir::selectiveRecompute(backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30, fraction, &out,
                                     &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(std::set<int64_t>(stats.chosen.begin(), stats.chosen.end()),
            expected);
  EXPECT_GT(stats.minChosenDeviation, 0.5);

  // Same tokens, same effective positions 0..29, labels kept.
  ASSERT_EQ(kvrt_view_num_tokens(result.get()), 30);
  int64_t next = 0;
  std::vector<int32_t> tokens;
  for (int64_t r = 0; r < kvrt_view_num_runs(result.get()); ++r) {
    kvrt_run run;
    ASSERT_EQ(kvrt_view_get_run(result.get(), r, &run), KVRT_OK);
    EXPECT_EQ(run.base_pos + run.delta, next);
    next += run.n_tokens;
    tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
    if (r > 0)
      EXPECT_STREQ(run.label, "block");
  }
  std::vector<int32_t> all = f.prefixTokens;
  all.insert(all.end(), f.blockTokens.begin(), f.blockTokens.end());
  EXPECT_EQ(tokens, all);

  // The same view built by hand: reused slices and per-group prefills.
  ViewPtr hand = ViewPtr(nullptr);
  {
    kvrt_view *v = nullptr;
    ASSERT_EQ(kvrt_view_slice(f.composed.get(), 0, 10, &v), KVRT_OK);
    hand.reset(v);
    int64_t cursor = 10;
    for (int64_t i : stats.chosen) {
      if (i > cursor) {
        ASSERT_EQ(kvrt_view_slice(f.composed.get(), cursor, i, &v), KVRT_OK);
        hand = concat(hand.get(), ViewPtr(v).get());
      }
      hand =
          prefill(*f.backend, f.model.get(), hand.get(), {all[size_t(i)]}, i);
      cursor = i + 1;
    }
    ASSERT_EQ(kvrt_view_slice(f.composed.get(), cursor, 30, &v), KVRT_OK);
    hand = concat(hand.get(), ViewPtr(v).get());
  }
  // A probe attends both identically (1e-5: same kernels, run boundaries may
  // differ, which only regroups the online-softmax merge).
  std::vector<int32_t> probe = randomTokens(3, 64, 9);
  std::vector<float> a, b;
  prefill(*f.backend, f.model.get(), result.get(), probe, 30, &a);
  prefill(*f.backend, f.model.get(), hand.get(), probe, 30, &b);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LT(maxAbsDiff(a.data(), b.data(), a.size()), 1e-5);
}

// fraction 1 recomputes every token: a probe sees what it would see after a
// plain prefill of the block over the prefix.
TEST(SelectiveRecomputeTest, FractionOneEqualsPrefill) {
  Fixture f;
  kvrt_view *out = nullptr;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30, 1.0, &out),
            KVRT_OK);
  ViewPtr result(out);
  ViewPtr full =
      prefill(*f.backend, f.model.get(), f.prefix.get(), f.blockTokens, 10);
  std::vector<int32_t> probe = randomTokens(4, 64, 3);
  std::vector<float> a, b;
  prefill(*f.backend, f.model.get(), result.get(), probe, 30, &a);
  prefill(*f.backend, f.model.get(), full.get(), probe, 30, &b);
  EXPECT_LT(maxAbsDiff(a.data(), b.data(), a.size()), 1e-5);
}

kvir::RepairBudget deviation(double threshold) {
  return {kvir::RepairSelection::Deviation, threshold};
}

TEST(SelectiveRecomputeTest, RelativeDeviation) {
  const float fresh[] = {3, 4}, zero[] = {0, 0}, half[] = {1.5f, 2};
  EXPECT_EQ(kvir::relativeDeviation(fresh, fresh, 2), 0.0);
  EXPECT_EQ(kvir::relativeDeviation(fresh, zero, 2), 1.0);
  // ||(1.5, 2)|| / ||(3, 4)|| = 2.5 / 5.
  EXPECT_DOUBLE_EQ(kvir::relativeDeviation(fresh, half, 2), 0.5);
  EXPECT_EQ(kvir::relativeDeviation(zero, zero, 2), 0.0);
  EXPECT_EQ(kvir::relativeDeviation(zero, fresh, 2),
            std::numeric_limits<double>::infinity());
}

TEST(SelectiveRecomputeTest, SelectAboveThreshold) {
  std::vector<double> relative = {0.1, 0.5, 0.05, 0.31, 0.0, 0.3};
  EXPECT_EQ(kvir::selectAboveThreshold(relative, 0.3),
            (std::vector<int64_t>{1, 3}));
  // Strictly above: a token at the threshold is not chosen.
  EXPECT_EQ(kvir::selectAboveThreshold(relative, 0.31),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(kvir::selectAboveThreshold(relative, 0.01),
            (std::vector<int64_t>{0, 1, 2, 3, 5}));
  EXPECT_TRUE(kvir::selectAboveThreshold(relative, 0.5).empty());
  EXPECT_TRUE(kvir::selectAboveThreshold({}, 0.1).empty());
}

// Tokens computed in the context they sit in come back with a relative
// deviation of exactly 0 (same math, same positions): no threshold > 0
// chooses any, the scan ran over all of them and the view is returned as is.
TEST(SelectiveRecomputeTest, DeviationOfTokensInTheirOwnContextIsZero) {
  Fixture f;
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.inPlace.get(), 10, 30, deviation(1e-12),
                                     &out, &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(result.get(), f.inPlace.get());
  EXPECT_EQ(stats.candidates, 20);
  ASSERT_EQ(stats.relativeDeviation.size(), 20u);
  for (double r : stats.relativeDeviation)
    EXPECT_EQ(r, 0.0);
  EXPECT_EQ(stats.maxRelativeDeviation, 0.0);
  EXPECT_EQ(stats.meanRelativeDeviation, 0.0);
  EXPECT_TRUE(stats.chosen.empty());
  ASSERT_EQ(stats.calls.size(), 1u);
  EXPECT_TRUE(stats.calls[0].scan);
  EXPECT_EQ(stats.calls[0].tokens, 20);
}

// A threshold chooses every token above it, however many: here exactly the
// perturbed ones (the others sit in their own context and deviate by 0),
// recomputed over the prefix, the rest reused.
TEST(SelectiveRecomputeTest, DeviationChoosesTheTokensAboveTheThreshold) {
  Fixture f;
  std::set<int32_t> ids = {f.blockTokens[2], f.blockTokens[9],
                           f.blockTokens[10], f.blockTokens[17]};
  std::set<int64_t> expected = positionsOf(f, ids);
  PerturbedBackend backend(ids, 1.0);
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(backend, kvir::Forward(), f.model.get(),
                                     f.inPlace.get(), 10, 30, deviation(1e-6),
                                     &out, &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(std::set<int64_t>(stats.chosen.begin(), stats.chosen.end()),
            expected);
  ASSERT_EQ(stats.relativeDeviation.size(), 20u);
  double sum = 0, max = 0;
  for (int64_t i = 0; i < 20; ++i) {
    double r = stats.relativeDeviation[i];
    EXPECT_EQ(r > 1e-6, expected.count(10 + i) == 1) << "token " << i;
    sum += r;
    max = std::max(max, r);
  }
  EXPECT_DOUBLE_EQ(stats.maxRelativeDeviation, max);
  EXPECT_NEAR(stats.meanRelativeDeviation, sum / 20, 1e-12);
  EXPECT_GT(stats.minChosenDeviation, 0.5);

  // The rebuilt view keeps tokens, effective positions and labels.
  ASSERT_EQ(kvrt_view_num_tokens(result.get()), 30);
  int64_t next = 0;
  for (int64_t r = 0; r < kvrt_view_num_runs(result.get()); ++r) {
    kvrt_run run;
    ASSERT_EQ(kvrt_view_get_run(result.get(), r, &run), KVRT_OK);
    EXPECT_EQ(run.base_pos + run.delta, next);
    next += run.n_tokens;
    if (next > 10)
      EXPECT_STREQ(run.label, "block");
  }
  // Recomputing the perturbed tokens with the true math puts back what was
  // there: a probe sees the in-place view.
  std::vector<int32_t> probe = randomTokens(3, 64, 5);
  std::vector<float> a, b;
  prefill(*f.backend, f.model.get(), result.get(), probe, 30, &a);
  prefill(*f.backend, f.model.get(), f.inPlace.get(), probe, 30, &b);
  EXPECT_LT(maxAbsDiff(a.data(), b.data(), a.size()), 1e-5);
}

// On a composed block every token deviates somewhat; a threshold between the
// deviations splits them, one above every deviation chooses none.
TEST(SelectiveRecomputeTest, DeviationThresholdSplitsAComposedBlock) {
  Fixture f;
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats scan;
  ASSERT_EQ(kvir::selectiveRecompute(
                *f.backend, kvir::Forward(), f.model.get(), f.composed.get(),
                10, 30, deviation(std::numeric_limits<double>::max()), &out,
                &scan),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr unchanged(out);
  EXPECT_EQ(unchanged.get(), f.composed.get());
  EXPECT_TRUE(scan.chosen.empty());
  ASSERT_EQ(scan.relativeDeviation.size(), 20u);
  EXPECT_GT(scan.meanRelativeDeviation, 0.0);

  // The median deviation as threshold: exactly the tokens above it.
  std::vector<double> sorted = scan.relativeDeviation;
  std::sort(sorted.begin(), sorted.end());
  double threshold = sorted[10];
  ASSERT_LT(threshold, sorted.back());
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30,
                                     deviation(threshold), &out, &stats),
            KVRT_OK)
      << kvrt_last_error();
  ViewPtr result(out);
  EXPECT_EQ(stats.relativeDeviation, scan.relativeDeviation);
  std::vector<int64_t> expected;
  for (int64_t i :
       kvir::selectAboveThreshold(scan.relativeDeviation, threshold))
    expected.push_back(10 + i);
  EXPECT_EQ(stats.chosen, expected);
  EXPECT_GE(stats.chosen.size(), 1u);
  EXPECT_LT(stats.chosen.size(), 20u);
  EXPECT_EQ(kvrt_view_num_tokens(result.get()), 30);
}

TEST(SelectiveRecomputeTest, Errors) {
  Fixture f;
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 31, 0.5, &out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("outside the view's 30"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     f.composed.get(), 10, 30, 1.5, &out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     nullptr, 0, 0, 0.5, &out),
            KVRT_ERR_INVALID_ARGUMENT);
  for (double t : {0.0, -0.1, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(),
                                       f.model.get(), f.composed.get(), 10, 30,
                                       deviation(t), &out),
              KVRT_ERR_INVALID_ARGUMENT)
        << t;
    EXPECT_NE(std::string(kvrt_last_error()).find("deviation threshold"),
              std::string::npos)
        << kvrt_last_error();
    EXPECT_EQ(out, nullptr);
  }
}

} // namespace
