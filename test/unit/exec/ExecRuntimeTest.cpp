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
    ctx.reset(createExecContext(*backend, model.get(), pool.get(),
                                &reference::materialize));
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
                     const char *label, kvrt_exec_logits **logits = nullptr) {
    kvrt_view *result = nullptr;
    kvrt_exec_logits *l =
        kvrt_exec_prefill(ctx.get(), 1, model.get(), &view, nullptr, 1,
                          tokens(values), 0, 0, label, 0, -1, &result);
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
  ASSERT_EQ(backend->prefill(model.get(), empty, values.data(), 6, 0, "a",
                             false, &expected, &direct),
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

TEST_F(ExecRuntimeTest, PrefillOfNoTokensReturnsTheViewUnchanged) {
  kvrt_view *view = prefill(kvrt_exec_empty(ctx.get(), 0), ids(3), "a");
  kvrt_exec_logits *logits = nullptr;
  kvrt_view *same = prefill(view, {}, "b", &logits);
  EXPECT_EQ(same, view);
  EXPECT_EQ(kvrt_exec_logits_rows(logits), 0);
  EXPECT_EQ(kvrt_exec_logits_position(logits), 3);
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
  kvrt_view *repaired = kvrt_exec_selective_recompute(ctx.get(), 7, model.get(),
                                                      view, 4, 12, 0.25);
  ASSERT_NE(repaired, nullptr) << kvrt_exec_error_message(ctx.get());
  EXPECT_EQ(kvrt_exec_length(ctx.get(), repaired), 12);
  ASSERT_EQ(kvrt_exec_num_repairs(ctx.get()), 1);
  int64_t candidates = 0, chosen = 0;
  kvrt_exec_get_repair(ctx.get(), 0, &candidates, &chosen);
  EXPECT_EQ(candidates, 8);
  EXPECT_EQ(chosen, 2);
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
        kvrt_exec_materialize(ctx.get(), 0, model.get(), view);
      },
      "kv.materialize is implemented by the reference backend only");
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
        kvrt_exec_prefill(ctx.get(), 0, model.get(), &empty, nullptr, 1,
                          tokens(ids(3)), 0, 0, nullptr, 1, 3, &result);
      },
      "the logits type expects 3 rows, the prefill computed 1");
  expectError([&] { kvrt_exec_tokens_empty(ctx.get(), 0, 5); },
              "tensor.empty of 5 tokens has undefined contents");
}

TEST_F(ExecRuntimeTest, SymbolsListEveryEntryPoint) {
  int count = 0;
  bool prefillListed = false;
  for (const kvrt_exec_symbol *s = kvrt_exec_symbols(); s->name; ++s) {
    ++count;
    EXPECT_NE(s->address, nullptr) << s->name;
    prefillListed |= std::string(s->name) == "kvrt_exec_prefill";
  }
  EXPECT_TRUE(prefillListed);
  EXPECT_GE(count, 20);
}

} // namespace
