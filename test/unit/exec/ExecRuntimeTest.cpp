//===- ExecRuntimeTest.cpp - The execution C ABI ----------------*- C++ -*-===//
//
// kvrt_exec_* over the reference backend: the primitives compute what the
// runtime core and the backend compute, the first error is kept with its
// site, later calls are no-ops returning neutral values, and nothing a
// caller holds is changed by a failure.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/ExecRuntime.h"
#include "runtime/core/ComputeBackend.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include "gtest/gtest.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace kvir;
using namespace kvir::test;

namespace {

struct ContextDeleter {
  void operator()(kvrt_exec_context *ctx) const {
    kvrt_exec_context_destroy(ctx);
  }
};
using ContextPtr = std::unique_ptr<kvrt_exec_context, ContextDeleter>;

class ExecRuntimeTest : public ::testing::Test {
protected:
  void SetUp() override {
    config = smallConfig(KVRT_ROPE_INTERLEAVED);
    model = syntheticModel(config, 7);
    ASSERT_TRUE(model);
    kvrt_pool_config poolConfig;
    ASSERT_EQ(kvrt_pool_config_for_model(model.get(), &poolConfig), KVRT_OK);
    poolConfig.page_tokens = 4;
    kvrt_pool *p = nullptr;
    ASSERT_EQ(kvrt_pool_create(&poolConfig, &p), KVRT_OK);
    pool.reset(p);
    backend = createReferenceBackend();
    ctx.reset(createExecContext(*backend, model.get(), pool.get()));
    ASSERT_TRUE(ctx);
  }

  std::vector<int32_t> ids(int n, int first = 1) {
    std::vector<int32_t> out(n);
    std::iota(out.begin(), out.end(), first);
    return out;
  }
  kvrt_exec_tokens *tokens(const std::vector<int32_t> &values) {
    return kvrt_exec_tokens_constant(ctx.get(), 0, values.data(),
                                     values.size());
  }
  /// Prefills `values` after `view`, labelled `label`.
  kvrt_view *prefill(kvrt_view *view, const std::vector<int32_t> &values,
                     const char *label, kvrt_exec_logits **logits = nullptr,
                     int32_t last = KVRT_EXEC_LOGITS_ALL) {
    kvrt_view *result = nullptr;
    kvrt_exec_logits *l = kvrt_exec_prefill(
        ctx.get(), 1, nullptr, nullptr, model.get(), &view, nullptr, 1,
        tokens(values), 0, 0, label, last, -1, &result);
    if (logits)
      *logits = l;
    return result;
  }

  kvrt_model_config config;
  ModelPtr model;
  PoolPtr pool;
  std::unique_ptr<ComputeBackend> backend;
  ContextPtr ctx;
};

TEST_F(ExecRuntimeTest, PrefillMatchesTheBackend) {
  kvrt_view *empty = kvrt_exec_empty(ctx.get(), 0);
  ASSERT_NE(empty, nullptr);
  kvrt_exec_logits *logits = nullptr;
  kvrt_view *view = prefill(empty, ids(6), "a", &logits);
  ASSERT_NE(view, nullptr) << kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(kvrt_exec_logits_rows(logits), 6);
  EXPECT_EQ(kvrt_exec_logits_vocab(logits), config.vocab_size);
  EXPECT_EQ(kvrt_exec_logits_result(logits), view);
  EXPECT_EQ(kvrt_exec_logits_context(logits), empty);
  EXPECT_EQ(kvrt_exec_logits_position(logits), 0);
  EXPECT_EQ(kvrt_exec_length(ctx.get(), view), 6);

  // The same prefill straight through the backend: bit-identical logits.
  std::vector<float> expected;
  kvrt_view *direct = nullptr;
  std::vector<int32_t> values = ids(6);
  ASSERT_EQ(backend->prefill(Forward(), model.get(), empty, values.data(), 6, 0,
                             "a", kvir::LogitRows::all(), &expected, &direct),
            KVRT_OK);
  kvrt_view_release(direct);
  const float *data = kvrt_exec_logits_data(logits);
  ASSERT_EQ(expected.size(), size_t(6 * config.vocab_size));
  EXPECT_EQ(std::vector<float>(data, data + expected.size()), expected);

  kvrt_exec_work plan, setup;
  kvrt_exec_get_work(ctx.get(), 1, &plan);
  kvrt_exec_get_work(ctx.get(), 0, &setup);
  EXPECT_EQ(plan.prefill_tokens, 0);
  EXPECT_EQ(setup.prefill_calls, 1);
  EXPECT_EQ(setup.prefill_tokens, 6);
  EXPECT_EQ(setup.logits_rows, 6);
  EXPECT_GT(setup.flops, 0);
  EXPECT_FALSE(kvrt_exec_failed(ctx.get()));
}

/// Each site's runtime calls are counted and timed (a runner's --profile):
/// the empty view and the prefills' token lists at site 0 (one row per call
/// and site), two prefills at site 1 (the fixture's), in the order they
/// first ran, with the calls' time the context's work.
TEST_F(ExecRuntimeTest, SiteTimesCountEachSitesCalls) {
  kvrt_view *empty = kvrt_exec_empty(ctx.get(), 0);
  kvrt_view *a = prefill(empty, ids(4), "a");
  ASSERT_NE(a, nullptr) << kvrt_exec_error_message(ctx.get());
  ASSERT_NE(prefill(a, ids(3, 9), "b"), nullptr);
  std::vector<kvrt_exec_site_time> times(
      size_t(kvrt_exec_num_site_times(ctx.get())));
  ASSERT_EQ(times.size(), 3u);
  double total = 0;
  for (size_t i = 0; i < times.size(); ++i) {
    kvrt_exec_get_site_time(ctx.get(), int64_t(i), &times[i]);
    total += times[i].seconds;
  }
  EXPECT_EQ(times[0].site, 0);
  EXPECT_STREQ(times[0].op, "empty");
  EXPECT_EQ(times[0].calls, 1);
  EXPECT_EQ(times[1].site, 0);
  EXPECT_STREQ(times[1].op, "tokens_constant");
  EXPECT_EQ(times[1].calls, 2);
  EXPECT_EQ(times[2].site, 1);
  EXPECT_STREQ(times[2].op, "prefill");
  EXPECT_EQ(times[2].calls, 2);
  EXPECT_GT(times[2].seconds, 0);
  kvrt_exec_work setup;
  kvrt_exec_get_work(ctx.get(), 0, &setup);
  EXPECT_NEAR(total, setup.seconds, 1e-9);
  // Out of range: the record is left as it was.
  kvrt_exec_site_time untouched{7, "x", 3, 1.0};
  kvrt_exec_get_site_time(ctx.get(), 3, &untouched);
  EXPECT_EQ(untouched.site, 7);
}

/// A prefill asked for no logits (KVRT_EXEC_LOGITS_NONE: the program never
/// reads them) returns 0 rows and counts neither rows nor the classifier's
/// FLOPs, and its view holds the same K/V as one asked for the last row: the
/// next prefill over either gives the same logits.
TEST_F(ExecRuntimeTest, UnreadLogitsAreNotComputed) {
  kvrt_view *empty = kvrt_exec_empty(ctx.get(), 0);
  kvrt_exec_logits *last = nullptr, *none = nullptr;
  kvrt_view *a = prefill(empty, ids(5), "a", &last, KVRT_EXEC_LOGITS_LAST);
  kvrt_exec_work afterLast;
  kvrt_exec_get_work(ctx.get(), 0, &afterLast);
  kvrt_view *b = prefill(empty, ids(5), "a", &none, KVRT_EXEC_LOGITS_NONE);
  ASSERT_NE(b, nullptr) << kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(kvrt_exec_logits_rows(last), 1);
  EXPECT_EQ(kvrt_exec_logits_rows(none), 0);
  EXPECT_EQ(kvrt_exec_logits_result(none), b);
  kvrt_exec_work afterNone;
  kvrt_exec_get_work(ctx.get(), 0, &afterNone);
  EXPECT_EQ(afterNone.logits_rows, afterLast.logits_rows);
  EXPECT_EQ(afterNone.prefill_tokens, 2 * afterLast.prefill_tokens);
  EXPECT_LT(afterNone.flops - afterLast.flops, afterLast.flops);

  kvrt_exec_logits *nextA = nullptr, *nextB = nullptr;
  prefill(a, ids(3, 9), "b", &nextA);
  prefill(b, ids(3, 9), "b", &nextB);
  ASSERT_EQ(kvrt_exec_logits_rows(nextA), 3);
  ASSERT_EQ(kvrt_exec_logits_rows(nextB), 3);
  const float *x = kvrt_exec_logits_data(nextA);
  const float *y = kvrt_exec_logits_data(nextB);
  size_t count = size_t(3 * config.vocab_size);
  EXPECT_EQ(std::vector<float>(x, x + count), std::vector<float>(y, y + count));
  EXPECT_FALSE(kvrt_exec_failed(ctx.get()));
}

TEST_F(ExecRuntimeTest, PrefillOfNoTokensReturnsTheViewUnchanged) {
  kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(3), "a");
  kvrt_exec_logits *logits = nullptr;
  kvrt_view *same = prefill(view, {}, "b", &logits);
  EXPECT_EQ(same, view);
  EXPECT_EQ(kvrt_exec_logits_rows(logits), 0);
  EXPECT_EQ(kvrt_exec_logits_position(logits), 3);
}

/// A chain of prefills in one call leaves what the chain of calls leaves:
/// the same runs, labels and token ids, the last list's logits (bit for bit
/// on the oracle, which computes each token alone), and the same FLOPs in
/// one call; a list of no tokens adds no run. Page size 4 puts list
/// boundaries inside pages.
TEST_F(ExecRuntimeTest, PrefillChainIsTheChainOfPrefills) {
  kvrt_view *base = prefill(kvrt_exec_empty(ctx.get(), 0), ids(5), "a");
  std::vector<std::vector<int32_t>> lists = {ids(3, 20), {}, ids(6, 30)};
  const char *labels[] = {"b", "c", "d"};
  for (int32_t last : {KVRT_EXEC_LOGITS_ALL, KVRT_EXEC_LOGITS_LAST}) {
    kvrt_exec_work before, between, after;
    kvrt_exec_get_work(ctx.get(), 0, &before);
    kvrt_view *chained = base;
    kvrt_exec_logits *expected = nullptr;
    for (size_t i = 0; i < lists.size(); ++i)
      chained = prefill(chained, lists[i], labels[i], &expected,
                        i + 1 < lists.size() ? KVRT_EXEC_LOGITS_NONE : last);
    kvrt_exec_get_work(ctx.get(), 0, &between);

    std::vector<const kvrt_exec_tokens *> handles;
    for (const std::vector<int32_t> &list : lists)
      handles.push_back(tokens(list));
    kvrt_view *fused = nullptr;
    kvrt_exec_logits *logits = kvrt_exec_prefill_chain(
        ctx.get(), 1, nullptr, nullptr, model.get(), &base, nullptr, 1,
        handles.data(), labels, handles.size(), last, -1, &fused);
    ASSERT_NE(fused, nullptr) << kvrt_exec_error_message(ctx.get());
    kvrt_exec_get_work(ctx.get(), 0, &after);

    EXPECT_EQ(kvrt_exec_logits_result(logits), fused);
    EXPECT_EQ(kvrt_exec_logits_position(logits),
              kvrt_exec_logits_position(expected));
    EXPECT_EQ(kvrt_exec_length(ctx.get(), kvrt_exec_logits_context(logits)),
              kvrt_exec_length(ctx.get(), kvrt_exec_logits_context(expected)));
    int64_t rows = kvrt_exec_logits_rows(logits);
    ASSERT_EQ(rows, last == KVRT_EXEC_LOGITS_ALL ? 6 : 1);
    ASSERT_EQ(kvrt_exec_logits_rows(expected), rows);
    const float *x = kvrt_exec_logits_data(logits);
    const float *y = kvrt_exec_logits_data(expected);
    size_t count = size_t(rows * config.vocab_size);
    EXPECT_EQ(std::vector<float>(x, x + count),
              std::vector<float>(y, y + count));

    ASSERT_EQ(kvrt_view_num_runs(fused), kvrt_view_num_runs(chained));
    for (const char *label : {"a", "b", "d"}) {
      int64_t b0 = -1, e0 = -1, b1 = -2, e1 = -2;
      ASSERT_EQ(kvrt_view_segment_bounds(chained, label, &b0, &e0), KVRT_OK);
      ASSERT_EQ(kvrt_view_segment_bounds(fused, label, &b1, &e1), KVRT_OK);
      EXPECT_EQ(b0, b1) << label;
      EXPECT_EQ(e0, e1) << label;
    }
    int64_t b = 0, e = 0;
    EXPECT_NE(kvrt_view_segment_bounds(fused, "c", &b, &e), KVRT_OK);
    const kvrt_exec_tokens *t0 =
        kvrt_exec_view_tokens(ctx.get(), 1, chained, -1);
    const kvrt_exec_tokens *t1 = kvrt_exec_view_tokens(ctx.get(), 1, fused, -1);
    int64_t n = kvrt_exec_tokens_size(ctx.get(), t0);
    ASSERT_EQ(kvrt_exec_tokens_size(ctx.get(), t1), n);
    EXPECT_EQ(std::vector<int32_t>(kvrt_exec_tokens_data(t0),
                                   kvrt_exec_tokens_data(t0) + n),
              std::vector<int32_t>(kvrt_exec_tokens_data(t1),
                                   kvrt_exec_tokens_data(t1) + n));

    EXPECT_EQ(after.flops - between.flops, between.flops - before.flops);
    EXPECT_EQ(after.prefill_tokens - between.prefill_tokens,
              between.prefill_tokens - before.prefill_tokens);
    EXPECT_EQ(after.logits_rows - between.logits_rows, rows);
    EXPECT_EQ(after.prefill_calls - between.prefill_calls, 1);
  }
  EXPECT_FALSE(kvrt_exec_failed(ctx.get()));
}

TEST_F(ExecRuntimeTest, PlanAccountingAndViewOps) {
  kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(4), "a");
  view = prefill(view, ids(5, 10), "b");
  int64_t bounds[2] = {-1, -1};
  kvrt_exec_plan_begin(ctx.get());
  kvrt_exec_segment_bounds(ctx.get(), 2, view, "b", bounds);
  EXPECT_EQ(bounds[0], 4);
  EXPECT_EQ(bounds[1], 9);
  kvrt_view *b = kvrt_exec_slice(ctx.get(), 3, view, bounds[0], bounds[1]);
  kvrt_view *shifted = kvrt_exec_rope_shift(ctx.get(), 4, b, -4);
  EXPECT_EQ(kvrt_exec_start_position(ctx.get(), shifted), 0);
  EXPECT_EQ(kvrt_exec_end_position(ctx.get(), shifted), 5);
  kvrt_view *pair[2] = {shifted, view};
  kvrt_view *joined = kvrt_exec_concat(ctx.get(), 5, pair, 2);
  EXPECT_EQ(kvrt_exec_length(ctx.get(), joined), 14);
  kvrt_exec_tokens *t = kvrt_exec_view_tokens(ctx.get(), 6, b, -1);
  ASSERT_EQ(kvrt_exec_tokens_size(ctx.get(), t), 5);
  EXPECT_EQ(kvrt_exec_tokens_data(t)[0], 10);
  prefill(view, ids(2, 20), "c");
  kvrt_exec_plan_end(ctx.get());
  kvrt_exec_work plan, setup;
  kvrt_exec_get_work(ctx.get(), 1, &plan);
  kvrt_exec_get_work(ctx.get(), 0, &setup);
  EXPECT_EQ(plan.prefill_tokens, 2);
  EXPECT_EQ(setup.prefill_tokens, 9);
  EXPECT_FALSE(kvrt_exec_failed(ctx.get()));
}

TEST_F(ExecRuntimeTest, SelectiveRecomputeCountsTheRepair) {
  kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(4), "a");
  view = prefill(view, ids(8, 30), "b");
  kvrt_view *repaired = kvrt_exec_selective_recompute(
      ctx.get(), 7, nullptr, nullptr, model.get(), view, 4, 12,
      KVRT_EXEC_REPAIR_FRACTION, 0.25);
  ASSERT_NE(repaired, nullptr) << kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(kvrt_exec_length(ctx.get(), repaired), 12);
  ASSERT_EQ(kvrt_exec_num_repairs(ctx.get()), 1);
  kvrt_exec_repair record;
  kvrt_exec_get_repair(ctx.get(), 0, &record);
  EXPECT_EQ(record.mode, KVRT_EXEC_REPAIR_FRACTION);
  EXPECT_EQ(record.amount, 0.25);
  EXPECT_EQ(record.candidates, 8);
  EXPECT_EQ(record.scanned, 8);
  EXPECT_EQ(record.chosen, 2);
  // @b was prefilled over @a, where it sits: nothing deviates.
  EXPECT_EQ(record.max_relative_deviation, 0.0);
  EXPECT_EQ(record.mean_relative_deviation, 0.0);

  // A deviation threshold: tokens in their own context deviate by 0, so none
  // is above it; the scan still ran and is recorded.
  kvrt_view *same = kvrt_exec_selective_recompute(
      ctx.get(), 8, nullptr, nullptr, model.get(), view, 4, 12,
      KVRT_EXEC_REPAIR_DEVIATION, 0.01);
  ASSERT_NE(same, nullptr) << kvrt_exec_error_message(ctx.get());
  ASSERT_EQ(kvrt_exec_num_repairs(ctx.get()), 2);
  kvrt_exec_get_repair(ctx.get(), 1, &record);
  EXPECT_EQ(record.mode, KVRT_EXEC_REPAIR_DEVIATION);
  EXPECT_EQ(record.amount, 0.01);
  EXPECT_EQ(record.candidates, 8);
  EXPECT_EQ(record.scanned, 8);
  EXPECT_EQ(record.chosen, 0);
  kvrt_exec_work setup;
  kvrt_exec_get_work(ctx.get(), 0, &setup);
  EXPECT_EQ(setup.scan_tokens, 16);

  // Out of range: a zeroed record.
  kvrt_exec_get_repair(ctx.get(), 2, &record);
  EXPECT_EQ(record.candidates, 0);
  EXPECT_EQ(record.amount, 0.0);

  // An unknown mode is an error at the op's site.
  EXPECT_EQ(kvrt_exec_selective_recompute(ctx.get(), 9, nullptr, nullptr,
                                          model.get(), view, 4, 12, 7, 0.5),
            nullptr);
  EXPECT_EQ(kvrt_exec_error_site(ctx.get()), 9);
  EXPECT_NE(
      std::string(kvrt_exec_error_message(ctx.get())).find("unknown mode 7"),
      std::string::npos);
}

TEST_F(ExecRuntimeTest, FirstErrorIsKeptAndLaterCallsAreNoOps) {
  kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(4), "a");
  ASSERT_NE(view, nullptr);
  std::vector<int32_t> before = {1, 2, 3, 4};

  EXPECT_EQ(kvrt_exec_slice(ctx.get(), 42, view, 0, 100), nullptr);
  ASSERT_TRUE(kvrt_exec_failed(ctx.get()));
  EXPECT_EQ(kvrt_exec_error_site(ctx.get()), 42);
  std::string message = kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(message.rfind("slice [0, 100) failed: ", 0), 0u) << message;

  // Later calls return neutral values and keep the first error.
  EXPECT_EQ(kvrt_exec_empty(ctx.get(), 43), nullptr);
  EXPECT_EQ(prefill(view, ids(2), "b"), nullptr);
  int64_t bounds[2] = {7, 7};
  kvrt_exec_segment_bounds(ctx.get(), 44, view, "missing", bounds);
  EXPECT_EQ(bounds[0], 0);
  EXPECT_EQ(kvrt_exec_length(ctx.get(), view), 0);
  EXPECT_EQ(kvrt_exec_call_enter(ctx.get(), 45), 0);
  EXPECT_EQ(kvrt_exec_rope_shift(ctx.get(), 46, nullptr, 3), nullptr);
  EXPECT_EQ(kvrt_exec_error_site(ctx.get()), 42);
  EXPECT_EQ(kvrt_exec_error_message(ctx.get()), message);

  // The view the failing calls saw is intact.
  EXPECT_EQ(kvrt_view_num_tokens(view), 4);
  kvrt_run run;
  ASSERT_EQ(kvrt_view_get_run(view, 0, &run), KVRT_OK);
  EXPECT_EQ(std::vector<int32_t>(run.tokens, run.tokens + run.n_tokens),
            before);
  kvrt_exec_work setup;
  kvrt_exec_get_work(ctx.get(), 0, &setup);
  EXPECT_EQ(setup.prefill_tokens, 4);
}

TEST_F(ExecRuntimeTest, ErrorsNameTheProblem) {
  auto expectError = [&](auto call, const std::string &expected) {
    ContextPtr fresh(createExecContext(*backend, model.get(), pool.get()));
    std::swap(ctx, fresh);
    call();
    EXPECT_TRUE(kvrt_exec_failed(ctx.get()));
    EXPECT_NE(std::string(kvrt_exec_error_message(ctx.get())).find(expected),
              std::string::npos)
        << kvrt_exec_error_message(ctx.get());
  };
  expectError(
      [&] {
        int32_t bad[2] = {1, config.vocab_size};
        kvrt_exec_tokens_constant(ctx.get(), 0, bad, 2);
      },
      "token " + std::to_string(config.vocab_size) +
          " at index 1 is outside the vocabulary");
  expectError(
      [&] {
        kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(3), "a");
        int64_t bounds[2];
        kvrt_exec_segment_bounds(ctx.get(), 0, view, "b", bounds);
      },
      "the view holds no tokens of segment @b");
  expectError(
      [&] {
        kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(3), "a");
        std::vector<float> q(2 * 3 * 7);
        kvrt_exec_tensor *query =
            kvrt_exec_tensor_create(ctx.get(), q.data(), 2, 3, 7);
        kvrt_exec_attention(ctx.get(), 0, nullptr, nullptr, model.get(), query,
                            &view, nullptr, 1, 0, 3, -1);
      },
      "attention: the query is 2 x 3 x 7, the model needs n x " +
          std::to_string(config.n_heads) + " x " +
          std::to_string(config.dim / config.n_heads));
  expectError(
      [&] {
        for (int i = 0; i <= KVRT_EXEC_MAX_CALL_DEPTH; ++i)
          kvrt_exec_call_enter(ctx.get(), 0);
      },
      "calls nest deeper than 64");
  expectError(
      [&] {
        kvrt_view *empty = kvrt_exec_empty(ctx.get(), 0);
        kvrt_view *result = nullptr;
        kvrt_exec_prefill(ctx.get(), 0, nullptr, nullptr, model.get(), &empty,
                          nullptr, 1, tokens(ids(3)), 0, 0, nullptr, 1, 3,
                          &result);
      },
      "the logits type expects 3 rows, the prefill computed 1");
  expectError([&] { kvrt_exec_tokens_empty(ctx.get(), 0, 5); },
              "tensor.empty of 5 tokens has undefined contents");
}

TEST_F(ExecRuntimeTest, AttentionAndMaterializeRunOnTheBackend) {
  // Two runs, the second shifted: attention through the exec ABI equals the
  // oracle's fused attention, and materialize gives the same attention with
  // every offset folded into the keys.
  kvrt_view *a = prefill(kvrt_exec_empty(ctx.get(), 0), ids(5), "a");
  kvrt_view *b = prefill(kvrt_exec_empty(ctx.get(), 0), ids(6, 20), "b");
  kvrt_view *views[2] = {a, b};
  int64_t offsets[2] = {0, 5};
  int64_t heads = config.n_heads, headSize = config.dim / config.n_heads;
  std::vector<float> q(2 * heads * headSize);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = float(int(i % 11) - 5) * 0.1f;
  kvrt_exec_tensor *query =
      kvrt_exec_tensor_create(ctx.get(), q.data(), 2, heads, headSize);
  kvrt_exec_tensor *out =
      kvrt_exec_attention(ctx.get(), 3, nullptr, nullptr, model.get(), query,
                          views, offsets, 2, 1, 9, -1);
  ASSERT_NE(out, nullptr) << kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(kvrt_exec_tensor_size(out, 0), 2);
  EXPECT_EQ(kvrt_exec_tensor_dim(ctx.get(), 4, out, 1), heads);

  kvrt_view *shifted = kvrt_exec_rope_shift(ctx.get(), 5, b, 5);
  kvrt_view *pair[2] = {a, shifted};
  kvrt_view *joined = kvrt_exec_concat(ctx.get(), 6, pair, 2);
  for (int64_t t = 0; t < 2; ++t) {
    std::vector<double> qd(q.begin() + t * heads * headSize,
                           q.begin() + (t + 1) * heads * headSize);
    std::vector<double> expected(heads * headSize);
    ASSERT_EQ(reference::attention(config, joined, 1, qd.data(), 9 + t,
                                   reference::ShiftMode::Fused,
                                   expected.data()),
              KVRT_OK);
    for (int64_t i = 0; i < heads * headSize; ++i)
      EXPECT_FLOAT_EQ(kvrt_exec_tensor_data(out)[t * heads * headSize + i],
                      float(expected[i]));
  }

  kvrt_view *physical = kvrt_exec_materialize(ctx.get(), 7, nullptr, nullptr,
                                              model.get(), joined);
  ASSERT_NE(physical, nullptr) << kvrt_exec_error_message(ctx.get());
  kvrt_run run;
  ASSERT_EQ(kvrt_view_get_run(physical, 1, &run), KVRT_OK);
  EXPECT_EQ(run.delta, 0);
  EXPECT_EQ(run.base_pos, 5);
  kvrt_exec_tensor *again =
      kvrt_exec_attention(ctx.get(), 8, nullptr, nullptr, model.get(), query,
                          &physical, nullptr, 1, 1, 9, 2);
  ASSERT_NE(again, nullptr) << kvrt_exec_error_message(ctx.get());
  for (int64_t i = 0; i < 2 * heads * headSize; ++i)
    EXPECT_NEAR(kvrt_exec_tensor_data(again)[i], kvrt_exec_tensor_data(out)[i],
                1e-5);
}

TEST_F(ExecRuntimeTest, GeneratedBackendsNeedTheForward) {
  // A backend that runs generated code refuses a call without the forward
  // of the model's config, and leaves the view as it was.
  std::unique_ptr<ComputeBackend> cpu = cpu::createCpuBackend();
  ContextPtr cpuCtx(createExecContext(*cpu, model.get(), pool.get()));
  kvrt_view *empty = kvrt_exec_empty(cpuCtx.get(), 0);
  std::vector<int32_t> values = ids(3);
  kvrt_exec_tokens *t =
      kvrt_exec_tokens_constant(cpuCtx.get(), 0, values.data(), 3);
  kvrt_view *result = nullptr;
  EXPECT_EQ(kvrt_exec_prefill(cpuCtx.get(), 9, nullptr, nullptr, model.get(),
                              &empty, nullptr, 1, t, 0, 0, nullptr, 0, -1,
                              &result),
            nullptr);
  EXPECT_EQ(kvrt_exec_error_site(cpuCtx.get()), 9);
  std::string message = kvrt_exec_error_message(cpuCtx.get());
  EXPECT_NE(message.find("no generated forward for the model"),
            std::string::npos)
      << message;
  EXPECT_EQ(kvrt_view_num_tokens(empty), 0);
}

TEST_F(ExecRuntimeTest, SymbolsListEveryEntryPoint) {
  int count = 0;
  bool prefillListed = false, parallelListed = false;
  for (const kvrt_exec_symbol *s = kvrt_exec_symbols(); s->name; ++s) {
    ++count;
    EXPECT_NE(s->address, nullptr) << s->name;
    prefillListed |= std::string(s->name) == "kvrt_exec_prefill";
    parallelListed |= std::string(s->name) == "kvrt_parallel_for";
  }
  EXPECT_TRUE(prefillListed);
  // The generated CPU forward's thread pool, bound by the JIT and kept
  // linked in kv-aot-run.
  EXPECT_TRUE(parallelListed);
  EXPECT_GE(count, 20);
}

} // namespace
