//===- ExecRuntime.cpp - C ABI of compiled kv programs ----------*- C++ -*-===//
//
// The one implementation of a kv program's semantics: compiled programs (JIT
// or ahead of time) call these functions for every kv primitive.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/ExecRuntime.h"

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/KVParallel.h"
#include "runtime/core/ModelCost.h"
#include "runtime/core/SelectiveRecompute.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

using kvrt::str;

struct kvrt_exec_tokens {
  std::vector<int32_t> ids;
};

struct kvrt_exec_logits {
  int64_t rows = 0, vocab = 0;
  std::vector<float> data;
  kvrt_view *context = nullptr;
  const kvrt_exec_tokens *tokens = nullptr;
  int64_t position = 0;
  bool lastOnly = false;
  kvrt_view *result = nullptr;
};

struct kvrt_exec_tensor {
  int64_t dims[3] = {0, 0, 0};
  std::vector<float> data;
};

struct kvrt_exec_context {
  kvir::ComputeBackend *backend = nullptr;
  const kvrt_model *model = nullptr;
  kvrt_pool *pool = nullptr;
  kvrt_model_config config{};

  // The arena: one reference to every view handed out, and every handle.
  std::vector<kvrt_view *> views;
  std::vector<std::unique_ptr<kvrt_exec_tokens>> tokens;
  std::vector<std::unique_ptr<kvrt_exec_logits>> logits;
  std::vector<std::unique_ptr<kvrt_exec_tensor>> tensors;

  // The first error.
  bool failed = false;
  kvrt_status status = KVRT_OK;
  std::string message;
  int32_t site = KVRT_EXEC_NO_SITE;

  int64_t planDepth = 0, callDepth = 0;
  /// Positions at or beyond this are refused (0: no limit); the highest
  /// position computed, plus one.
  int64_t maxContext = 0, contextTokens = 0;
  kvrt_exec_work plan{}, setup{};
  std::vector<kvrt_exec_repair> repairs;

  // The block store, its fault policy, and what kv.load_block and
  // kv.store_block did with it (keys and messages owned here).
  kvrt_block_store *blockStore = nullptr;
  int32_t storePolicy = KVRT_EXEC_STORE_FALLBACK;
  struct BlockEvent {
    kvrt_exec_block_event event;
    std::string key, message;
  };
  std::vector<std::unique_ptr<BlockEvent>> blockEvents;
  // Views that are blocks: their K/V were computed over nothing before them
  // at consecutive positions (an empty view, a prefill over a block at its
  // end position, a loaded block, a prefix of a block). Only these may be
  // stored under the key of their tokens.
  std::unordered_set<const kvrt_view *> blocks;

  ~kvrt_exec_context() {
    for (kvrt_view *view : views)
      kvrt_view_release(view);
    kvrt_block_store_release(blockStore);
  }

  /// Records the first error; later ones are consequences.
  void fail(int32_t at, kvrt_status s, std::string text) {
    if (failed)
      return;
    failed = true;
    status = s == KVRT_OK ? KVRT_ERR_INVALID_ARGUMENT : s;
    message = std::move(text);
    site = at;
  }
  /// The same with the runtime's last error appended.
  void failRuntime(int32_t at, kvrt_status s, const std::string &what) {
    fail(at, s, what + ": " + kvrt_last_error());
  }

  kvrt_exec_work &work() { return planDepth > 0 ? plan : setup; }

  /// The calls and wall time of each site's runtime calls, in the order the
  /// sites first ran (kvrt_exec_get_site_time).
  std::vector<kvrt_exec_site_time> siteTimes;
  void addSiteTime(int32_t at, const char *op, double seconds) {
    for (kvrt_exec_site_time &t : siteTimes)
      if (t.site == at && std::strcmp(t.op, op) == 0) {
        ++t.calls;
        t.seconds += seconds;
        return;
      }
    siteTimes.push_back({at, op, 1, seconds});
  }

  /// Whether `n` tokens from `position` on stay within the context limit;
  /// records the failure at `at` otherwise.
  bool withinLimit(int32_t at, const char *what, int64_t position, int64_t n) {
    if (maxContext > 0 && n > 0 &&
        (position < 0 || position > maxContext - n)) {
      fail(at, KVRT_ERR_INVALID_ARGUMENT,
           kvrt::str(what, " of ", n, " tokens at position ", position,
                     " would reach position ", position + n - 1,
                     ", beyond the run's context limit of ", maxContext,
                     " tokens (the model was trained on ", config.seq_len,
                     ")"));
      return false;
    }
    if (n > 0)
      contextTokens = std::max(contextTokens, position + n);
    return true;
  }

  kvrt_view *own(kvrt_view *view) {
    if (view)
      views.push_back(view);
    return view;
  }
  kvrt_exec_tokens *own(std::vector<int32_t> ids) {
    tokens.push_back(std::make_unique<kvrt_exec_tokens>());
    tokens.back()->ids = std::move(ids);
    return tokens.back().get();
  }
  kvrt_exec_tensor *own(std::vector<float> data, int64_t d0, int64_t d1,
                        int64_t d2) {
    tensors.push_back(std::make_unique<kvrt_exec_tensor>());
    kvrt_exec_tensor *t = tensors.back().get();
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->dims[2] = d2;
    t->data = std::move(data);
    return t;
  }
};

namespace {

/// Times a call into the context's current work.
class Timer {
public:
  Timer(kvrt_exec_context *ctx, int32_t site, const char *op)
      : ctx(ctx), site(site), op(op), start(std::chrono::steady_clock::now()) {}
  ~Timer() {
    if (!ctx)
      return;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    ctx->work().seconds += seconds;
    ctx->addSiteTime(site, op, seconds);
  }

private:
  kvrt_exec_context *ctx;
  int32_t site;
  const char *op;
  std::chrono::steady_clock::time_point start;
};

/// Whether a call may proceed: a context without a recorded error.
bool live(kvrt_exec_context *ctx) { return ctx && !ctx->failed; }

/// Checks a view operand (NULL only reaches here through a caller's bug).
bool checkView(kvrt_exec_context *ctx, int32_t site, const void *view,
               const char *what) {
  if (view)
    return true;
  ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT, str(what, ": a NULL operand"));
  return false;
}

/// Checks the model operand of a call that runs the forward: the one the
/// context runs (`what` names the call).
bool checkModel(kvrt_exec_context *ctx, int32_t site, const kvrt_model *model,
                const char *what) {
  if (model == ctx->model)
    return true;
  ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
            str(what, ": the model is not the one the program runs on"));
  return false;
}

int64_t effectiveStart(const kvrt_run &run) { return run.base_pos + run.delta; }

int64_t endPosition(const kvrt_view *view) {
  int64_t n = kvrt_view_num_runs(view);
  if (n == 0)
    return 0;
  kvrt_run run;
  if (kvrt_view_get_run(view, n - 1, &run) != KVRT_OK)
    return 0;
  return effectiveStart(run) + run.n_tokens;
}

int64_t startPosition(const kvrt_view *view) {
  kvrt_run run;
  if (kvrt_view_num_runs(view) == 0 ||
      kvrt_view_get_run(view, 0, &run) != KVRT_OK)
    return 0;
  return effectiveStart(run);
}

/// A view list combined: every entry shifted by its offset, concatenated.
/// The result is owned by the context; NULL on error.
kvrt_view *combine(kvrt_exec_context *ctx, int32_t site,
                   kvrt_view *const *views, const int64_t *offsets, int64_t n) {
  kvrt_view *acc = nullptr;
  for (int64_t i = 0; i < n; ++i) {
    kvrt_view *piece = views[i];
    if (!checkView(ctx, site, piece, "view list"))
      return nullptr;
    if (offsets && offsets[i] != 0) {
      kvrt_view *shifted = nullptr;
      if (kvrt_status s = kvrt_view_shift(piece, offsets[i], &shifted)) {
        ctx->failRuntime(site, s,
                         str("cannot shift view ", i, " by ", offsets[i]));
        return nullptr;
      }
      piece = ctx->own(shifted);
    }
    if (!acc) {
      acc = piece;
      continue;
    }
    kvrt_view *joined = nullptr;
    if (kvrt_status s = kvrt_view_concat(acc, piece, &joined)) {
      ctx->failRuntime(site, s, "cannot concatenate views");
      return nullptr;
    }
    acc = ctx->own(joined);
  }
  return acc;
}

/// Runs `body` and turns an exception into an error of the context.
template <typename T, typename Body>
T guarded(kvrt_exec_context *ctx, int32_t site, const char *op, T neutral,
          Body &&body) {
  if (!live(ctx))
    return neutral;
  try {
    Timer timer(ctx, site, op);
    return body();
  } catch (const std::bad_alloc &) {
    ctx->fail(site, KVRT_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception &e) {
    ctx->fail(site, KVRT_ERR_INTERNAL, str("internal error: ", e.what()));
  } catch (...) {
    ctx->fail(site, KVRT_ERR_INTERNAL, "internal error");
  }
  return neutral;
}

/// `prefilled`, which is `context` followed by one run of the tokens of
/// `n` segments, with that run cut into one run per segment labelled
/// labels[i] (a segment of no tokens has none): the view the chain of
/// prefills would have returned. Owned by the context; NULL on error.
kvrt_view *splitSegments(kvrt_exec_context *ctx, int32_t site,
                         kvrt_view *context, const kvrt_view *prefilled,
                         const kvrt_exec_tokens *const *tokens,
                         const char *const *labels, int64_t n) {
  kvrt_view *acc = context;
  int64_t at = kvrt_view_num_tokens(context);
  for (int64_t i = 0; i < n; ++i) {
    int64_t size = tokens[i]->ids.size();
    if (size == 0)
      continue;
    kvrt_view *piece = nullptr;
    if (kvrt_status s = kvrt_view_slice(prefilled, at, at + size, &piece)) {
      ctx->failRuntime(site, s, str("cannot cut out segment ", i));
      return nullptr;
    }
    piece = ctx->own(piece);
    kvrt_run run;
    kvrt_view *next = nullptr;
    if (kvrt_status s = kvrt_view_get_run(piece, 0, &run)) {
      ctx->failRuntime(site, s, str("cannot read segment ", i));
      return nullptr;
    }
    run.label = labels ? labels[i] : nullptr;
    if (kvrt_status s = kvrt_view_append(acc, &run, &next)) {
      ctx->failRuntime(site, s, str("cannot append segment ", i));
      return nullptr;
    }
    acc = ctx->own(next);
    at += size;
  }
  return acc;
}

/// The prefill of `n_segments` token lists one after the other over the
/// combined view list, by one call of the backend (kvrt_exec_prefill is the
/// chain of one): list i becomes a run labelled labels[i], and the logits
/// are those of the last list's rows, recorded with what they were computed
/// from (the view before the last list) for the comparisons of kv-run.
kvrt_exec_logits *
prefillSegments(kvrt_exec_context *ctx, int32_t site, const char *key,
                kvrt_prefill_fn forward, const kvrt_model *model,
                kvrt_view *const *views, const int64_t *offsets,
                int64_t n_views, const kvrt_exec_tokens *const *tokens,
                const char *const *labels, int64_t n_segments,
                int32_t has_position, int64_t position, int32_t last,
                int64_t expect_rows, kvrt_view **result) {
  if (result)
    *result = nullptr;
  return guarded<kvrt_exec_logits *>(
      ctx, site, "prefill", nullptr, [&]() -> kvrt_exec_logits * {
        if (!checkModel(ctx, site, model, "prefill"))
          return nullptr;
        if (!checkView(ctx, site, tokens, "prefill tokens") ||
            (n_views > 0 && !checkView(ctx, site, views, "prefill views")))
          return nullptr;
        if (n_views < 1 || n_segments < 1) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    n_views < 1 ? "prefill: an empty view list"
                                : "prefill: no token list");
          return nullptr;
        }
        for (int64_t i = 0; i < n_segments; ++i)
          if (!checkView(ctx, site, tokens[i], "prefill tokens"))
            return nullptr;
        kvrt_view *context = combine(ctx, site, views, offsets, n_views);
        if (!context)
          return nullptr;
        // One list is computed from its own ids; a chain from all of them.
        std::vector<int32_t> joined;
        if (n_segments > 1)
          for (int64_t i = 0; i < n_segments; ++i)
            joined.insert(joined.end(), tokens[i]->ids.begin(),
                          tokens[i]->ids.end());
        const std::vector<int32_t> &ids =
            n_segments > 1 ? joined : tokens[0]->ids;
        const kvrt_exec_tokens *lastTokens = tokens[n_segments - 1];
        int64_t n = ids.size(), rowsOfLast = lastTokens->ids.size();
        int64_t start = has_position ? position : endPosition(context);
        auto logits = std::make_unique<kvrt_exec_logits>();
        logits->vocab = ctx->config.vocab_size;
        logits->context = context;
        logits->tokens = lastTokens;
        logits->position = start + n - rowsOfLast;
        logits->lastOnly = last != KVRT_EXEC_LOGITS_ALL;
        bool none = last == KVRT_EXEC_LOGITS_NONE || rowsOfLast == 0;
        // List by list, so that a chain fails as the chain of calls would.
        for (int64_t i = 0, at = start; i < n_segments; ++i) {
          int64_t size = tokens[i]->ids.size();
          if (!ctx->withinLimit(site, "prefill", at, size))
            return nullptr;
          at += size;
        }
        if (n == 0) {
          // Nothing to compute: the view unchanged, no rows.
          logits->result = context;
        } else {
          kvrt_view *out = nullptr;
          int64_t contextTokens = kvrt_view_num_tokens(context);
          kvrt_exec_work &work = ctx->work();
          kvir::Forward fwd{key, /*prefill=*/forward};
          kvir::LogitRows rows =
              kvir::LogitRows::last(logits->lastOnly ? 1 : rowsOfLast);
          if (kvrt_status s = ctx->backend->prefill(
                  fwd, ctx->model, context, ids.data(), n, start,
                  n_segments > 1 || !labels ? nullptr : labels[0], rows,
                  none ? nullptr : &logits->data, &out)) {
            ctx->failRuntime(site, s,
                             str("prefill of ", n, " tokens at position ",
                                 start, " failed"));
            return nullptr;
          }
          logits->result = ctx->own(out);
          if (n_segments > 1) {
            logits->result = splitSegments(ctx, site, context, out, tokens,
                                           labels, n_segments);
            if (!logits->result)
              return nullptr;
            if (n > rowsOfLast) {
              kvrt_view *before = nullptr;
              if (kvrt_status s = kvrt_view_slice(
                      logits->result, 0, contextTokens + n - rowsOfLast,
                      &before)) {
                ctx->failRuntime(site, s, "cannot cut the last list's view");
                return nullptr;
              }
              logits->context = ctx->own(before);
            }
          }
          // A prefill at the end of a block extends it (the fused form of
          // a single view has offset 0).
          if (n_views == 1 && (!offsets || offsets[0] == 0) &&
              ctx->blocks.count(views[0]) &&
              (kvrt_view_num_tokens(views[0]) == 0 ||
               start == endPosition(views[0])))
            ctx->blocks.insert(logits->result);
          logits->rows = none ? 0 : logits->lastOnly ? 1 : rowsOfLast;
          ++work.prefill_calls;
          work.prefill_tokens += n;
          work.logits_rows += logits->rows;
          kvir::ModelCost cost = kvir::costOnPool(ctx->config, ctx->pool);
          work.flops += cost.prefillFlops(contextTokens, n, logits->rows);
          work.kv_bytes_written += cost.kvBytes(n);
        }
        if (expect_rows >= 0 && expect_rows != logits->rows) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("the logits type expects ", expect_rows,
                        " rows, the prefill computed ", logits->rows));
          return nullptr;
        }
        if (result)
          *result = logits->result;
        ctx->logits.push_back(std::move(logits));
        return ctx->logits.back().get();
      });
}

} // namespace

//===----------------------------------------------------------------------===//
// The context
//===----------------------------------------------------------------------===//

kvrt_exec_context *kvir::createExecContext(ComputeBackend &backend,
                                           const kvrt_model *model,
                                           kvrt_pool *pool,
                                           int64_t maxContext) {
  if (!model || !pool || maxContext < 0)
    return nullptr;
  try {
    auto ctx = std::make_unique<kvrt_exec_context>();
    ctx->backend = &backend;
    ctx->model = model;
    ctx->pool = pool;
    ctx->maxContext = maxContext;
    if (kvrt_model_get_config(model, &ctx->config) != KVRT_OK)
      return nullptr;
    return ctx.release();
  } catch (...) {
    return nullptr;
  }
}

extern "C" {

void kvrt_exec_context_destroy(kvrt_exec_context *ctx) { delete ctx; }

int32_t kvrt_exec_failed(const kvrt_exec_context *ctx) {
  return !ctx || ctx->failed;
}
kvrt_status kvrt_exec_error_status(const kvrt_exec_context *ctx) {
  return ctx ? ctx->status : KVRT_ERR_INVALID_ARGUMENT;
}
const char *kvrt_exec_error_message(const kvrt_exec_context *ctx) {
  return ctx ? ctx->message.c_str() : "no execution context";
}
int32_t kvrt_exec_error_site(const kvrt_exec_context *ctx) {
  return ctx ? ctx->site : KVRT_EXEC_NO_SITE;
}

void kvrt_exec_get_work(const kvrt_exec_context *ctx, int32_t plan,
                        kvrt_exec_work *out) {
  if (ctx && out)
    *out = plan ? ctx->plan : ctx->setup;
}
int64_t kvrt_exec_context_tokens(const kvrt_exec_context *ctx) {
  return ctx ? ctx->contextTokens : 0;
}

int64_t kvrt_exec_num_site_times(const kvrt_exec_context *ctx) {
  return ctx ? int64_t(ctx->siteTimes.size()) : 0;
}

void kvrt_exec_get_site_time(const kvrt_exec_context *ctx, int64_t index,
                             kvrt_exec_site_time *out) {
  if (!ctx || !out || index < 0 || index >= int64_t(ctx->siteTimes.size()))
    return;
  *out = ctx->siteTimes[size_t(index)];
}

int64_t kvrt_exec_num_repairs(const kvrt_exec_context *ctx) {
  return ctx ? int64_t(ctx->repairs.size()) : 0;
}
void kvrt_exec_get_repair(const kvrt_exec_context *ctx, int64_t index,
                          kvrt_exec_repair *out) {
  if (!out)
    return;
  *out = kvrt_exec_repair{};
  if (ctx && index >= 0 && index < int64_t(ctx->repairs.size()))
    *out = ctx->repairs[index];
}

const int32_t *kvrt_exec_tokens_data(const kvrt_exec_tokens *tokens) {
  return tokens ? tokens->ids.data() : nullptr;
}

int64_t kvrt_exec_logits_rows(const kvrt_exec_logits *l) {
  return l ? l->rows : 0;
}
int64_t kvrt_exec_logits_vocab(const kvrt_exec_logits *l) {
  return l ? l->vocab : 0;
}
const float *kvrt_exec_logits_data(const kvrt_exec_logits *l) {
  return l ? l->data.data() : nullptr;
}
kvrt_view *kvrt_exec_logits_context(const kvrt_exec_logits *l) {
  return l ? l->context : nullptr;
}
kvrt_view *kvrt_exec_logits_result(const kvrt_exec_logits *l) {
  return l ? l->result : nullptr;
}
const kvrt_exec_tokens *kvrt_exec_logits_tokens(const kvrt_exec_logits *l) {
  return l ? l->tokens : nullptr;
}
int64_t kvrt_exec_logits_position(const kvrt_exec_logits *l) {
  return l ? l->position : 0;
}
int32_t kvrt_exec_logits_last_only(const kvrt_exec_logits *l) {
  return l && l->lastOnly;
}

//===----------------------------------------------------------------------===//
// Called by generated code
//===----------------------------------------------------------------------===//

void kvrt_exec_plan_begin(kvrt_exec_context *ctx) {
  if (ctx)
    ++ctx->planDepth;
}
void kvrt_exec_plan_end(kvrt_exec_context *ctx) {
  if (ctx && ctx->planDepth > 0)
    --ctx->planDepth;
}

int32_t kvrt_exec_call_enter(kvrt_exec_context *ctx, int32_t site) {
  if (!live(ctx))
    return 0;
  if (ctx->callDepth >= KVRT_EXEC_MAX_CALL_DEPTH) {
    ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
              str("calls nest deeper than ", KVRT_EXEC_MAX_CALL_DEPTH,
                  " (recursion?)"));
    return 0;
  }
  ++ctx->callDepth;
  return 1;
}
void kvrt_exec_call_leave(kvrt_exec_context *ctx) {
  if (ctx && ctx->callDepth > 0)
    --ctx->callDepth;
}

kvrt_view *kvrt_exec_empty(kvrt_exec_context *ctx, int32_t site) {
  return guarded<kvrt_view *>(
      ctx, site, "empty", nullptr, [&]() -> kvrt_view * {
        kvrt_view *view = nullptr;
        if (kvrt_status s = kvrt_view_create(ctx->pool, &view)) {
          ctx->failRuntime(site, s, "cannot create a view");
          return nullptr;
        }
        ctx->blocks.insert(view);
        return ctx->own(view);
      });
}

kvrt_exec_logits *
kvrt_exec_prefill(kvrt_exec_context *ctx, int32_t site, const char *key,
                  kvrt_prefill_fn forward, const kvrt_model *model,
                  kvrt_view *const *views, const int64_t *offsets,
                  int64_t n_views, const kvrt_exec_tokens *tokens,
                  int32_t has_position, int64_t position, const char *label,
                  int32_t last, int64_t expect_rows, kvrt_view **result) {
  return prefillSegments(ctx, site, key, forward, model, views, offsets,
                         n_views, &tokens, &label, 1, has_position, position,
                         last, expect_rows, result);
}

kvrt_exec_logits *
kvrt_exec_prefill_chain(kvrt_exec_context *ctx, int32_t site, const char *key,
                        kvrt_prefill_fn forward, const kvrt_model *model,
                        kvrt_view *const *views, const int64_t *offsets,
                        int64_t n_views, const kvrt_exec_tokens *const *tokens,
                        const char *const *labels, int64_t n_segments,
                        int32_t last, int64_t expect_rows, kvrt_view **result) {
  return prefillSegments(ctx, site, key, forward, model, views, offsets,
                         n_views, tokens, labels, n_segments,
                         /*has_position=*/0, /*position=*/0, last, expect_rows,
                         result);
}

kvrt_view *kvrt_exec_slice(kvrt_exec_context *ctx, int32_t site,
                           const kvrt_view *view, int64_t begin, int64_t end) {
  return guarded<kvrt_view *>(
      ctx, site, "slice", nullptr, [&]() -> kvrt_view * {
        if (!checkView(ctx, site, view, "slice"))
          return nullptr;
        kvrt_view *out = nullptr;
        if (kvrt_status s = kvrt_view_slice(view, begin, end, &out)) {
          ctx->failRuntime(site, s,
                           str("slice [", begin, ", ", end, ") failed"));
          return nullptr;
        }
        if (begin == 0 && ctx->blocks.count(view))
          ctx->blocks.insert(out);
        return ctx->own(out);
      });
}

kvrt_view *kvrt_exec_concat(kvrt_exec_context *ctx, int32_t site,
                            kvrt_view *const *views, int64_t n) {
  if (n <= 0)
    return kvrt_exec_empty(ctx, site);
  return guarded<kvrt_view *>(ctx, site, "concat", nullptr,
                              [&]() -> kvrt_view * {
                                if (!checkView(ctx, site, views, "concat"))
                                  return nullptr;
                                return combine(ctx, site, views, nullptr, n);
                              });
}

kvrt_view *kvrt_exec_rope_shift(kvrt_exec_context *ctx, int32_t site,
                                const kvrt_view *view, int64_t delta) {
  return guarded<kvrt_view *>(
      ctx, site, "rope_shift", nullptr, [&]() -> kvrt_view * {
        if (!checkView(ctx, site, view, "rope shift"))
          return nullptr;
        kvrt_view *out = nullptr;
        if (kvrt_status s = kvrt_view_shift(view, delta, &out)) {
          ctx->failRuntime(site, s, str("rope shift by ", delta, " failed"));
          return nullptr;
        }
        return ctx->own(out);
      });
}

void kvrt_exec_segment_bounds(kvrt_exec_context *ctx, int32_t site,
                              const kvrt_view *view, const char *label,
                              int64_t *bounds) {
  if (bounds)
    bounds[0] = bounds[1] = 0;
  guarded<int>(ctx, site, "segment_bounds", 0, [&]() -> int {
    if (!checkView(ctx, site, view, "segment bounds") ||
        !checkView(ctx, site, label, "segment bounds") ||
        !checkView(ctx, site, bounds, "segment bounds"))
      return 0;
    if (kvrt_view_segment_bounds(view, label, &bounds[0], &bounds[1]))
      ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT, kvrt_last_error());
    return 0;
  });
}

kvrt_exec_tokens *kvrt_exec_view_tokens(kvrt_exec_context *ctx, int32_t site,
                                        const kvrt_view *view, int64_t expect) {
  return guarded<kvrt_exec_tokens *>(
      ctx, site, "view_tokens", nullptr, [&]() -> kvrt_exec_tokens * {
        if (!checkView(ctx, site, view, "tokens"))
          return nullptr;
        std::vector<int32_t> ids;
        for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
          kvrt_run run;
          if (kvrt_view_get_run(view, r, &run) == KVRT_OK)
            ids.insert(ids.end(), run.tokens, run.tokens + run.n_tokens);
        }
        if (expect >= 0 && expect != int64_t(ids.size())) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("the view holds ", ids.size(),
                        " tokens, the result type has ", expect));
          return nullptr;
        }
        return ctx->own(std::move(ids));
      });
}

int64_t kvrt_exec_length(kvrt_exec_context *ctx, const kvrt_view *view) {
  return live(ctx) ? kvrt_view_num_tokens(view) : 0;
}
int64_t kvrt_exec_start_position(kvrt_exec_context *ctx,
                                 const kvrt_view *view) {
  return live(ctx) && view ? startPosition(view) : 0;
}
int64_t kvrt_exec_end_position(kvrt_exec_context *ctx, const kvrt_view *view) {
  return live(ctx) && view ? endPosition(view) : 0;
}

kvrt_view *kvrt_exec_selective_recompute(
    kvrt_exec_context *ctx, int32_t site, const char *key,
    kvrt_prefill_fn forward, const kvrt_model *model, const kvrt_view *view,
    int64_t begin, int64_t end, int32_t mode, double amount) {
  return guarded<kvrt_view *>(
      ctx, site, "selective_recompute", nullptr, [&]() -> kvrt_view * {
        if (model != ctx->model) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    "selective recompute: the model is not the one the program "
                    "runs on");
          return nullptr;
        }
        if (!checkView(ctx, site, view, "selective recompute"))
          return nullptr;
        if (mode != KVRT_EXEC_REPAIR_FRACTION &&
            mode != KVRT_EXEC_REPAIR_DEVIATION) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("selective recompute: unknown mode ", mode));
          return nullptr;
        }
        kvir::RepairBudget budget;
        budget.selection = mode == KVRT_EXEC_REPAIR_FRACTION
                               ? kvir::RepairSelection::Fraction
                               : kvir::RepairSelection::Deviation;
        budget.amount = amount;
        kvir::SelectiveRecomputeStats stats;
        kvrt_view *out = nullptr;
        kvir::Forward fwd{key, /*prefill=*/forward};
        if (kvrt_status s =
                kvir::selectiveRecompute(*ctx->backend, fwd, ctx->model, view,
                                         begin, end, budget, &out, &stats)) {
          ctx->failRuntime(
              site, s,
              str("selective recompute of [", begin, ", ", end, ") failed"));
          return nullptr;
        }
        kvir::ModelCost cost = kvir::costOnPool(ctx->config, ctx->pool);
        kvrt_exec_work &work = ctx->work();
        for (const kvir::SelectiveRecomputeStats::Call &call : stats.calls) {
          if (call.scan) {
            work.scan_tokens += call.tokens;
            work.flops += cost.partialRangeFlops(
                call.contextTokens, call.contextTokens + call.tokens,
                call.layers);
            continue;
          }
          ++work.prefill_calls;
          work.prefill_tokens += call.tokens;
          work.logits_rows += 1;
          work.flops += cost.prefillFlops(call.contextTokens, call.tokens, 1);
          work.kv_bytes_written += cost.kvBytes(call.tokens);
        }
        kvrt_exec_repair record{};
        record.mode = mode;
        record.amount = amount;
        record.candidates = stats.candidates;
        record.scanned = int64_t(stats.relativeDeviation.size());
        record.chosen = int64_t(stats.chosen.size());
        record.max_relative_deviation = stats.maxRelativeDeviation;
        record.mean_relative_deviation = stats.meanRelativeDeviation;
        ctx->repairs.push_back(record);
        return ctx->own(out);
      });
}

kvrt_view *kvrt_exec_materialize(kvrt_exec_context *ctx, int32_t site,
                                 const char *key, kvrt_materialize_fn forward,
                                 const kvrt_model *model,
                                 const kvrt_view *view) {
  return guarded<kvrt_view *>(
      ctx, site, "materialize", nullptr, [&]() -> kvrt_view * {
        if (!checkModel(ctx, site, model, "materialize"))
          return nullptr;
        if (!checkView(ctx, site, view, "materialize"))
          return nullptr;
        kvir::Forward fwd{key, /*prefill=*/nullptr, /*attention=*/nullptr,
                          /*materialize=*/forward};
        kvrt_view *out = nullptr;
        if (kvrt_status s =
                ctx->backend->materialize(fwd, ctx->model, view, &out)) {
          ctx->failRuntime(site, s, "materialize failed");
          return nullptr;
        }
        return ctx->own(out);
      });
}

kvrt_exec_tensor *
kvrt_exec_attention(kvrt_exec_context *ctx, int32_t site, const char *key,
                    kvrt_attention_fn forward, const kvrt_model *model,
                    const kvrt_exec_tensor *query, kvrt_view *const *views,
                    const int64_t *offsets, int64_t n_views, int64_t layer,
                    int64_t position, int64_t expect_rows) {
  return guarded<kvrt_exec_tensor *>(
      ctx, site, "attention", nullptr, [&]() -> kvrt_exec_tensor * {
        if (!checkModel(ctx, site, model, "attention"))
          return nullptr;
        if (!checkView(ctx, site, query, "attention query") ||
            !checkView(ctx, site, views, "attention views"))
          return nullptr;
        int64_t heads = ctx->config.n_heads;
        int64_t headSize = ctx->config.dim / ctx->config.n_heads;
        if (query->dims[1] != heads || query->dims[2] != headSize) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("attention: the query is ", query->dims[0], " x ",
                        query->dims[1], " x ", query->dims[2],
                        ", the model needs n x ", heads, " x ", headSize));
          return nullptr;
        }
        if (expect_rows >= 0 && expect_rows != query->dims[0]) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("the result type expects ", expect_rows,
                        " queries, the query has ", query->dims[0]));
          return nullptr;
        }
        if (layer < 0 || layer >= ctx->config.n_layers) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("attention: layer ", layer, " is outside [0, ",
                        ctx->config.n_layers, ")"));
          return nullptr;
        }
        int64_t n = query->dims[0];
        if (!ctx->withinLimit(site, "attention", position, n))
          return nullptr;
        kvrt_view *context = combine(ctx, site, views, offsets, n_views);
        if (!context)
          return nullptr;
        kvir::Forward fwd{key, /*prefill=*/nullptr, /*attention=*/forward};
        std::vector<float> out;
        if (kvrt_status s = ctx->backend->attention(
                fwd, ctx->model, context, query->data.data(), n, position,
                int32_t(layer), &out)) {
          ctx->failRuntime(site, s,
                           str("attention of ", n, " queries at position ",
                               position, " failed"));
          return nullptr;
        }
        return ctx->own(std::move(out), n, heads, headSize);
      });
}

kvrt_exec_tokens *kvrt_exec_tokens_constant(kvrt_exec_context *ctx,
                                            int32_t site, const int32_t *data,
                                            int64_t n) {
  return guarded<kvrt_exec_tokens *>(
      ctx, site, "tokens_constant", nullptr, [&]() -> kvrt_exec_tokens * {
        if (n < 0 || (n > 0 && !data)) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("tokens: ", n, " ids at a NULL address"));
          return nullptr;
        }
        for (int64_t t = 0; t < n; ++t)
          if (data[t] < 0 || data[t] >= ctx->config.vocab_size) {
            ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                      str("token ", data[t], " at index ", t,
                          " is outside the vocabulary [0, ",
                          ctx->config.vocab_size, ")"));
            return nullptr;
          }
        return ctx->own(std::vector<int32_t>(data, data + n));
      });
}

kvrt_exec_tokens *kvrt_exec_tokens_empty(kvrt_exec_context *ctx, int32_t site,
                                         int64_t n) {
  if (live(ctx) && n != 0) {
    ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
              str("tensor.empty of ", n,
                  " tokens has undefined contents; kv-run only runs empty "
                  "ones"));
    return nullptr;
  }
  return kvrt_exec_tokens_constant(ctx, site, nullptr, 0);
}

int64_t kvrt_exec_tokens_size(kvrt_exec_context *ctx,
                              const kvrt_exec_tokens *tokens) {
  return live(ctx) && tokens ? int64_t(tokens->ids.size()) : 0;
}

int64_t kvrt_exec_logits_dim(kvrt_exec_context *ctx, int32_t site,
                             const kvrt_exec_logits *logits, int64_t dim) {
  if (!live(ctx) || !checkView(ctx, site, logits, "tensor.dim"))
    return 0;
  if (dim == 0)
    return logits->rows;
  if (dim == 1)
    return logits->vocab;
  ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
            str("tensor.dim: dimension ", dim, " is out of range"));
  return 0;
}

int64_t kvrt_exec_tensor_dim(kvrt_exec_context *ctx, int32_t site,
                             const kvrt_exec_tensor *tensor, int64_t dim) {
  if (!live(ctx) || !checkView(ctx, site, tensor, "tensor.dim"))
    return 0;
  if (dim >= 0 && dim < 3)
    return tensor->dims[dim];
  ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
            str("tensor.dim: dimension ", dim, " is out of range"));
  return 0;
}

const kvrt_exec_tensor *kvrt_exec_tensor_cast(kvrt_exec_context *ctx,
                                              int32_t site,
                                              const kvrt_exec_tensor *tensor,
                                              int64_t d0, int64_t d1,
                                              int64_t d2) {
  if (!live(ctx) || !checkView(ctx, site, tensor, "tensor.cast"))
    return nullptr;
  int64_t expect[3] = {d0, d1, d2};
  for (int i = 0; i < 3; ++i)
    if (expect[i] >= 0 && expect[i] != tensor->dims[i]) {
      ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                str("tensor.cast: the value has ", tensor->dims[i],
                    " in dimension ", i, ", the type ", expect[i]));
      return nullptr;
    }
  return tensor;
}

kvrt_exec_tensor *kvrt_exec_tensor_create(kvrt_exec_context *ctx,
                                          const float *data, int64_t d0,
                                          int64_t d1, int64_t d2) {
  return guarded<kvrt_exec_tensor *>(
      ctx, KVRT_EXEC_NO_SITE, "tensor_create", nullptr,
      [&]() -> kvrt_exec_tensor * {
        if (d0 < 0 || d1 < 0 || d2 < 0 || (d0 * d1 * d2 > 0 && !data)) {
          ctx->fail(KVRT_EXEC_NO_SITE, KVRT_ERR_INVALID_ARGUMENT,
                    str("tensor: ", d0, " x ", d1, " x ", d2,
                        " floats at a NULL address"));
          return nullptr;
        }
        return ctx->own(std::vector<float>(data, data + d0 * d1 * d2), d0, d1,
                        d2);
      });
}

int64_t kvrt_exec_tensor_size(const kvrt_exec_tensor *tensor, int32_t dim) {
  return tensor && dim >= 0 && dim < 3 ? tensor->dims[dim] : 0;
}

const float *kvrt_exec_tensor_data(const kvrt_exec_tensor *tensor) {
  return tensor ? tensor->data.data() : nullptr;
}

const kvrt_exec_tokens *kvrt_exec_tokens_cast(kvrt_exec_context *ctx,
                                              int32_t site,
                                              const kvrt_exec_tokens *tokens,
                                              int64_t size) {
  if (!live(ctx) || !checkView(ctx, site, tokens, "tensor.cast"))
    return nullptr;
  if (size >= 0 && int64_t(tokens->ids.size()) != size) {
    ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
              str("tensor.cast to tensor<", size, "xi32>: the value has ",
                  tokens->ids.size(), " in dimension 0"));
    return nullptr;
  }
  return tokens;
}

const kvrt_exec_logits *kvrt_exec_logits_cast(kvrt_exec_context *ctx,
                                              int32_t site,
                                              const kvrt_exec_logits *logits,
                                              int64_t rows, int64_t vocab) {
  if (!live(ctx) || !checkView(ctx, site, logits, "tensor.cast"))
    return nullptr;
  int64_t expect[2] = {rows, vocab}, actual[2] = {logits->rows, logits->vocab};
  for (int i = 0; i < 2; ++i)
    if (expect[i] >= 0 && expect[i] != actual[i]) {
      ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                str("tensor.cast of logits: the value has ", actual[i],
                    " in dimension ", i, ", the type ", expect[i]));
      return nullptr;
    }
  return logits;
}

//===----------------------------------------------------------------------===//
// Blocks and the block store
//===----------------------------------------------------------------------===//

} // extern "C"

namespace {

/// Records a block event; returns it for the caller to complete.
kvrt_exec_block_event &recordBlockEvent(kvrt_exec_context *ctx, int32_t site,
                                        int32_t op, int32_t outcome,
                                        const kvrt_block_result *result,
                                        int64_t tokens, int64_t base,
                                        const std::string &message = "") {
  auto entry = std::make_unique<kvrt_exec_context::BlockEvent>();
  kvrt_exec_block_event &e = entry->event;
  e = kvrt_exec_block_event{};
  e.site = site;
  e.op = op;
  e.outcome = outcome;
  e.tokens = tokens;
  e.base = base;
  if (result) {
    e.fault = result->fault;
    e.bytes = result->bytes;
    e.seconds = result->seconds;
    entry->key = result->key;
  }
  entry->message = message;
  e.key = entry->key.c_str();
  e.message = entry->message.c_str();
  ctx->blockEvents.push_back(std::move(entry));
  return ctx->blockEvents.back()->event;
}

/// Stores the block `view` (n tokens at `base`) in the context's store,
/// recording the event; a fault fails the context under the `fail` policy.
/// False when the context failed.
bool saveBlock(kvrt_exec_context *ctx, int32_t site, const char *what,
               const kvrt_view *view, int64_t n, int64_t base) {
  kvrt_block_result result;
  kvrt_status s =
      kvrt_block_store_save(ctx->blockStore, ctx->model, view, &result);
  if (s == KVRT_OK) {
    recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_STORE, KVRT_EXEC_BLOCK_STORED,
                     &result, n, base);
    return true;
  }
  std::string message = kvrt_last_error();
  if (s != KVRT_ERR_UNAVAILABLE) {
    ctx->fail(site, s, str(what, ": ", message));
    return false;
  }
  kvrt_exec_block_event &e =
      recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_STORE, KVRT_EXEC_BLOCK_FAULT,
                       &result, n, base, message);
  if (ctx->storePolicy == KVRT_EXEC_STORE_FAIL) {
    ctx->fail(site, s,
              str(what, ": the block store failed (", message,
                  "); the policy is to fail"));
    return false;
  }
  e.fell_back = 1;
  return true;
}

} // namespace

extern "C" {

void kvrt_exec_set_block_store(kvrt_exec_context *ctx, kvrt_block_store *store,
                               int32_t policy) {
  if (!ctx)
    return;
  kvrt_block_store_retain(store);
  kvrt_block_store_release(ctx->blockStore);
  ctx->blockStore = store;
  ctx->storePolicy = policy == KVRT_EXEC_STORE_FAIL ? KVRT_EXEC_STORE_FAIL
                                                    : KVRT_EXEC_STORE_FALLBACK;
}

int64_t kvrt_exec_num_block_events(const kvrt_exec_context *ctx) {
  return ctx ? int64_t(ctx->blockEvents.size()) : 0;
}

void kvrt_exec_get_block_event(const kvrt_exec_context *ctx, int64_t index,
                               kvrt_exec_block_event *out) {
  if (!out)
    return;
  *out = kvrt_exec_block_event{};
  out->key = out->message = "";
  if (ctx && index >= 0 && index < int64_t(ctx->blockEvents.size()))
    *out = ctx->blockEvents[index]->event;
}

kvrt_view *kvrt_exec_load_block(kvrt_exec_context *ctx, int32_t site,
                                const char *key, kvrt_prefill_fn forward,
                                const kvrt_model *model,
                                const kvrt_exec_tokens *tokens,
                                int32_t has_position, int64_t position,
                                const char *label) {
  return guarded<kvrt_view *>(
      ctx, site, "load_block", nullptr, [&]() -> kvrt_view * {
        if (!checkModel(ctx, site, model, "load_block"))
          return nullptr;
        if (!checkView(ctx, site, tokens, "load_block tokens"))
          return nullptr;
        const std::vector<int32_t> &ids = tokens->ids;
        int64_t n = int64_t(ids.size());
        int64_t base = has_position ? position : 0;
        if (base < 0 || base > KVRT_MAX_POSITION - n) {
          ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                    str("load_block: base position ", base, " of ", n,
                        " tokens is outside [0, 2^53)"));
          return nullptr;
        }
        // Fetched or prefilled, the block occupies these positions.
        if (!ctx->withinLimit(site, "load_block", base, n))
          return nullptr;
        kvrt_view *empty = nullptr;
        if (kvrt_status s = kvrt_view_create(ctx->pool, &empty)) {
          ctx->failRuntime(site, s, "cannot create a view");
          return nullptr;
        }
        ctx->own(empty);
        ctx->blocks.insert(empty);
        if (n == 0)
          return empty;

        bool storeDown = false;
        if (ctx->blockStore) {
          kvrt_view *loaded = nullptr;
          kvrt_block_result result;
          kvrt_status s = kvrt_block_store_load(ctx->blockStore, ctx->model,
                                                ctx->pool, base, ids.data(), n,
                                                label, &loaded, &result);
          if (s == KVRT_OK && loaded) {
            recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_LOAD,
                             KVRT_EXEC_BLOCK_HIT, &result, n, base);
            ctx->own(loaded);
            ctx->blocks.insert(loaded);
            return loaded;
          }
          if (s == KVRT_OK) {
            recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_LOAD,
                             KVRT_EXEC_BLOCK_MISS, &result, n, base);
          } else if (s == KVRT_ERR_UNAVAILABLE) {
            std::string message = kvrt_last_error();
            kvrt_exec_block_event &e = recordBlockEvent(
                ctx, site, KVRT_EXEC_BLOCK_LOAD, KVRT_EXEC_BLOCK_FAULT, &result,
                n, base, message);
            if (ctx->storePolicy == KVRT_EXEC_STORE_FAIL) {
              ctx->fail(site, s,
                        str("load_block: the block store failed (", message,
                            "); the policy is to fail"));
              return nullptr;
            }
            e.fell_back = 1;
            // A store that cannot be reached is not asked again for this
            // block's store: that would only wait for the timeout twice.
            storeDown = result.fault == KVRT_BLOCK_UNREACHABLE ||
                        result.fault == KVRT_BLOCK_TIMEOUT;
          } else {
            ctx->failRuntime(site, s, "load_block: cannot map the block");
            return nullptr;
          }
        } else {
          recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_LOAD,
                           KVRT_EXEC_BLOCK_NO_STORE, nullptr, n, base);
        }

        // Not fetched: prefill it here.
        kvir::Forward fwd{key, /*prefill=*/forward};
        std::vector<float> logits;
        kvrt_view *out = nullptr;
        if (kvrt_status s = ctx->backend->prefill(
                fwd, ctx->model, empty, ids.data(), n, base, label,
                kvir::LogitRows::last(), &logits, &out)) {
          ctx->failRuntime(site, s,
                           str("load_block: prefill of ", n,
                               " tokens at position ", base, " failed"));
          return nullptr;
        }
        ctx->own(out);
        ctx->blocks.insert(out);
        kvrt_exec_work &work = ctx->work();
        ++work.prefill_calls;
        work.prefill_tokens += n;
        work.logits_rows += 1;
        kvir::ModelCost cost = kvir::costOnPool(ctx->config, ctx->pool);
        work.flops += cost.prefillFlops(0, n, 1);
        work.kv_bytes_written += cost.kvBytes(n);

        if (ctx->blockStore) {
          if (storeDown)
            recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_STORE,
                             KVRT_EXEC_BLOCK_SKIPPED, nullptr, n, base)
                .fell_back = 1;
          else if (!saveBlock(ctx, site, "load_block", out, n, base))
            return nullptr;
        }
        return out;
      });
}

void kvrt_exec_store_block(kvrt_exec_context *ctx, int32_t site,
                           const kvrt_model *model, const kvrt_view *view) {
  guarded<int>(ctx, site, "store_block", 0, [&]() -> int {
    if (!checkModel(ctx, site, model, "store_block"))
      return 0;
    if (!checkView(ctx, site, view, "store_block"))
      return 0;
    if (!ctx->blocks.count(view)) {
      ctx->fail(site, KVRT_ERR_INVALID_ARGUMENT,
                "store_block: the cache is not a block: only a prefill over "
                "an empty cache (kv.empty), a prefill at the end of a block, "
                "a kv.load_block, or a prefix slice of one of these, has K/V "
                "that its tokens and base position determine; a composed, "
                "shifted, edited, repaired or concatenated cache has not");
      return 0;
    }
    int64_t n = kvrt_view_num_tokens(view);
    int64_t base = startPosition(view);
    if (n == 0)
      return 0;
    if (!ctx->blockStore) {
      recordBlockEvent(ctx, site, KVRT_EXEC_BLOCK_STORE,
                       KVRT_EXEC_BLOCK_NO_STORE, nullptr, n, base);
      return 0;
    }
    saveBlock(ctx, site, "store_block", view, n, base);
    return 0;
  });
}

void kvrt_exec_view_retain(kvrt_view *view) { kvrt_view_retain(view); }
void kvrt_exec_view_release(kvrt_view *view) { kvrt_view_release(view); }

const kvrt_exec_symbol *kvrt_exec_symbols(void) {
  static const kvrt_exec_symbol symbols[] = {
#define KVIR_SYMBOL(name, result, ...) {#name, reinterpret_cast<void *>(&name)},
#define KVRT_EXEC_FN KVIR_SYMBOL
#include "runtime/exec/ExecABI.def"
  // The thread pool the generated CPU forward's parallel loops run on, and
  // its size (decode attention splits its heads by it).
#define KVRT_PARALLEL_FN KVIR_SYMBOL
#include "runtime/core/KVParallel.def"
      {nullptr, nullptr},
  };
#undef KVIR_SYMBOL
  return symbols;
}

} // extern "C"
