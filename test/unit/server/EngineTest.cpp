//===- EngineTest.cpp - kv-serve's plans, views, sampling, metrics -*- C++
//-*-=//
//
// The parts of the engine that are logic over the runtime, tested alone:
// the canonical shape of an edit, the programs written for it (planned by
// kv-optimize here), relabelling and compacting views of a real pool, the
// sampler, the prefix cache and the metrics' text format.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Compiler.h"
#include "driver/server/Metrics.h"
#include "driver/server/PlanCache.h"
#include "driver/server/Plans.h"
#include "driver/server/PrefixCache.h"
#include "driver/server/Sampler.h"
#include "driver/server/Views.h"

#include "runtime/core/KVRuntime.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace kvir;
using namespace kvir::serve;

namespace {

std::vector<SegmentShape> agent() {
  return {{"system", "system", {}, 10},      {"history", "history", {}, 20},
          {"city", "fact", {}, 4},           {"tools", "tool", {}, 30},
          {"think", "thought", {"city"}, 8}, {"notes", "history", {}, 5},
          {"answer", "answer", {"think"}, 3}};
}

std::string describe(const EditShape &shape) {
  std::string out;
  for (const SegmentShape &g : shape.groups) {
    out += g.name + ":" + std::to_string(g.tokens);
    if (!g.deps.empty())
      out += "*";
    out += " ";
  }
  return out;
}

TEST(ServePlans, CanonicalShapes) {
  EditShape shape;
  std::string error;
  ASSERT_TRUE(canonicalEdit(agent(), 2, "cot_slice", false, shape, error));
  // tools reused, think recomputed, notes reused, answer recomputed.
  EXPECT_EQ(describe(shape), "pre:30 s:4 g2:30 g3:8* g4:5 g5:3* ");
  EXPECT_EQ(shape.groupOf, (std::vector<size_t>{0, 0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(canonicalEdit(agent(), 2, "exact", false, shape, error));
  EXPECT_EQ(describe(shape), "pre:30 s:4 g2:46* ");
  ASSERT_TRUE(canonicalEdit(agent(), 2, "erratum", false, shape, error));
  EXPECT_EQ(describe(shape), "pre:30 s:4 g2:43 g3:3 ");
  EXPECT_EQ(shape.answer, 6u);
  EXPECT_EQ(shape.groups.back().kind, "answer");
  ASSERT_TRUE(canonicalEdit(agent(), 0, "cot_slice", false, shape, error));
  EXPECT_EQ(describe(shape), "s:10 g1:70 ");
  // Reused segments stay apart when a repair is spent on each.
  std::vector<SegmentShape> two = {
      {"a", "fact", {}, 2}, {"b", "tool", {}, 3}, {"c", "tool", {}, 4}};
  ASSERT_TRUE(canonicalEdit(two, 0, "cot_slice", true, shape, error));
  EXPECT_EQ(describe(shape), "s:2 g1:3 g2:4 ");
  ASSERT_TRUE(canonicalEdit(two, 0, "cot_slice", false, shape, error));
  EXPECT_EQ(describe(shape), "s:2 g1:7 ");
  EXPECT_FALSE(canonicalEdit(two, 2, "erratum", false, shape, error));
  EXPECT_NE(error.find("no answer"), std::string::npos);
  EXPECT_EQ(dependencySlice(agent(), 2),
            (std::vector<bool>{false, false, true, false, true, false, true}));
}

TEST(ServePlans, ProgramsPlan) {
  kvrt_model_config config{};
  config.dim = 64;
  config.hidden_dim = 172;
  config.n_layers = 5;
  config.n_heads = 8;
  config.n_kv_heads = 4;
  config.vocab_size = 512;
  config.seq_len = 512;
  config.rope_theta = 10000;
  config.rms_eps = 1e-5;
  PlanCache plans(config, KVRT_KV_F32, 4);
  EXPECT_EQ(plans.cacheType(), "!kv.cache<5x4x8xf32");
  EXPECT_EQ(plans.modelType().rfind("!kv.model<dim = 64, hidden = 172", 0), 0u)
      << plans.modelType();
  // Each program parses and plans (kv-optimize); compiling is the
  // integration tests' job.
  mlir::DialectRegistry registry;
  compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
  EditShape shape;
  std::string error;
  for (const char *strategy : {"cot_slice", "exact", "erratum"}) {
    ASSERT_TRUE(canonicalEdit(agent(), 2, strategy, false, shape, error));
    Repair repair;
    std::string text = editProgram(plans.modelType(), plans.cacheType(), shape,
                                   strategyText(strategy, repair),
                                   std::string(strategy) == "erratum");
    EXPECT_TRUE(compiler::parseProgram(context, text)) << text;
  }
  Repair firstK;
  firstK.kind = Repair::Kind::FirstK;
  firstK.firstK = 4;
  EXPECT_EQ(strategyText("cot_slice", firstK), "<cot_slice, first_k = 4>");
  Repair fraction;
  fraction.kind = Repair::Kind::Fraction;
  fraction.amount = 0.25;
  EXPECT_EQ(repairText(fraction), "<fraction = 0.25>");
  EXPECT_TRUE(compiler::parseProgram(
      context, composeProgram(plans.modelType(), plans.cacheType(),
                              repairText(firstK))));
  EXPECT_TRUE(compiler::parseProgram(
      context, composeProgram(plans.modelType(), plans.cacheType(), "")));
  EXPECT_TRUE(compiler::parseProgram(
      context, blockProgram(plans.modelType(), plans.cacheType())));
}

/// A pool of 2 layers x 1 KV head x 4 dims, pages of 4 tokens.
struct Pool {
  Pool() {
    kvrt_pool_config c{};
    c.n_layers = 2;
    c.n_kv_heads = 1;
    c.head_size = 4;
    c.page_tokens = 4;
    c.capacity_pages = 64;
    EXPECT_EQ(kvrt_pool_create(&c, &pool), KVRT_OK);
  }
  ~Pool() { kvrt_pool_release(pool); }

  /// A view of one run per token of `tokens`, at positions from `pos`, each
  /// on its own page with K/V values derived from the token (what decoding
  /// one token at a time leaves).
  exec::ViewRef decoded(const std::vector<int32_t> &tokens, int64_t pos) {
    kvrt_view *view = nullptr;
    kvrt_view_create(pool, &view);
    exec::ViewRef acc = exec::adoptView(view);
    for (size_t i = 0; i < tokens.size(); ++i) {
      int32_t page;
      EXPECT_EQ(kvrt_pool_alloc_pages(pool, 1, &page), KVRT_OK);
      float *data = nullptr;
      kvrt_pool_page_data(pool, page, &data);
      for (int e = 0; e < 2 * 2 * 4 * 4; ++e)
        data[e] = float(tokens[i] * 1000 + e);
      kvrt_pool_seal_page(pool, page);
      kvrt_run run{&page, 1, 0, 1, pos + int64_t(i), 0, &tokens[i], nullptr};
      kvrt_view *next = nullptr;
      EXPECT_EQ(kvrt_view_append(acc.get(), &run, &next), KVRT_OK);
      kvrt_pool_release_page(pool, page);
      acc = exec::adoptView(next);
    }
    return acc;
  }

  /// K or V element (layer, kind, dim) of token `index` of `view`.
  float element(const kvrt_view *view, int64_t index, int layer, int kind,
                int dim) {
    std::vector<float> k(4), v(4);
    for (int64_t r = 0, at = 0; r < kvrt_view_num_runs(view); ++r) {
      kvrt_run run;
      kvrt_view_get_run(view, r, &run);
      if (index < at + run.n_tokens) {
        kvrt_pool_read_kv(pool, run.pages, run.slot_begin + (index - at), 1,
                          layer, k.data(), v.data());
        return kind ? v[size_t(dim)] : k[size_t(dim)];
      }
      at += run.n_tokens;
    }
    return -1;
  }

  kvrt_pool *pool = nullptr;
};

TEST(ServeViews, RelabelAndCompact) {
  Pool p;
  std::vector<int32_t> tokens = {7, 8, 9, 10, 11, 12};
  exec::ViewRef view = p.decoded(tokens, 3);
  ASSERT_EQ(kvrt_view_num_runs(view.get()), 6);
  std::vector<float> before;
  for (int64_t i = 0; i < 6; ++i)
    for (int l = 0; l < 2; ++l)
      for (int c = 0; c < 2; ++c)
        before.push_back(p.element(view.get(), i, l, c, 3));

  exec::ViewRef merged;
  bool done = false;
  std::string error;
  ASSERT_TRUE(compact(view.get(), 1, 6, merged, done, error)) << error;
  EXPECT_TRUE(done);
  EXPECT_EQ(kvrt_view_num_runs(merged.get()), 2);
  EXPECT_EQ(exec::viewTokens(merged.get()), tokens);
  EXPECT_EQ(effectivePositions(merged.get()),
            (std::vector<int64_t>{3, 4, 5, 6, 7, 8}));
  std::vector<float> after;
  for (int64_t i = 0; i < 6; ++i)
    for (int l = 0; l < 2; ++l)
      for (int c = 0; c < 2; ++c)
        after.push_back(p.element(merged.get(), i, l, c, 3));
  EXPECT_EQ(before, after);

  exec::ViewRef labelled;
  ASSERT_TRUE(
      relabel(merged.get(), {{"a", 2}, {"b", 0}, {"c", 4}}, labelled, error))
      << error;
  int64_t begin = 0, end = 0;
  ASSERT_EQ(kvrt_view_segment_bounds(labelled.get(), "a", &begin, &end),
            KVRT_OK);
  EXPECT_EQ(begin, 0);
  EXPECT_EQ(end, 2);
  ASSERT_EQ(kvrt_view_segment_bounds(labelled.get(), "c", &begin, &end),
            KVRT_OK);
  EXPECT_EQ(begin, 2);
  EXPECT_EQ(end, 6);
  EXPECT_EQ(exec::viewTokens(labelled.get()), tokens);
  EXPECT_EQ(p.element(labelled.get(), 4, 1, 1, 3), before[4 * 4 + 3]);
  EXPECT_FALSE(relabel(merged.get(), {{"a", 5}}, labelled, error));

  // A gap in the positions is not merged.
  exec::ViewRef shifted, joined;
  kvrt_view *s = nullptr, *j = nullptr;
  exec::ViewRef tail = sliceView(view.get(), 3, 6, error);
  kvrt_view_shift(tail.get(), 5, &s);
  shifted = exec::adoptView(s);
  exec::ViewRef head = sliceView(view.get(), 0, 3, error);
  kvrt_view_concat(head.get(), shifted.get(), &j);
  joined = exec::adoptView(j);
  ASSERT_TRUE(compact(joined.get(), 0, 6, merged, done, error));
  EXPECT_FALSE(done);
  EXPECT_EQ(merged.get(), joined.get());
}

TEST(ServePrefixCache, LongestPrefixPerTenant) {
  Pool p;
  PrefixCache cache(2);
  cache.insert("a", {1, 2, 3, 4}, p.decoded({1, 2, 3, 4}, 0));
  cache.insert("a", {1, 2, 9}, p.decoded({1, 2, 9}, 0));
  exec::ViewRef view;
  EXPECT_EQ(cache.lookup("a", {1, 2, 3, 5}, 10, view), 3);
  EXPECT_EQ(exec::viewTokens(view.get()), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(cache.lookup("a", {1, 2, 3, 4, 5}, 2, view), 2);
  EXPECT_EQ(cache.lookup("b", {1, 2, 3}, 10, view), 0);
  EXPECT_FALSE(view);
  // A longer sequence replaces its prefix; the capacity drops the oldest.
  cache.insert("a", {1, 2, 3, 4, 5}, p.decoded({1, 2, 3, 4, 5}, 0));
  EXPECT_EQ(cache.size(), 2u);
  cache.insert("b", {6}, p.decoded({6}, 0));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.evictions(), 1);
}

TEST(ServeSampler, SeededAndGreedy) {
  std::vector<float> logits = {0.1f, 2.0f, 2.0f, -1.0f, 1.5f};
  EXPECT_EQ(argmax(logits.data(), 5), 1);
  Sampler greedy(0, 0, 1, 1);
  EXPECT_EQ(greedy.sample(logits.data(), 5), 1);
  Sampler top1(1.0, 1, 1, 5);
  EXPECT_EQ(top1.sample(logits.data(), 5), 1);
  auto draw = [&](uint64_t seed, int64_t topK, double topP) {
    Sampler s(0.8, topK, topP, seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i)
      out.push_back(s.sample(logits.data(), 5));
    return out;
  };
  EXPECT_EQ(draw(42, 0, 1), draw(42, 0, 1));
  EXPECT_NE(draw(42, 0, 1), draw(43, 0, 1));
  for (int32_t t : draw(9, 2, 1))
    EXPECT_TRUE(t == 1 || t == 2);
  // A nucleus this small keeps the most likely token only (the lower id
  // on a tie).
  for (int32_t t : draw(9, 0, 0.01))
    EXPECT_EQ(t, 1);
}

TEST(ServeMetrics, PrometheusText) {
  Metrics m;
  m.counter("x_total", "things");
  m.histogram("lat_seconds", "latency", {0.1, 1});
  m.add("x_total", 2, "code=\"200\"");
  m.add("x_total", 1, "code=\"200\"");
  m.observe("lat_seconds", 0.05);
  m.observe("lat_seconds", 0.5);
  m.observe("lat_seconds", 5);
  EXPECT_EQ(m.value("x_total", "code=\"200\""), 3);
  std::string text = m.render({{"g", "a gauge", 0.25}});
  EXPECT_NE(text.find("# TYPE x_total counter\nx_total{code=\"200\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"0.1\"} 1\n"
                      "lat_seconds_bucket{le=\"1\"} 2\n"
                      "lat_seconds_bucket{le=\"+Inf\"} 3\n"
                      "lat_seconds_sum 5.55\nlat_seconds_count 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE g gauge\ng 0.25\n"), std::string::npos);
}

} // namespace
