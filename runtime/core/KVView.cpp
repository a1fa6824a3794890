//===- KVView.cpp - Cache views: ordered runs over pool pages ---*- C++ -*-===//

#include "runtime/core/KVPool.h"
#include "runtime/core/Support.h"
#include "runtime/core/ViewRebuild.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace kvrt;

namespace {

/// Checks a run descriptor against the pool; the caller holds the mutex.
kvrt_status checkRun(const kvrt_pool &pool, const kvrt_run &run) {
  int64_t pageTokens = pool.config.page_tokens;
  if (run.n_tokens <= 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_append: run has n_tokens = ", run.n_tokens,
                    ", must be positive"));
  if (run.slot_begin < 0 || run.slot_begin >= pageTokens)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_append: slot_begin = ", run.slot_begin,
                    " is outside the first page [0, ", pageTokens, ")"));
  if (run.n_tokens > kMaxPosition)
    return fail(KVRT_ERR_INVALID_ARGUMENT, str("kvrt_view_append: n_tokens = ",
                                               run.n_tokens, " is too large"));
  int64_t needed =
      (run.slot_begin + run.n_tokens + pageTokens - 1) / pageTokens;
  if (run.n_pages != needed || !run.pages)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_append: run lists ", run.n_pages,
                    " pages, its slots [", run.slot_begin, ", ",
                    run.slot_begin + run.n_tokens, ") need ", needed));
  if (!run.tokens)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_view_append: run has no token ids");
  if (run.base_pos < 0 || run.base_pos > kMaxPosition - run.n_tokens ||
      std::llabs(run.delta) > kMaxPosition)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_append: base_pos ", run.base_pos, " or delta ",
                    run.delta, " is outside [0, 2^53) / [-2^53, 2^53]"));
  for (int64_t i = 0; i < run.n_pages; ++i) {
    int32_t page = run.pages[i];
    if (!pool.inUse(page))
      return fail(
          KVRT_ERR_INVALID_ARGUMENT,
          str("kvrt_view_append: page ", page, " is not an allocated page"));
    if (!pool.sealed[page])
      return fail(KVRT_ERR_STATE, str("kvrt_view_append: page ", page,
                                      " is not sealed; seal pages before "
                                      "they enter a view"));
  }
  return KVRT_OK;
}

/// Tokens [from, from + count) of `run` as a run of their own.
Run cutRun(const Run &run, int64_t pageTokens, int64_t from, int64_t count) {
  Run piece;
  int64_t firstSlot = run.slotBegin + from;
  int64_t firstPage = firstSlot / pageTokens;
  int64_t lastPage = (firstSlot + count - 1) / pageTokens;
  piece.pages.assign(run.pages.begin() + firstPage,
                     run.pages.begin() + lastPage + 1);
  piece.slotBegin = firstSlot % pageTokens;
  piece.nTokens = count;
  piece.basePos = run.basePos + from;
  piece.delta = run.delta;
  piece.tokens.assign(run.tokens.begin() + from,
                      run.tokens.begin() + from + count);
  piece.hasLabel = run.hasLabel;
  piece.label = run.label;
  return piece;
}

/// Hands a new view to the caller, converting exceptions.
template <typename Build> kvrt_status makeView(kvrt_view **out, Build &&build) {
  *out = nullptr;
  return guard([&] {
    kvrt_view *view = nullptr;
    if (kvrt_status s = build(view))
      return s;
    *out = view;
    return KVRT_OK;
  });
}

} // namespace

kvrt_view::kvrt_view(kvrt_pool *pool, std::vector<Run> runs)
    : pool(pool), runs(std::move(runs)) {
  kvrt_pool_retain(pool);
  std::lock_guard<std::mutex> lock(pool->mutex);
  pool->retainRuns(this->runs);
  for (const Run &run : this->runs)
    nTokens += run.nTokens;
}

kvrt_view::~kvrt_view() {
  {
    std::lock_guard<std::mutex> lock(pool->mutex);
    pool->releaseRuns(runs);
  }
  kvrt_pool_release(pool);
}

extern "C" kvrt_status kvrt_view_create(kvrt_pool *pool, kvrt_view **out) {
  if (!pool || !out)
    return nullArgument(__func__);
  return makeView(out, [&](kvrt_view *&view) {
    view = new kvrt_view(pool, {});
    return KVRT_OK;
  });
}

extern "C" void kvrt_view_retain(kvrt_view *view) { retain(view); }

extern "C" void kvrt_view_release(kvrt_view *view) { release(view); }

extern "C" kvrt_status kvrt_view_append(const kvrt_view *view,
                                        const kvrt_run *run, kvrt_view **out) {
  if (!view || !run || !out)
    return nullArgument(__func__);
  return makeView(out, [&](kvrt_view *&result) {
    {
      std::lock_guard<std::mutex> lock(view->pool->mutex);
      if (kvrt_status s = checkRun(*view->pool, *run))
        return s;
    }
    std::vector<Run> runs = view->runs;
    Run added;
    added.pages.assign(run->pages, run->pages + run->n_pages);
    added.slotBegin = run->slot_begin;
    added.nTokens = run->n_tokens;
    added.basePos = run->base_pos;
    added.delta = run->delta;
    added.tokens.assign(run->tokens, run->tokens + run->n_tokens);
    added.hasLabel = run->label != nullptr;
    added.label = run->label ? run->label : "";
    runs.push_back(std::move(added));
    result = new kvrt_view(view->pool, std::move(runs));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_view_concat(const kvrt_view *a, const kvrt_view *b,
                                        kvrt_view **out) {
  if (!a || !b || !out)
    return nullArgument(__func__);
  if (a->pool != b->pool)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_view_concat: the views belong to different pools");
  return makeView(out, [&](kvrt_view *&result) {
    std::vector<Run> runs = a->runs;
    runs.insert(runs.end(), b->runs.begin(), b->runs.end());
    result = new kvrt_view(a->pool, std::move(runs));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_view_slice(const kvrt_view *view, int64_t begin,
                                       int64_t end, kvrt_view **out) {
  if (!view || !out)
    return nullArgument(__func__);
  if (begin < 0 || begin > end || end > view->nTokens)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_slice: range [", begin, ", ", end,
                    ") is not within the view's ", view->nTokens, " tokens"));
  return makeView(out, [&](kvrt_view *&result) {
    std::vector<Run> runs;
    int64_t runStart = 0;
    for (const Run &run : view->runs) {
      int64_t from = std::max(begin, runStart) - runStart;
      int64_t to = std::min(end, runStart + run.nTokens) - runStart;
      if (from < to)
        runs.push_back(
            cutRun(run, view->pool->config.page_tokens, from, to - from));
      runStart += run.nTokens;
    }
    result = new kvrt_view(view->pool, std::move(runs));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_view_shift(const kvrt_view *view, int64_t delta,
                                       kvrt_view **out) {
  if (!view || !out)
    return nullArgument(__func__);
  for (const Run &run : view->runs)
    if (std::llabs(delta) > kMaxPosition ||
        std::llabs(run.delta + delta) > kMaxPosition)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("kvrt_view_shift: offset ", run.delta, " + ", delta,
                      " leaves [-2^53, 2^53]"));
  return makeView(out, [&](kvrt_view *&result) {
    std::vector<Run> runs = view->runs;
    for (Run &run : runs)
      run.delta += delta;
    result = new kvrt_view(view->pool, std::move(runs));
    return KVRT_OK;
  });
}

extern "C" int64_t kvrt_view_num_runs(const kvrt_view *view) {
  return view ? static_cast<int64_t>(view->runs.size()) : 0;
}

extern "C" int64_t kvrt_view_num_tokens(const kvrt_view *view) {
  return view ? view->nTokens : 0;
}

extern "C" kvrt_pool *kvrt_view_pool(const kvrt_view *view) {
  return view ? view->pool : nullptr;
}

extern "C" kvrt_status kvrt_view_get_run(const kvrt_view *view, int64_t index,
                                         kvrt_run *out) {
  if (!view || !out)
    return nullArgument(__func__);
  if (index < 0 || index >= static_cast<int64_t>(view->runs.size()))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_view_get_run: run ", index, " of a view with ",
                    view->runs.size(), " runs"));
  const Run &run = view->runs[index];
  out->pages = run.pages.data();
  out->n_pages = static_cast<int64_t>(run.pages.size());
  out->slot_begin = run.slotBegin;
  out->n_tokens = run.nTokens;
  out->base_pos = run.basePos;
  out->delta = run.delta;
  out->tokens = run.tokens.data();
  out->label = run.hasLabel ? run.label.c_str() : nullptr;
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_view_segment_bounds(const kvrt_view *view,
                                                const char *label,
                                                int64_t *begin, int64_t *end) {
  if (!view || !label || !begin || !end)
    return nullArgument(__func__);
  int64_t first = -1, last = -1, at = 0;
  bool broken = false;
  for (const Run &run : view->runs) {
    if (run.hasLabel && run.label == label) {
      if (first < 0)
        first = at;
      else if (last != at)
        broken = true;
      last = at + run.nTokens;
    }
    at += run.nTokens;
  }
  if (first < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("the view holds no tokens of segment @", label));
  if (broken)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("the tokens of segment @", label,
                    " are not contiguous in the view"));
  *begin = first;
  *end = last;
  return KVRT_OK;
}

//===----------------------------------------------------------------------===//
// Views over pages a backend wrote (ViewRebuild.h)
//===----------------------------------------------------------------------===//

namespace {

/// Whether the tokens a prefill wrote at `pos`, labelled `label`, continue
/// `last` (a view's last run) as one run: both unlabelled, `last` unshifted
/// and ending right before `pos`.
bool continuesRun(const kvrt_run &last, int64_t pos, const char *label) {
  return !label && !last.label && last.delta == 0 &&
         last.base_pos + last.n_tokens == pos;
}

/// A view of `pool` holding `runs`, in order.
kvrt_status viewOfRuns(kvrt_pool *pool, const std::vector<kvrt_run> &runs,
                       kvrt_view **out) {
  kvrt_view *result = nullptr;
  if (kvrt_status s = kvrt_view_create(pool, &result))
    return s;
  for (const kvrt_run &run : runs) {
    kvrt_view *longer = nullptr;
    kvrt_status s = kvrt_view_append(result, &run, &longer);
    kvrt_view_release(result);
    if (s)
      return s;
    result = longer;
  }
  *out = result;
  return KVRT_OK;
}

/// `view` with its last run, `last`, continued by the `n` tokens of a
/// prefill on the pages `pages` (replacing the last run's own from its
/// page `from` on).
kvrt_status joinLastRun(const kvrt_view *view, const kvrt_run &last,
                        int64_t from, const std::vector<int32_t> &pages,
                        const int32_t *tokens, int64_t n, kvrt_view **out) {
  std::vector<int32_t> runPages(last.pages, last.pages + from);
  runPages.insert(runPages.end(), pages.begin(), pages.end());
  std::vector<int32_t> runTokens(last.tokens, last.tokens + last.n_tokens);
  runTokens.insert(runTokens.end(), tokens, tokens + n);
  std::vector<kvrt_run> runs(kvrt_view_num_runs(view));
  for (int64_t r = 0; r + 1 < int64_t(runs.size()); ++r)
    if (kvrt_status s = kvrt_view_get_run(view, r, &runs[r]))
      return s;
  runs.back() = kvrt_run{runPages.data(),  int64_t(runPages.size()),
                         last.slot_begin,  last.n_tokens + n,
                         last.base_pos,    0,
                         runTokens.data(), nullptr};
  return viewOfRuns(kvrt_view_pool(view), runs, out);
}

/// Moves the `n` tokens written from slot 0 of the open page `page` to
/// slots kept .. kept+n-1 and copies slots 0 .. kept-1 of page `previous`
/// ahead of them, in every layer, KV head, K and V.
kvrt_status prependSlots(kvrt_pool *pool, const kvrt_page_layout &layout,
                         int32_t previous, int64_t kept, int32_t page,
                         int64_t n) {
  void *to = nullptr;
  const void *from = nullptr;
  if (kvrt_status s = kvrt_pool_page_bytes(pool, page, &to))
    return s;
  if (kvrt_status s = kvrt_pool_page_cbytes(pool, previous, &from))
    return s;
  const size_t slotBytes = size_t(layout.head_size) * layout.element_bytes;
  for (int64_t l = 0; l < layout.n_layers; ++l)
    for (int64_t h = 0; h < layout.n_kv_heads; ++h)
      for (int64_t c = 0; c < 2; ++c) {
        size_t at = size_t(l * layout.layer_stride + h * layout.head_stride +
                           c * layout.kv_stride) *
                    layout.element_bytes;
        auto *dst = static_cast<unsigned char *>(to) + at;
        std::memmove(dst + kept * slotBytes, dst, n * slotBytes);
        std::memcpy(dst, static_cast<const unsigned char *>(from) + at,
                    kept * slotBytes);
      }
  return KVRT_OK;
}

} // namespace

kvrt_status kvrt::appendPrefilled(const kvrt_view *view, const PageRefs &pages,
                                  const int32_t *tokens, int64_t n, int64_t pos,
                                  const char *label, kvrt_view **out,
                                  TailPacking packing) {
  auto sealAll = [&]() -> kvrt_status {
    for (int32_t page : pages.pages)
      if (kvrt_status s = kvrt_pool_seal_page(pages.pool, page))
        return s;
    return KVRT_OK;
  };
  kvrt_run last;
  int64_t runs = kvrt_view_num_runs(view);
  if (packing == TailPacking::Pack && runs > 0 &&
      kvrt_view_get_run(view, runs - 1, &last) == KVRT_OK &&
      continuesRun(last, pos, label)) {
    kvrt_page_layout layout;
    if (kvrt_status s = kvrt_pool_get_layout(pages.pool, &layout))
      return s;
    // The last run's tokens on its last page (from slot 0 there, unless the
    // run starts on that page).
    int64_t kept = (last.slot_begin + last.n_tokens) % layout.page_tokens;
    bool fromSlot0 = last.n_pages > 1 || last.slot_begin == 0;
    if (kept != 0 && fromSlot0 && pages.pages.size() == 1 &&
        kept + n <= layout.page_tokens) {
      // The new tokens fit on that page: the prefill's page (open, written
      // from slot 0) takes the page's tokens first and its own after them,
      // and replaces it in the run.
      int32_t page = pages.pages.front();
      if (kvrt_status s = prependSlots(
              pages.pool, layout, last.pages[last.n_pages - 1], kept, page, n))
        return s;
      if (kvrt_status s = sealAll())
        return s;
      return joinLastRun(view, last, last.n_pages - 1, {page}, tokens, n, out);
    }
    if (kept == 0) {
      // The last run ends at its last page's end: the new pages follow it.
      if (kvrt_status s = sealAll())
        return s;
      return joinLastRun(view, last, last.n_pages, pages.pages, tokens, n, out);
    }
  }
  if (kvrt_status s = sealAll())
    return s;
  kvrt_run run{pages.pages.data(),
               int64_t(pages.pages.size()),
               0,
               n,
               pos,
               0,
               tokens,
               label};
  return kvrt_view_append(view, &run, out);
}

kvrt_status ShiftedRuns::collect(const kvrt_view *view, RewriteSlots slots) {
  assert(held.pages.empty() && "ShiftedRuns::collect called twice");
  kvrt_pool *pool = kvrt_view_pool(view);
  kvrt_page_layout layout;
  if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
    return s;
  runs.assign(kvrt_view_num_runs(view), kvrt_run{});
  int64_t total = 0;
  for (int64_t r = 0; r < int64_t(runs.size()); ++r) {
    kvrt_run &run = runs[r];
    if (kvrt_status s = kvrt_view_get_run(view, r, &run))
      return s;
    if (run.delta == 0)
      continue;
    if (run.base_pos + run.delta < 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("materialize: a run at stored position ", run.base_pos,
                      " shifted by ", run.delta,
                      " would start at a negative position"));
    kvrt_run to = run;
    if (slots == RewriteSlots::Packed) {
      to.slot_begin = 0;
      to.n_pages = (run.n_tokens + layout.page_tokens - 1) / layout.page_tokens;
    }
    to.base_pos = run.base_pos + run.delta;
    to.delta = 0;
    total += to.n_pages;
    shifted.push_back({run, to});
  }
  std::vector<int32_t> pages(total);
  if (total > 0)
    if (kvrt_status s = kvrt_pool_alloc_pages(pool, total, pages.data()))
      return s;
  held.pool = pool;
  held.pages = std::move(pages);
  int64_t next = 0;
  for (Shift &shift : shifted) {
    shift.to.pages = held.pages.data() + next;
    next += shift.to.n_pages;
  }
  return KVRT_OK;
}

kvrt_status ShiftedRuns::rebuild(kvrt_view **out) {
  *out = nullptr;
  for (int32_t page : held.pages)
    if (kvrt_status s = kvrt_pool_seal_page(held.pool, page))
      return s;
  std::vector<kvrt_run> kept;
  size_t next = 0;
  for (const kvrt_run &run : runs)
    kept.push_back(run.delta != 0 ? shifted[next++].to : run);
  return viewOfRuns(held.pool, kept, out);
}
