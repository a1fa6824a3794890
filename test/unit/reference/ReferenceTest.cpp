//===- ReferenceTest.cpp - The oracle vs llama2.c and itself ----*- C++ -*-===//

#include "runtime/reference/Reference.h"
#include "runtime/core/ModelConfig.h"
#include "test/unit/TestSupport.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace kvir::test;
using kvir::reference::ShiftMode;

namespace {

/// Prefill result: logits and the new view.
struct Prefilled {
  std::vector<float> logits;
  ViewPtr view;
};

Prefilled prefill(const kvrt_model *model, const kvrt_view *view,
                  const std::vector<int32_t> &tokens, int64_t pos,
                  const char *label = nullptr) {
  Prefilled result;
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvir::reference::prefill(model, view, tokens.data(), tokens.size(),
                                     pos, label, &result.logits, &out),
            KVRT_OK)
      << kvrt_last_error();
  result.view.reset(out);
  return result;
}

/// max |a - b| / max |b|.
template <typename T>
double relativeError(const std::vector<T> &a, const std::vector<T> &b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

std::vector<double> randomQuery(const kvrt_model_config &c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> q(c.dim);
  for (double &x : q)
    x = uniform(rng);
  return q;
}

std::vector<double> attend(const kvrt_model_config &c, const kvrt_view *view,
                           int32_t layer, const std::vector<double> &q,
                           int64_t m, ShiftMode mode) {
  std::vector<double> out(c.dim, -1.0);
  EXPECT_EQ(
      kvir::reference::attention(c, view, layer, q.data(), m, mode, out.data()),
      KVRT_OK)
      << kvrt_last_error();
  return out;
}

kvrt_model_config configOf(const kvrt_model *model) {
  kvrt_model_config c;
  EXPECT_EQ(kvrt_model_get_config(model, &c), KVRT_OK);
  return c;
}

TEST(ReferenceTest, RopeRotatesTheDocumentedPairs) {
  // head size 4, theta 100: pair 0 turns by pos rad, pair 1 by pos/10 rad.
  double x[4] = {1, 0, 1, 0}, y[4] = {1, 1, 0, 0};
  kvir::reference::applyRope(x, 4, 2, KVRT_ROPE_INTERLEAVED, 100.0);
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-15);
  EXPECT_NEAR(x[1], std::sin(2.0), 1e-15);
  EXPECT_NEAR(x[2], std::cos(0.2), 1e-15);
  EXPECT_NEAR(x[3], std::sin(0.2), 1e-15);
  kvir::reference::applyRope(y, 4, 2, KVRT_ROPE_HALF, 100.0);
  EXPECT_NEAR(y[0], std::cos(2.0), 1e-15);
  EXPECT_NEAR(y[2], std::sin(2.0), 1e-15);
  EXPECT_NEAR(y[1], std::cos(0.2), 1e-15);
  EXPECT_NEAR(y[3], std::sin(0.2), 1e-15);
}

TEST(ReferenceTest, RopeVariantsRotateTheDocumentedPairs) {
  // Head size 8, rope_dim 4, theta 100, half layout: pairs (0, 2) and (1, 3)
  // turn by pos and pos / 10 rad, dimensions 4..7 pass through.
  kvrt_model_config c = makeConfig(8, 16, 1, 1, 1, 4, 16);
  c.rope_layout = KVRT_ROPE_HALF;
  c.rope_theta = 100.0;
  c.rope_dim = 4;
  double x[8] = {1, 1, 0, 0, 1, 2, 3, 4};
  kvir::reference::applyRope(x, c, 2);
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-15);
  EXPECT_NEAR(x[2], std::sin(2.0), 1e-15);
  EXPECT_NEAR(x[1], std::cos(0.2), 1e-15);
  EXPECT_NEAR(x[3], std::sin(0.2), 1e-15);
  EXPECT_EQ(x[4], 1.0);
  EXPECT_EQ(x[7], 4.0);
  // Linear scale 2 and factors {1, 4}: pair 0 turns by pos / 2, pair 1 by
  // pos / 80 (interleaved pairs (0, 1) and (2, 3)).
  c.rope_layout = KVRT_ROPE_INTERLEAVED;
  c.rope_scale = 2.0;
  c.n_rope_freq_factors = 2;
  c.rope_freq_factors[0] = 1.0f;
  c.rope_freq_factors[1] = 4.0f;
  double y[8] = {1, 0, 1, 0, 5, 6, 7, 8};
  kvir::reference::applyRope(y, c, 2);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-15);
  EXPECT_NEAR(y[2], std::cos(0.025), 1e-15);
  EXPECT_NEAR(y[3], std::sin(0.025), 1e-15);
  EXPECT_EQ(y[4], 5.0);
  EXPECT_EQ(y[7], 8.0);
}

TEST(ReferenceTest, Llama3FactorsFollowTheirDefinition) {
  // Head size 12 at theta 500000, original context 64, factor 8, low 1,
  // high 4: wavelengths 2 pi, 56.6, 509, ... give 1, smoothed, then 8.
  std::vector<float> f =
      kvir::llama3RopeFreqFactors(12, 500000.0, 8.0, 1.0, 4.0, 64.0);
  ASSERT_EQ(f.size(), 6u);
  EXPECT_EQ(f[0], 1.0f);
  double wavelength = 2 * M_PI / std::pow(500000.0, -2.0 / 12);
  double smooth = (64.0 / wavelength - 1.0) / (4.0 - 1.0);
  EXPECT_FLOAT_EQ(f[1], float(1.0 / ((1 - smooth) / 8.0 + smooth)));
  EXPECT_GT(f[1], 1.0f);
  EXPECT_LT(f[1], 8.0f);
  for (size_t i = 2; i < f.size(); ++i)
    EXPECT_EQ(f[i], 8.0f) << i;
}

TEST(ReferenceTest, ReproducesLlama2cLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  ModelPtr model = loadModel(testModelPath());
  std::vector<int32_t> tokens = readTokenFile(greedyTokensPath());
  std::vector<float> expected = readFloats(greedyLogitsPath());
  ASSERT_EQ(tokens.size(), 81u);
  ASSERT_EQ(expected.size(), 81u * 512);
  PoolPtr pool = poolFor(model.get(), 6);
  ViewPtr empty = emptyView(pool.get());
  Prefilled p = prefill(model.get(), empty.get(), tokens, 0);
  ASSERT_EQ(p.logits.size(), expected.size());
  EXPECT_LT(maxAbsDiff(p.logits.data(), expected.data(), expected.size()),
            1e-4);
  // The tokens are a greedy chain: each is the argmax after its prefix.
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const float *row = p.logits.data() + t * 512;
    EXPECT_EQ(std::max_element(row, row + 512) - row, tokens[t + 1]) << t;
  }
  EXPECT_EQ(kvrt_view_num_tokens(p.view.get()), 81);
}

TEST(ReferenceTest, ChunkedPrefillOverViewsMatchesLlama2c) {
  KVIR_REQUIRE_TEST_MODEL();
  ModelPtr model = loadModel(testModelPath());
  std::vector<int32_t> tokens = readTokenFile(greedyTokensPath());
  std::vector<float> expected = readFloats(greedyLogitsPath());
  for (int32_t pageTokens : {16, 5}) {
    PoolPtr pool = poolFor(model.get(), 40, pageTokens);
    ViewPtr view = emptyView(pool.get());
    int64_t start = 0;
    for (int64_t end : {30, 31, 81}) {
      std::vector<int32_t> chunk(tokens.begin() + start, tokens.begin() + end);
      Prefilled p = prefill(model.get(), view.get(), chunk, start, "chunk");
      EXPECT_LT(maxAbsDiff(p.logits.data(), expected.data() + start * 512,
                           chunk.size() * 512),
                1e-4)
          << "chunk [" << start << ", " << end << ") pages of " << pageTokens;
      view = std::move(p.view);
      start = end;
    }
    EXPECT_EQ(kvrt_view_num_runs(view.get()), 3);
  }
}

/// Relocation: a block prefilled alone at 0 and shifted by delta behaves as
/// the block prefilled alone at delta.
void checkRelocation(const kvrt_model *model, int64_t delta) {
  kvrt_model_config c = configOf(model);
  std::vector<int32_t> block = randomTokens(20, c.vocab_size, 11);
  std::vector<int32_t> next = randomTokens(3, c.vocab_size, 12);
  PoolPtr pool = poolFor(model, 16);
  ViewPtr empty = emptyView(pool.get());
  Prefilled atZero = prefill(model, empty.get(), block, 0, "block");
  Prefilled atDelta = prefill(model, empty.get(), block, delta, "block");
  ViewPtr moved = shifted(atZero.view.get(), delta);

  // Inside the block only relative positions matter.
  EXPECT_LT(relativeError(atZero.logits, atDelta.logits), 1e-5);
  int64_t m = delta + 25;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    std::vector<double> q = randomQuery(c, 100 + layer);
    std::vector<double> fused =
        attend(c, moved.get(), layer, q, m, ShiftMode::Fused);
    EXPECT_LT(relativeError(fused, attend(c, atDelta.view.get(), layer, q, m,
                                          ShiftMode::Fused)),
              1e-5)
        << "layer " << layer << " delta " << delta;
  }
  Prefilled afterMoved = prefill(model, moved.get(), next, delta + 20);
  Prefilled afterDelta = prefill(model, atDelta.view.get(), next, delta + 20);
  EXPECT_LT(relativeError(afterMoved.logits, afterDelta.logits), 1e-5)
      << "delta " << delta;
  // Without the shift the same continuation is visibly different: the test
  // can see a wrong offset.
  Prefilled unshifted = prefill(model, atZero.view.get(), next, delta + 20);
  EXPECT_GT(relativeError(unshifted.logits, afterDelta.logits), 1e-3);
}

TEST(ReferenceTest, RelocationIsExactBothLayouts) {
  for (kvrt_rope_layout layout : {KVRT_ROPE_INTERLEAVED, KVRT_ROPE_HALF}) {
    ModelPtr model = syntheticModel(smallConfig(layout), 99);
    for (int64_t delta : {37, 1000})
      checkRelocation(model.get(), delta);
  }
}

TEST(ReferenceTest, RelocationIsExactUnderRopeVariants) {
  for (const RopeVariant &variant : ropeVariants()) {
    SCOPED_TRACE(variant.name);
    ModelPtr model = syntheticModel(variant.config, 99);
    for (int64_t delta : {37, 1000})
      checkRelocation(model.get(), delta);
  }
}

TEST(ReferenceTest, RopeVariantsChangeTheForward) {
  // The same weights under each variant: the tests above would not see a
  // variant that the oracle ignored.
  ModelPtr plain = syntheticModel(smallConfig(KVRT_ROPE_INTERLEAVED), 4);
  std::vector<int32_t> tokens = randomTokens(30, 64, 8);
  PoolPtr pool = poolFor(plain.get(), 16);
  ViewPtr empty = emptyView(pool.get());
  std::vector<float> base =
      prefill(plain.get(), empty.get(), tokens, 40).logits;
  for (const RopeVariant &variant : ropeVariants()) {
    kvrt_model_config c = variant.config;
    c.rope_layout = KVRT_ROPE_INTERLEAVED;
    ModelPtr model = syntheticModel(c, 4);
    std::vector<float> got =
        prefill(model.get(), empty.get(), tokens, 40).logits;
    EXPECT_GT(relativeError(got, base), 1e-6) << variant.name;
  }
}

TEST(ReferenceTest, RelocationIsExactOnStories260K) {
  KVIR_REQUIRE_TEST_MODEL();
  ModelPtr model = loadModel(testModelPath());
  checkRelocation(model.get(), 100);
}

TEST(ReferenceTest, FusedShiftEqualsMaterializedShift) {
  for (kvrt_rope_layout layout : {KVRT_ROPE_INTERLEAVED, KVRT_ROPE_HALF}) {
    ModelPtr model = syntheticModel(smallConfig(layout), 5);
    kvrt_model_config c = configOf(model.get());
    PoolPtr pool = poolFor(model.get(), 32, 4);
    ViewPtr empty = emptyView(pool.get());
    Prefilled a = prefill(model.get(), empty.get(),
                          randomTokens(12, c.vocab_size, 1), 0, "a");
    Prefilled b = prefill(model.get(), empty.get(),
                          randomTokens(9, c.vocab_size, 2), 0, "b");
    Prefilled d = prefill(model.get(), empty.get(),
                          randomTokens(10, c.vocab_size, 3), 50, "d");
    // Runs: a as is; b moved after a; a middle slice of d moved back by 20
    // (positions 33..38); b again, moved to 60..68 so that part of it lies
    // beyond the query and must be masked.
    ViewPtr view = concat(a.view.get(), shifted(b.view.get(), 12).get());
    view =
        concat(view.get(), shifted(slice(d.view.get(), 3, 9).get(), -20).get());
    view = concat(view.get(), shifted(b.view.get(), 60).get());
    ASSERT_EQ(kvrt_view_num_runs(view.get()), 4);
    int64_t m = 64;
    for (int32_t layer = 0; layer < c.n_layers; ++layer) {
      std::vector<double> q = randomQuery(c, 7 + layer);
      std::vector<double> fused =
          attend(c, view.get(), layer, q, m, ShiftMode::Fused);
      std::vector<double> materialized =
          attend(c, view.get(), layer, q, m, ShiftMode::Materialized);
      EXPECT_LT(relativeError(fused, materialized), 1e-12)
          << "layer " << layer << " layout " << layout;
      // Keys at effective positions 65..68 are masked: dropping them from
      // the view changes nothing.
      ViewPtr visible =
          slice(view.get(), 0, kvrt_view_num_tokens(view.get()) - 4);
      EXPECT_LT(relativeError(fused, attend(c, visible.get(), layer, q, m,
                                            ShiftMode::Materialized)),
                1e-12);
      // A different offset of one run is seen.
      ViewPtr moved = concat(slice(view.get(), 0, 12).get(),
                             shifted(slice(view.get(), 12, 36).get(), 1).get());
      EXPECT_GT(
          relativeError(attend(c, moved.get(), layer, q, m, ShiftMode::Fused),
                        fused),
          1e-6);
    }
  }
}

TEST(ReferenceTest, AttentionEdgeCases) {
  ModelPtr model = syntheticModel(smallConfig(KVRT_ROPE_INTERLEAVED), 8);
  kvrt_model_config c = configOf(model.get());
  PoolPtr pool = poolFor(model.get(), 4);
  ViewPtr empty = emptyView(pool.get());
  Prefilled one = prefill(model.get(), empty.get(), {5}, 10);
  std::vector<double> q = randomQuery(c, 3);
  // One visible key: the output is its value, exactly.
  kvrt_run run;
  ASSERT_EQ(kvrt_view_get_run(one.view.get(), 0, &run), KVRT_OK);
  kvrt_page_layout layout;
  ASSERT_EQ(kvrt_pool_get_layout(pool.get(), &layout), KVRT_OK);
  int32_t headSize = c.dim / c.n_heads;
  for (ShiftMode mode : {ShiftMode::Fused, ShiftMode::Materialized}) {
    std::vector<double> out = attend(c, one.view.get(), 1, q, 10, mode);
    for (int32_t h = 0; h < c.n_heads; ++h) {
      const float *v = static_cast<const float *>(layout.base) +
                       run.pages[0] * layout.page_stride + layout.layer_stride +
                       (h / 2) * layout.head_stride + layout.kv_stride;
      for (int32_t d = 0; d < headSize; ++d)
        EXPECT_EQ(out[h * headSize + d], double(v[d]));
    }
    // A query before every key sees nothing.
    for (double x : attend(c, one.view.get(), 1, q, 9, mode))
      EXPECT_EQ(x, 0.0);
  }
  std::vector<double> out(c.dim);
  EXPECT_EQ(kvir::reference::attention(c, one.view.get(), 2, q.data(), 10,
                                       ShiftMode::Fused, out.data()),
            KVRT_ERR_INVALID_ARGUMENT);
}

TEST(ReferenceTest, PrefillErrorsLeaveTheViewIntact) {
  ModelPtr model = syntheticModel(smallConfig(KVRT_ROPE_HALF), 8);
  PoolPtr pool = poolFor(model.get(), 3, 4);
  ViewPtr empty = emptyView(pool.get());
  Prefilled base = prefill(model.get(), empty.get(), {1, 2, 3, 4, 5, 6}, 0);
  kvrt_pool_stats before;
  kvrt_pool_get_stats(pool.get(), &before);
  EXPECT_EQ(before.pages_in_use, 2);

  std::vector<float> logits;
  kvrt_view *out = nullptr;
  std::vector<int32_t> tooMany(5, 1);
  EXPECT_EQ(kvir::reference::prefill(model.get(), base.view.get(),
                                     tooMany.data(), 5, 6, nullptr, &logits,
                                     &out),
            KVRT_ERR_POOL_EXHAUSTED);
  EXPECT_EQ(out, nullptr);
  std::vector<int32_t> bad = {1, 64};
  EXPECT_EQ(kvir::reference::prefill(model.get(), base.view.get(), bad.data(),
                                     2, 6, nullptr, &logits, &out),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("token 64 at index 1 is outside the vocabulary [0, 64)"),
            std::string::npos);
  kvrt_pool_stats after;
  kvrt_pool_get_stats(pool.get(), &after);
  EXPECT_EQ(after.pages_in_use, before.pages_in_use);
  EXPECT_EQ(kvrt_view_num_tokens(base.view.get()), 6);
  // The view still works: a prefill that fits succeeds over it.
  Prefilled more = prefill(model.get(), base.view.get(), {7, 8}, 6);
  EXPECT_EQ(kvrt_view_num_tokens(more.view.get()), 8);
}

} // namespace
