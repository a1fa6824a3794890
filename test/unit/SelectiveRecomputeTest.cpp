//===- SelectiveRecomputeTest.cpp - The fraction repair step ----*- C++ -*-===//

#include "runtime/core/SelectiveRecompute.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

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
                            tokens.size(), pos, label, false,
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
                      int64_t pos, const char *label, bool lastOnly,
                      std::vector<float> *logits, kvrt_view **out) override {
    return inner->prefill(forward, model, view, tokens, n, pos, label, lastOnly,
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
  ViewPtr prefix, block, composed;

  /// A prefix of 10 tokens, then a block of 20 prefilled alone at position 0
  /// and appended shifted by 10: the situation of a composed block.
  Fixture() {
    ViewPtr empty = emptyView(pool.get());
    prefix = prefill(*backend, model.get(), empty.get(), prefixTokens, 0);
    block = prefill(*backend, model.get(), empty.get(), blockTokens, 0, nullptr,
                    "block");
    composed = concat(prefix.get(), shifted(block.get(), 10).get());
  }
};

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
  ViewPtr inPlace = prefill(*f.backend, f.model.get(), f.prefix.get(),
                            f.blockTokens, 10, nullptr, "block");
  kvrt_view *out = nullptr;
  kvir::SelectiveRecomputeStats stats;
  ASSERT_EQ(kvir::selectiveRecompute(*f.backend, kvir::Forward(), f.model.get(),
                                     inPlace.get(), 10, 30, 0.15, &out, &stats),
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
  std::set<int64_t> expected;
  for (int64_t i = 0; i < 20; ++i)
    if (ids.count(f.blockTokens[i]))
      expected.insert(10 + i);
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
}

} // namespace
