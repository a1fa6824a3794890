//===- FaultInjectionTest.cpp - Every allocation failing, one at a time ---===//
//
// The runtime's fault hook (runtime/core/KVFaults.h) fails the n-th page,
// weight or scratch allocation. For a prefill, an edit (cot_slice's plan:
// slices, prefills of the new fact and the dependent segment, a shifted
// reuse, the answer), a compose and a selective recompute, on the reference
// and the generated CPU backend, every n is tried in turn until the
// operation needs fewer allocations: each failure is reported with the
// injected fault's message, the cache built before is bit-identical after
// (every layer's K and V of every token), and the pool holds exactly the
// pages it held before (nothing leaks; under ASan, no memory either).
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Compiler.h"
#include "runtime/core/ComputeBackend.h"
#include "runtime/core/KVFaults.h"
#include "runtime/core/SelectiveRecompute.h"
#include "runtime/cpu/CpuBackend.h"
#include "test/unit/TestSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

using namespace kvir;
using namespace kvir::test;

namespace {

/// Every layer's K and V of every token of `view`, in order.
std::vector<float> cacheContents(const kvrt_model_config &c,
                                 const kvrt_view *view) {
  std::vector<float> all;
  int64_t kvDim = int64_t(c.n_kv_heads) * (c.dim / c.n_heads);
  kvrt_pool *pool = kvrt_view_pool(view);
  for (int64_t r = 0; r < kvrt_view_num_runs(view); ++r) {
    kvrt_run run;
    EXPECT_EQ(kvrt_view_get_run(view, r, &run), KVRT_OK);
    std::vector<float> k(run.n_tokens * kvDim), v(run.n_tokens * kvDim);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      EXPECT_EQ(kvrt_pool_read_kv(pool, run.pages, run.slot_begin, run.n_tokens,
                                  l, k.data(), v.data()),
                KVRT_OK);
      all.insert(all.end(), k.begin(), k.end());
      all.insert(all.end(), v.begin(), v.end());
    }
  }
  return all;
}

int64_t pagesInUse(const kvrt_pool *pool) {
  kvrt_pool_stats stats;
  EXPECT_EQ(kvrt_pool_get_stats(pool, &stats), KVRT_OK);
  return stats.pages_in_use;
}

/// An operation over the base cache; returns the status and the views it
/// built in `made` (released by the harness).
using Operation =
    std::function<kvrt_status(const kvrt_view *base, std::vector<ViewPtr> &)>;

class FaultInjectionTest : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    config = makeConfig(64, 96, 3, 4, 2, 128, 256);
    model = syntheticModel(config, 11);
    pool = poolFor(model.get(), 256, 8);
    if (std::string(GetParam()) == "cpu") {
      ASSERT_EQ(
          compiler::compileForward(config, compiler::Target::Cpu, &forward),
          KVRT_OK)
          << kvrt_last_error();
      backend = cpu::createCpuBackend();
    } else {
      backend = createReferenceBackend();
    }
    // The base cache: four segments of 12, 5, 9 and 7 tokens, labelled.
    ViewPtr view = emptyView(pool.get());
    const char *labels[] = {"system", "fact", "tools", "think"};
    int64_t sizes[] = {12, 5, 9, 7};
    int64_t pos = 0;
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> t = randomTokens(sizes[i], config.vocab_size, i + 1);
      std::vector<float> logits;
      kvrt_view *next = nullptr;
      ASSERT_EQ(backend->prefill(forward, model.get(), view.get(), t.data(),
                                 sizes[i], pos, labels[i],
                                 kvir::LogitRows::last(), &logits, &next),
                KVRT_OK)
          << kvrt_last_error();
      view.reset(next);
      pos += sizes[i];
    }
    base = std::move(view);
  }

  void TearDown() override {
    kvrt_fault_arm(KVRT_FAULT_PAGES, 0);
    kvrt_fault_arm(KVRT_FAULT_SCRATCH, 0);
  }

  /// Fails allocation n = 1, 2, ... of `kind` during `op` until it
  /// succeeds; checks every failure. Returns the allocations a success took.
  int64_t everyFault(kvrt_fault_kind kind, const Operation &op) {
    std::vector<float> before = cacheContents(config, base.get());
    int64_t pages = pagesInUse(pool.get());
    for (int64_t n = 1; n < 10000; ++n) {
      std::vector<ViewPtr> made;
      kvrt_fault_arm(kind, n);
      kvrt_status status = op(base.get(), made);
      int64_t count = kvrt_fault_count(kind);
      kvrt_fault_arm(kind, 0);
      if (status == KVRT_OK) {
        // The fault was armed beyond the last allocation: nothing failed.
        EXPECT_LT(count, n) << "allocation " << n << " failed silently";
        made.clear();
        EXPECT_EQ(pagesInUse(pool.get()), pages);
        return count;
      }
      std::string message = kvrt_last_error();
      EXPECT_NE(message.find("injected fault"), std::string::npos)
          << "allocation " << n << ": " << message;
      EXPECT_EQ(status, kind == KVRT_FAULT_PAGES ? KVRT_ERR_POOL_EXHAUSTED
                                                 : KVRT_ERR_OUT_OF_MEMORY)
          << message;
      made.clear();
      EXPECT_EQ(cacheContents(config, base.get()), before)
          << "allocation " << n << " changed the cache";
      EXPECT_EQ(pagesInUse(pool.get()), pages)
          << "allocation " << n << " leaked pages";
      if (testing::Test::HasFailure())
        return -1;
    }
    ADD_FAILURE() << "the operation never succeeded";
    return -1;
  }

  /// A prefill of `n` tokens over `view` at its end, kept in `made`.
  kvrt_status prefill(const kvrt_view *view, int64_t n, uint32_t seed,
                      const char *label, std::vector<ViewPtr> &made) {
    std::vector<int32_t> t = randomTokens(n, config.vocab_size, seed);
    std::vector<float> logits;
    kvrt_view *out = nullptr;
    kvrt_status s = backend->prefill(
        forward, model.get(), view, t.data(), n,
        kvrt_view_num_tokens(view) == 0 ? 0 : endPositionOf(view), label,
        kvir::LogitRows::all(), &logits, &out);
    if (s == KVRT_OK)
      made.emplace_back(out);
    return s;
  }

  static int64_t endPositionOf(const kvrt_view *view) {
    int64_t end = 0;
    for (int64_t r = 0; r < kvrt_view_num_runs(view); ++r) {
      kvrt_run run;
      kvrt_view_get_run(view, r, &run);
      end = std::max(end, run.base_pos + run.delta + run.n_tokens);
    }
    return end;
  }

  kvrt_model_config config;
  ModelPtr model;
  PoolPtr pool;
  Forward forward;
  std::unique_ptr<ComputeBackend> backend;
  ViewPtr base;
};

// A prefill over the cache fails at every page and scratch allocation
// without touching it.
TEST_P(FaultInjectionTest, Prefill) {
  auto op = [&](const kvrt_view *base, std::vector<ViewPtr> &made) {
    return prefill(base, 20, 99, "answer", made);
  };
  EXPECT_GE(everyFault(KVRT_FAULT_PAGES, op), 1);
  EXPECT_GE(everyFault(KVRT_FAULT_SCRATCH, op), 1);
}

// cot_slice's edit of @fact (5 -> 8 tokens): the prefix kept, the new fact
// and the dependent @think prefilled, @tools reused shifted by 3, the
// answer prefilled over all of it.
TEST_P(FaultInjectionTest, Edit) {
  auto op = [&](const kvrt_view *base,
                std::vector<ViewPtr> &made) -> kvrt_status {
    kvrt_view *prefix = nullptr, *tools = nullptr, *moved = nullptr;
    if (kvrt_status s = kvrt_view_slice(base, 0, 12, &prefix))
      return s;
    made.emplace_back(prefix);
    if (kvrt_status s = prefill(prefix, 8, 50, "fact", made))
      return s;
    if (kvrt_status s = kvrt_view_slice(base, 17, 26, &tools))
      return s;
    made.emplace_back(tools);
    if (kvrt_status s = kvrt_view_shift(tools, 3, &moved))
      return s;
    made.emplace_back(moved);
    kvrt_view *joined = nullptr;
    if (kvrt_status s = kvrt_view_concat(made[1].get(), moved, &joined))
      return s;
    made.emplace_back(joined);
    if (kvrt_status s = prefill(joined, 7, 51, "think", made))
      return s;
    return prefill(made.back().get(), 4, 52, "answer", made);
  };
  EXPECT_GE(everyFault(KVRT_FAULT_PAGES, op), 3);
  EXPECT_GE(everyFault(KVRT_FAULT_SCRATCH, op), 3);
}

// A block prefilled on its own, composed after the cache by a shift, and an
// answer over both.
TEST_P(FaultInjectionTest, Compose) {
  auto op = [&](const kvrt_view *base,
                std::vector<ViewPtr> &made) -> kvrt_status {
    ViewPtr empty = emptyView(pool.get());
    if (kvrt_status s = prefill(empty.get(), 10, 60, "skill", made))
      return s;
    kvrt_view *moved = nullptr, *joined = nullptr;
    if (kvrt_status s =
            kvrt_view_shift(made.back().get(), endPositionOf(base), &moved))
      return s;
    made.emplace_back(moved);
    if (kvrt_status s = kvrt_view_concat(base, moved, &joined))
      return s;
    made.emplace_back(joined);
    return prefill(joined, 5, 61, "question", made);
  };
  EXPECT_GE(everyFault(KVRT_FAULT_PAGES, op), 2);
  EXPECT_GE(everyFault(KVRT_FAULT_SCRATCH, op), 2);
}

// A selective recompute of half of @tools, shifted by 2: the deviation scan
// and the prefills of the chosen tokens.
TEST_P(FaultInjectionTest, SelectiveRecompute) {
  auto op = [&](const kvrt_view *base,
                std::vector<ViewPtr> &made) -> kvrt_status {
    kvrt_view *prefix = nullptr, *tools = nullptr, *moved = nullptr,
              *joined = nullptr, *out = nullptr;
    if (kvrt_status s = kvrt_view_slice(base, 0, 17, &prefix))
      return s;
    made.emplace_back(prefix);
    if (kvrt_status s = kvrt_view_slice(base, 17, 26, &tools))
      return s;
    made.emplace_back(tools);
    if (kvrt_status s = kvrt_view_shift(tools, 2, &moved))
      return s;
    made.emplace_back(moved);
    if (kvrt_status s = kvrt_view_concat(prefix, moved, &joined))
      return s;
    made.emplace_back(joined);
    if (kvrt_status s = selectiveRecompute(*backend, forward, model.get(),
                                           joined, 17, 26, 0.5, &out))
      return s;
    made.emplace_back(out);
    return KVRT_OK;
  };
  EXPECT_GE(everyFault(KVRT_FAULT_PAGES, op), 1);
  EXPECT_GE(everyFault(KVRT_FAULT_SCRATCH, op), 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultInjectionTest,
                         ::testing::Values("reference", "cpu"),
                         [](const auto &info) {
                           return std::string(info.param);
                         });

// A model's weights: loading and building a synthetic model fail cleanly
// and leave nothing behind.
TEST(FaultInjection, Weights) {
  kvrt_model_config c = makeConfig(64, 96, 2, 4, 2, 64, 128);
  kvrt_model *model = nullptr;
  kvrt_fault_arm(KVRT_FAULT_WEIGHTS, 1);
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &model), KVRT_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(kvrt_last_error()).find("injected fault at weight"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(kvrt_fault_count(KVRT_FAULT_WEIGHTS), 1);
  if (haveTestModel()) {
    kvrt_fault_arm(KVRT_FAULT_WEIGHTS, 1);
    EXPECT_EQ(kvrt_model_load(testModelPath().c_str(), &model),
              KVRT_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(model, nullptr);
  }
  kvrt_fault_arm(KVRT_FAULT_WEIGHTS, 0);
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &model), KVRT_OK);
  kvrt_model_release(model);
}

} // namespace
