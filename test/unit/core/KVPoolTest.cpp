//===- KVPoolTest.cpp - Paged KV pool, pages and views ----------*- C++ -*-===//

#include "test/unit/TestSupport.h"

#include <numeric>

using namespace kvir::test;

namespace {

/// Fixture: a pool of 2 layers x 2 KV heads x head size 4, 4-token pages.
class KVPoolTest : public ::testing::Test {
protected:
  void SetUp() override {
    kvrt_pool_config config{2, 2, 4, 4, 8, KVRT_KV_F32};
    kvrt_pool *raw = nullptr;
    ASSERT_EQ(kvrt_pool_create(&config, &raw), KVRT_OK) << kvrt_last_error();
    pool.reset(raw);
    ASSERT_EQ(kvrt_pool_get_layout(pool.get(), &layout), KVRT_OK);
  }

  /// Allocates, fills (value = page * 1000 + index in page) and seals the
  /// pages of an `n`-token run, returning their ids (the caller's refs).
  std::vector<int32_t> sealedPages(int64_t n) {
    std::vector<int32_t> pages((n + 3) / 4);
    EXPECT_EQ(kvrt_pool_alloc_pages(pool.get(), pages.size(), pages.data()),
              KVRT_OK)
        << kvrt_last_error();
    for (int32_t page : pages) {
      float *data = nullptr;
      EXPECT_EQ(kvrt_pool_page_data(pool.get(), page, &data), KVRT_OK);
      for (int64_t i = 0; i < layout.page_stride; ++i)
        data[i] = float(page * 1000 + i);
      EXPECT_EQ(kvrt_pool_seal_page(pool.get(), page), KVRT_OK);
    }
    return pages;
  }

  /// `view` plus a run of `n` tokens (ids first, first+1, ...) over fresh
  /// pages; the fixture drops its own page references.
  ViewPtr appendRun(const kvrt_view *view, int64_t n, int64_t basePos,
                    int64_t delta, int32_t first, const char *label) {
    std::vector<int32_t> pages = sealedPages(n);
    std::vector<int32_t> tokens(n);
    std::iota(tokens.begin(), tokens.end(), first);
    kvrt_run run{pages.data(), int64_t(pages.size()), 0,    n, basePos,
                 delta,        tokens.data(),         label};
    kvrt_view *out = nullptr;
    EXPECT_EQ(kvrt_view_append(view, &run, &out), KVRT_OK) << kvrt_last_error();
    for (int32_t page : pages)
      kvrt_pool_release_page(pool.get(), page);
    return ViewPtr(out);
  }

  kvrt_pool_stats stats() {
    kvrt_pool_stats s;
    EXPECT_EQ(kvrt_pool_get_stats(pool.get(), &s), KVRT_OK);
    return s;
  }

  kvrt_run run(const kvrt_view *view, int64_t index) {
    kvrt_run r;
    EXPECT_EQ(kvrt_view_get_run(view, index, &r), KVRT_OK) << kvrt_last_error();
    return r;
  }

  PoolPtr pool;
  kvrt_page_layout layout;
};

TEST_F(KVPoolTest, LayoutFollowsTheHeader) {
  EXPECT_EQ(layout.token_stride, 4);
  EXPECT_EQ(layout.kv_stride, 4 * 4);
  EXPECT_EQ(layout.head_stride, 2 * 16);
  EXPECT_EQ(layout.layer_stride, 2 * 32);
  EXPECT_EQ(layout.page_stride, 2 * 64);
  EXPECT_EQ(layout.page_bytes, 128 * 4);
  int32_t pages[2];
  ASSERT_EQ(kvrt_pool_alloc_pages(pool.get(), 2, pages), KVRT_OK);
  float *data = nullptr;
  ASSERT_EQ(kvrt_pool_page_data(pool.get(), pages[1], &data), KVRT_OK);
  // (layer 1, kv head 0, V, slot 2, dim 3) through the header's formula.
  EXPECT_EQ(data,
            static_cast<float *>(layout.base) + pages[1] * layout.page_stride);
  data[1 * layout.layer_stride + 0 * layout.head_stride + layout.kv_stride +
       2 * layout.token_stride + 3] = 7.5f;
  const float *read = nullptr;
  ASSERT_EQ(kvrt_pool_page_cdata(pool.get(), pages[1], &read), KVRT_OK);
  EXPECT_EQ(read[64 + 16 + 8 + 3], 7.5f);
  for (int32_t page : pages)
    kvrt_pool_release_page(pool.get(), page);
}

TEST_F(KVPoolTest, RefcountsAndAccounting) {
  EXPECT_EQ(stats().pages_in_use, 0);
  ViewPtr empty = emptyView(pool.get());
  ViewPtr a = appendRun(empty.get(), 6, 0, 0, 100, "a"); // 2 pages
  kvrt_run ra = run(a.get(), 0);
  int32_t firstPage = ra.pages[0];
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), firstPage), 1);
  EXPECT_EQ(stats().pages_in_use, 2);
  EXPECT_EQ(stats().bytes_in_use, 2 * layout.page_bytes);
  {
    ViewPtr shifted;
    kvrt_view *out = nullptr;
    ASSERT_EQ(kvrt_view_shift(a.get(), 5, &out), KVRT_OK);
    shifted.reset(out);
    EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), ra.pages[0]), 2);
    EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), ra.pages[1]), 2);
    ViewPtr b = appendRun(shifted.get(), 3, 6, 0, 200, nullptr);
    EXPECT_EQ(stats().pages_in_use, 3);
    EXPECT_EQ(stats().peak_pages, 3);
  }
  // The shifted view and b are gone: their new page was freed.
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), ra.pages[0]), 1);
  EXPECT_EQ(stats().pages_in_use, 2);
  EXPECT_EQ(stats().peak_bytes, 3 * layout.page_bytes);
  kvrt_view_retain(a.get());
  kvrt_view_release(a.get());
  EXPECT_EQ(stats().pages_in_use, 2);
  a.reset(); // ra's pointers die with the view
  EXPECT_EQ(stats().pages_in_use, 0);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), firstPage), 0);
}

TEST_F(KVPoolTest, SealedPagesAreImmutable) {
  std::vector<int32_t> pages = sealedPages(4);
  float *data = nullptr;
  EXPECT_EQ(kvrt_pool_page_data(pool.get(), pages[0], &data), KVRT_ERR_STATE);
  EXPECT_NE(std::string(kvrt_last_error()).find("sealed"), std::string::npos);
  EXPECT_EQ(kvrt_pool_page_is_sealed(pool.get(), pages[0]), 1);
  kvrt_pool_release_page(pool.get(), pages[0]);
  EXPECT_EQ(kvrt_pool_page_is_sealed(pool.get(), pages[0]), 0);
  EXPECT_EQ(kvrt_pool_release_page(pool.get(), pages[0]),
            KVRT_ERR_INVALID_ARGUMENT);
}

TEST_F(KVPoolTest, CopyOnWrite) {
  ViewPtr empty = emptyView(pool.get());
  ViewPtr a = appendRun(empty.get(), 4, 0, 0, 1, "a");
  int32_t shared = run(a.get(), 0).pages[0];
  const float *original = nullptr;
  ASSERT_EQ(kvrt_pool_page_cdata(pool.get(), shared, &original), KVRT_OK);
  float before = original[5];

  // Take a reference of our own, then ask to write: we get a copy.
  ASSERT_EQ(kvrt_pool_retain_page(pool.get(), shared), KVRT_OK);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), shared), 2);
  int32_t copy = -1;
  ASSERT_EQ(kvrt_pool_cow(pool.get(), shared, &copy), KVRT_OK);
  EXPECT_NE(copy, shared);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), shared), 1);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), copy), 1);
  float *data = nullptr;
  ASSERT_EQ(kvrt_pool_page_data(pool.get(), copy, &data), KVRT_OK);
  EXPECT_EQ(data[5], before);
  data[5] = -1.0f;
  EXPECT_EQ(original[5], before); // the view's page is untouched

  // An open page we alone hold is written in place.
  int32_t again = -1;
  ASSERT_EQ(kvrt_pool_cow(pool.get(), copy, &again), KVRT_OK);
  EXPECT_EQ(again, copy);
  kvrt_pool_release_page(pool.get(), copy);
}

TEST_F(KVPoolTest, ExhaustionLeavesViewsIntact) {
  ViewPtr empty = emptyView(pool.get());
  ViewPtr a = appendRun(empty.get(), 24, 0, 0, 10, "big"); // 6 of 8 pages
  kvrt_run before = run(a.get(), 0);
  std::vector<int32_t> pagesBefore(before.pages, before.pages + before.n_pages);
  kvrt_pool_stats statsBefore = stats();

  int32_t pages[3] = {-1, -1, -1};
  EXPECT_EQ(kvrt_pool_alloc_pages(pool.get(), 3, pages),
            KVRT_ERR_POOL_EXHAUSTED);
  EXPECT_NE(std::string(kvrt_last_error()).find("need 3 pages, 2 of 8 free"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(pages[0], -1);
  // COW of a shared page needs a free page too: fill the pool, then try.
  int32_t last[2];
  ASSERT_EQ(kvrt_pool_alloc_pages(pool.get(), 2, last), KVRT_OK);
  ASSERT_EQ(kvrt_pool_retain_page(pool.get(), pagesBefore[0]), KVRT_OK);
  int32_t copy = -1;
  EXPECT_EQ(kvrt_pool_cow(pool.get(), pagesBefore[0], &copy),
            KVRT_ERR_POOL_EXHAUSTED);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), pagesBefore[0]), 2);
  kvrt_pool_release_page(pool.get(), pagesBefore[0]);
  for (int32_t page : last)
    kvrt_pool_release_page(pool.get(), page);

  kvrt_run after = run(a.get(), 0);
  EXPECT_EQ(after.n_tokens, 24);
  EXPECT_EQ(std::vector<int32_t>(after.pages, after.pages + after.n_pages),
            pagesBefore);
  EXPECT_EQ(after.tokens[23], 33);
  for (int32_t page : pagesBefore) {
    EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), page), 1);
    const float *data = nullptr;
    ASSERT_EQ(kvrt_pool_page_cdata(pool.get(), page, &data), KVRT_OK);
    EXPECT_EQ(data[7], float(page * 1000 + 7));
  }
  EXPECT_EQ(stats().pages_in_use, statsBefore.pages_in_use);
}

TEST_F(KVPoolTest, SliceConcatShift) {
  ViewPtr empty = emptyView(pool.get());
  ViewPtr a = appendRun(empty.get(), 10, 0, 0, 0, "sys"); // pages p0 p1 p2
  ViewPtr ab = appendRun(a.get(), 5, 10, 3, 100, "tool"); // 2 more pages
  EXPECT_EQ(kvrt_view_num_runs(ab.get()), 2);
  EXPECT_EQ(kvrt_view_num_tokens(ab.get()), 15);
  kvrt_run first = run(ab.get(), 0);

  // Tokens [5, 12): the tail of run 0 from slot 5 (page 1, slot 1) and the
  // head of run 1.
  kvrt_view *raw = nullptr;
  ASSERT_EQ(kvrt_view_slice(ab.get(), 5, 12, &raw), KVRT_OK);
  ViewPtr slice(raw);
  ASSERT_EQ(kvrt_view_num_runs(slice.get()), 2);
  kvrt_run s0 = run(slice.get(), 0), s1 = run(slice.get(), 1);
  EXPECT_EQ(s0.n_pages, 2);
  EXPECT_EQ(s0.pages[0], first.pages[1]);
  EXPECT_EQ(s0.slot_begin, 1);
  EXPECT_EQ(s0.n_tokens, 5);
  EXPECT_EQ(s0.base_pos, 5);
  EXPECT_EQ(s0.tokens[0], 5);
  EXPECT_STREQ(s0.label, "sys");
  EXPECT_EQ(s1.n_tokens, 2);
  EXPECT_EQ(s1.delta, 3);
  EXPECT_EQ(s1.base_pos, 10);
  EXPECT_EQ(s1.tokens[1], 101);
  EXPECT_STREQ(s1.label, "tool");
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), first.pages[0]), 2);
  EXPECT_EQ(kvrt_pool_page_refcount(pool.get(), first.pages[1]), 3);

  ASSERT_EQ(kvrt_view_shift(slice.get(), -4, &raw), KVRT_OK);
  ViewPtr shifted(raw);
  EXPECT_EQ(run(shifted.get(), 0).delta, -4);
  EXPECT_EQ(run(shifted.get(), 1).delta, -1);
  EXPECT_EQ(run(slice.get(), 1).delta, 3); // inputs are values

  ASSERT_EQ(kvrt_view_concat(shifted.get(), a.get(), &raw), KVRT_OK);
  ViewPtr joined(raw);
  EXPECT_EQ(kvrt_view_num_runs(joined.get()), 3);
  EXPECT_EQ(kvrt_view_num_tokens(joined.get()), 17);
  EXPECT_EQ(run(joined.get(), 2).label, std::string("sys"));

  ASSERT_EQ(kvrt_view_slice(ab.get(), 4, 4, &raw), KVRT_OK);
  ViewPtr none(raw);
  EXPECT_EQ(kvrt_view_num_runs(none.get()), 0);
  EXPECT_EQ(kvrt_view_slice(ab.get(), 3, 16, &raw), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("15 tokens"),
            std::string::npos);
}

TEST_F(KVPoolTest, AppendValidatesRuns) {
  ViewPtr empty = emptyView(pool.get());
  int32_t pages[2];
  ASSERT_EQ(kvrt_pool_alloc_pages(pool.get(), 2, pages), KVRT_OK);
  std::vector<int32_t> tokens(8, 1);
  kvrt_run r{pages, 2, 0, 8, 0, 0, tokens.data(), nullptr};
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvrt_view_append(empty.get(), &r, &out), KVRT_ERR_STATE);
  EXPECT_NE(std::string(kvrt_last_error()).find("not sealed"),
            std::string::npos);
  for (int32_t page : pages)
    kvrt_pool_seal_page(pool.get(), page);
  r.n_pages = 1;
  EXPECT_EQ(kvrt_view_append(empty.get(), &r, &out), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("need 2"), std::string::npos);
  r.n_pages = 2;
  r.slot_begin = 4;
  EXPECT_EQ(kvrt_view_append(empty.get(), &r, &out), KVRT_ERR_INVALID_ARGUMENT);
  r.slot_begin = 2;
  r.n_tokens = 6;
  EXPECT_EQ(kvrt_view_append(empty.get(), &r, &out), KVRT_OK)
      << kvrt_last_error();
  ViewPtr ok(out);
  EXPECT_EQ(kvrt_view_get_run(ok.get(), 1, &r), KVRT_ERR_INVALID_ARGUMENT);
  for (int32_t page : pages)
    kvrt_pool_release_page(pool.get(), page);
  EXPECT_EQ(kvrt_view_shift(ok.get(), KVRT_MAX_POSITION + 1, &out),
            KVRT_ERR_INVALID_ARGUMENT);
}

TEST(KVPoolConfigTest, RejectsBadConfigs) {
  kvrt_pool_config config{2, 2, 4, 0, 8, KVRT_KV_F32};
  kvrt_pool *pool = nullptr;
  EXPECT_EQ(kvrt_pool_create(&config, &pool), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("page_tokens = 0"),
            std::string::npos);
  config = {2, 2, 4, 16, int64_t(1) << 40, KVRT_KV_F32};
  EXPECT_EQ(kvrt_pool_create(&config, &pool), KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(pool, nullptr);
}

} // namespace
