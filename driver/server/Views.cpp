//===- Views.cpp - View bookkeeping of kv-serve's contexts ------*- C++ -*-===//

#include "driver/server/Views.h"

#include <cstring>

using namespace kvir;
using namespace kvir::serve;

namespace {

std::string runtimeError(const char *what) {
  return std::string(what) + ": " + kvrt_last_error();
}

/// `acc` followed by tokens [a, b) of `run` labelled `label`.
bool appendPiece(exec::ViewRef &acc, const kvrt_run &run, int64_t a, int64_t b,
                 const char *label, int64_t pageTokens, std::string &error) {
  int64_t first = run.slot_begin + a, last = run.slot_begin + b - 1;
  kvrt_run piece = run;
  piece.pages = run.pages + first / pageTokens;
  piece.n_pages = last / pageTokens - first / pageTokens + 1;
  piece.slot_begin = first % pageTokens;
  piece.n_tokens = b - a;
  piece.base_pos = run.base_pos + a;
  piece.tokens = run.tokens + a;
  piece.label = label;
  kvrt_view *next = nullptr;
  if (kvrt_view_append(acc.get(), &piece, &next)) {
    error = runtimeError("relabelling a cache");
    return false;
  }
  acc = exec::adoptView(next);
  return true;
}

int64_t pageTokensOf(const kvrt_view *view) {
  kvrt_page_layout layout;
  if (kvrt_pool_get_layout(kvrt_view_pool(view), &layout))
    return 0;
  return layout.page_tokens;
}

/// References to freshly allocated pages, released unless handed on.
struct FreshPages {
  kvrt_pool *pool;
  std::vector<int32_t> pages;
  ~FreshPages() {
    for (int32_t page : pages)
      kvrt_pool_release_page(pool, page);
  }
};

} // namespace

exec::ViewRef kvir::serve::sliceView(const kvrt_view *view, int64_t begin,
                                     int64_t end, std::string &error) {
  kvrt_view *out = nullptr;
  if (kvrt_view_slice(view, begin, end, &out)) {
    error = runtimeError("slicing a cache");
    return nullptr;
  }
  return exec::adoptView(out);
}

bool kvir::serve::relabel(const kvrt_view *view, const std::vector<Part> &parts,
                          exec::ViewRef &out, std::string &error) {
  int64_t total = 0;
  for (const Part &p : parts)
    total += p.tokens;
  if (total != kvrt_view_num_tokens(view)) {
    error = "relabelling a cache of " +
            std::to_string(kvrt_view_num_tokens(view)) +
            " tokens by segments of " + std::to_string(total);
    return false;
  }
  int64_t pageTokens = pageTokensOf(view);
  kvrt_view *empty = nullptr;
  if (!pageTokens || kvrt_view_create(kvrt_view_pool(view), &empty)) {
    error = runtimeError("relabelling a cache");
    return false;
  }
  exec::ViewRef acc = exec::adoptView(empty);
  size_t part = 0;
  int64_t left = parts.empty() ? 0 : parts[0].tokens;
  for (int64_t r = 0, runs = kvrt_view_num_runs(view); r < runs; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run)) {
      error = runtimeError("relabelling a cache");
      return false;
    }
    for (int64_t a = 0; a < run.n_tokens;) {
      while (left == 0 && part + 1 < parts.size())
        left = parts[++part].tokens;
      int64_t b = std::min(run.n_tokens, a + left);
      if (!appendPiece(acc, run, a, b, parts[part].label.c_str(), pageTokens,
                       error))
        return false;
      left -= b - a;
      a = b;
    }
  }
  out = std::move(acc);
  return true;
}

bool kvir::serve::compact(const kvrt_view *view, int64_t begin, int64_t end,
                          exec::ViewRef &out, bool &merged,
                          std::string &error) {
  merged = false;
  kvrt_pool *pool = kvrt_view_pool(view);
  kvrt_page_layout layout;
  if (kvrt_pool_get_layout(pool, &layout)) {
    error = runtimeError("compacting a cache");
    return false;
  }
  auto unchanged = [&] {
    kvrt_view_retain(const_cast<kvrt_view *>(view));
    out = exec::adoptView(const_cast<kvrt_view *>(view));
    return true;
  };
  // The runs that hold [begin, end), whole.
  std::vector<kvrt_run> runs;
  int64_t at = 0;
  for (int64_t r = 0, n = kvrt_view_num_runs(view); r < n && at < end; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run)) {
      error = runtimeError("compacting a cache");
      return false;
    }
    if (at >= begin)
      runs.push_back(run);
    else if (at + run.n_tokens > begin)
      return unchanged();
    at += run.n_tokens;
  }
  if (runs.size() < 2 || at != end)
    return unchanged();
  for (size_t i = 1; i < runs.size(); ++i) {
    const kvrt_run &p = runs[i - 1], &q = runs[i];
    bool sameLabel = (!p.label && !q.label) ||
                     (p.label && q.label && std::strcmp(p.label, q.label) == 0);
    if (q.delta != p.delta || q.base_pos != p.base_pos + p.n_tokens ||
        !sameLabel)
      return unchanged();
  }

  int64_t n = end - begin, pageTokens = layout.page_tokens;
  FreshPages fresh{pool,
                   std::vector<int32_t>((n + pageTokens - 1) / pageTokens)};
  if (kvrt_pool_alloc_pages(pool, int64_t(fresh.pages.size()),
                            fresh.pages.data())) {
    fresh.pages.clear();
    error = runtimeError("compacting a cache");
    return false;
  }
  int64_t bytes = layout.element_bytes, rowBytes = layout.head_size * bytes;
  std::vector<int32_t> tokens;
  int64_t j = 0;
  for (const kvrt_run &run : runs) {
    for (int64_t k = 0; k < run.n_tokens; ++k, ++j) {
      int64_t slot = run.slot_begin + k;
      const void *src = nullptr;
      void *dst = nullptr;
      if (kvrt_pool_page_cbytes(pool, run.pages[slot / pageTokens], &src) ||
          kvrt_pool_page_bytes(pool, fresh.pages[j / pageTokens], &dst)) {
        error = runtimeError("compacting a cache");
        return false;
      }
      int64_t s = slot % pageTokens, d = j % pageTokens;
      for (int64_t l = 0; l < layout.n_layers; ++l)
        for (int64_t h = 0; h < layout.n_kv_heads; ++h)
          for (int64_t c = 0; c < 2; ++c) {
            int64_t base = l * layout.layer_stride + h * layout.head_stride +
                           c * layout.kv_stride;
            std::memcpy(static_cast<char *>(dst) +
                            (base + d * layout.head_size) * bytes,
                        static_cast<const char *>(src) +
                            (base + s * layout.head_size) * bytes,
                        size_t(rowBytes));
          }
      tokens.push_back(run.tokens[k]);
    }
  }
  for (int32_t page : fresh.pages)
    if (kvrt_pool_seal_page(pool, page)) {
      error = runtimeError("compacting a cache");
      return false;
    }
  kvrt_run mergedRun = runs[0];
  mergedRun.pages = fresh.pages.data();
  mergedRun.n_pages = int64_t(fresh.pages.size());
  mergedRun.slot_begin = 0;
  mergedRun.n_tokens = n;
  mergedRun.tokens = tokens.data();
  exec::ViewRef head = sliceView(view, 0, begin, error);
  exec::ViewRef tail = sliceView(view, end, kvrt_view_num_tokens(view), error);
  if (!head || !tail)
    return false;
  kvrt_view *withRun = nullptr, *joined = nullptr;
  if (kvrt_view_append(head.get(), &mergedRun, &withRun)) {
    error = runtimeError("compacting a cache");
    return false;
  }
  exec::ViewRef middle = exec::adoptView(withRun);
  if (kvrt_view_concat(middle.get(), tail.get(), &joined)) {
    error = runtimeError("compacting a cache");
    return false;
  }
  out = exec::adoptView(joined);
  merged = true;
  return true;
}

std::vector<int64_t> kvir::serve::effectivePositions(const kvrt_view *view) {
  std::vector<int64_t> positions;
  positions.reserve(size_t(kvrt_view_num_tokens(view)));
  for (int64_t r = 0, n = kvrt_view_num_runs(view); r < n; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run))
      break;
    for (int64_t k = 0; k < run.n_tokens; ++k)
      positions.push_back(run.base_pos + run.delta + k);
  }
  return positions;
}
