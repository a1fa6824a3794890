//===- RunEntry.cpp - Calling a compiled program's entry --------*- C++ -*-===//

#include "runtime/exec/RunEntry.h"
#include "runtime/core/Support.h"

#include <memory>

using namespace kvir;
using namespace kvir::exec;
using kvrt::str;

namespace {

WorkStats toStats(const kvrt_exec_work &w) {
  WorkStats s;
  s.prefillCalls = w.prefill_calls;
  s.prefillTokens = w.prefill_tokens;
  s.logitsRows = w.logits_rows;
  s.scanTokens = w.scan_tokens;
  s.flops = w.flops;
  s.kvBytesWritten = w.kv_bytes_written;
  s.seconds = w.seconds;
  return s;
}

/// A new reference to a view the context owns.
ViewRef retained(kvrt_view *view) {
  if (!view)
    return nullptr;
  kvrt_exec_view_retain(view);
  return adoptView(view);
}

using ContextPtr =
    std::unique_ptr<kvrt_exec_context, void (*)(kvrt_exec_context *)>;

} // namespace

int64_t kvir::exec::defaultMaxContext(const kvrt_model_config &config) {
  return 8 * int64_t(config.seq_len > 0 ? config.seq_len : 512);
}

RunOutcome kvir::exec::runEntry(EntryFn entry, const EntryManifest &manifest,
                                ComputeBackend &backend,
                                const kvrt_model *model, kvrt_pool *pool,
                                const std::vector<Value> &args,
                                int64_t maxContext,
                                const BlockStoreBinding *blockStore) {
  RunOutcome outcome;
  auto fail = [&](const std::string &message) {
    outcome.failed = true;
    outcome.status = KVRT_ERR_INVALID_ARGUMENT;
    outcome.message = message;
    return outcome;
  };
  if (!entry)
    return fail("the program has no compiled entry");
  if (args.size() != manifest.args.size())
    return fail(str("@", manifest.entry, " takes ", manifest.args.size(),
                    " arguments, ", args.size(), " were bound"));
  ContextPtr ctx(createExecContext(backend, model, pool, maxContext),
                 kvrt_exec_context_destroy);
  if (!ctx)
    return fail("cannot create the execution context");
  if (blockStore && blockStore->store)
    kvrt_exec_set_block_store(ctx.get(), blockStore->store, blockStore->policy);

  std::vector<int64_t> slots;
  for (const Value &arg : args) {
    switch (arg.kind) {
    case ValueKind::Model:
      slots.push_back(int64_t(reinterpret_cast<intptr_t>(model)));
      break;
    case ValueKind::Tokens:
      slots.push_back(
          int64_t(reinterpret_cast<intptr_t>(kvrt_exec_tokens_constant(
              ctx.get(), KVRT_EXEC_NO_SITE, arg.tokens.data(),
              int64_t(arg.tokens.size())))));
      break;
    case ValueKind::Tensor:
      slots.push_back(
          int64_t(reinterpret_cast<intptr_t>(kvrt_exec_tensor_create(
              ctx.get(), arg.tensor->data.data(), arg.tensor->dims[0],
              arg.tensor->dims[1], arg.tensor->dims[2]))));
      break;
    case ValueKind::Index:
      slots.push_back(arg.index);
      break;
    case ValueKind::Cache:
      // The caller's view: the context neither owns nor releases it, and
      // views are immutable, so the run cannot change it.
      if (!arg.cache || kvrt_view_pool(arg.cache.get()) != pool)
        return fail("a cache argument must be a view of the run's pool");
      slots.push_back(int64_t(reinterpret_cast<intptr_t>(arg.cache.get())));
      break;
    case ValueKind::Logits:
      return fail("a runner binds models, caches, token lists, tensors and "
                  "integers only");
    }
  }
  std::vector<int64_t> results(manifest.results.size() + 1, 0);
  // A program without edit, compose or logits ops is all plan.
  if (!manifest.hasPlanOps)
    kvrt_exec_plan_begin(ctx.get());
  if (!kvrt_exec_failed(ctx.get()))
    entry(ctx.get(), slots.data(), results.data());

  kvrt_exec_work work;
  kvrt_exec_get_work(ctx.get(), 1, &work);
  outcome.plan = toStats(work);
  kvrt_exec_get_work(ctx.get(), 0, &work);
  outcome.setup = toStats(work);
  outcome.contextTokens = kvrt_exec_context_tokens(ctx.get());
  outcome.repairs.resize(kvrt_exec_num_repairs(ctx.get()));
  for (size_t i = 0; i < outcome.repairs.size(); ++i)
    kvrt_exec_get_repair(ctx.get(), int64_t(i), &outcome.repairs[i]);
  outcome.siteTimes.resize(kvrt_exec_num_site_times(ctx.get()));
  for (size_t i = 0; i < outcome.siteTimes.size(); ++i) {
    kvrt_exec_site_time t{};
    kvrt_exec_get_site_time(ctx.get(), int64_t(i), &t);
    outcome.siteTimes[i] = {t.site, t.op ? t.op : "", t.calls, t.seconds};
  }
  outcome.blockEvents.resize(kvrt_exec_num_block_events(ctx.get()));
  for (size_t i = 0; i < outcome.blockEvents.size(); ++i) {
    BlockEvent &e = outcome.blockEvents[i];
    kvrt_exec_get_block_event(ctx.get(), int64_t(i), &e.event);
    e.key = e.event.key;
    e.message = e.event.message;
    e.event.key = e.event.message = nullptr;
  }
  if (kvrt_exec_failed(ctx.get())) {
    outcome.failed = true;
    outcome.status = kvrt_exec_error_status(ctx.get());
    outcome.message = kvrt_exec_error_message(ctx.get());
    outcome.site = kvrt_exec_error_site(ctx.get());
    return outcome;
  }

  for (size_t i = 0; i < manifest.results.size(); ++i) {
    int64_t slot = results[i];
    void *pointer = reinterpret_cast<void *>(intptr_t(slot));
    Value value;
    value.kind = manifest.results[i];
    switch (value.kind) {
    case ValueKind::Cache:
      value.cache = retained(static_cast<kvrt_view *>(pointer));
      break;
    case ValueKind::Model:
      break;
    case ValueKind::Tokens: {
      auto *tokens = static_cast<kvrt_exec_tokens *>(pointer);
      const int32_t *data = kvrt_exec_tokens_data(tokens);
      value.tokens.assign(data,
                          data + kvrt_exec_tokens_size(ctx.get(), tokens));
      break;
    }
    case ValueKind::Logits: {
      auto *handle = static_cast<kvrt_exec_logits *>(pointer);
      auto logits = std::make_shared<Logits>();
      logits->rows = kvrt_exec_logits_rows(handle);
      logits->vocab = kvrt_exec_logits_vocab(handle);
      const float *data = kvrt_exec_logits_data(handle);
      logits->data.assign(data, data + logits->rows * logits->vocab);
      logits->context = retained(kvrt_exec_logits_context(handle));
      logits->result = retained(kvrt_exec_logits_result(handle));
      const kvrt_exec_tokens *tokens = kvrt_exec_logits_tokens(handle);
      const int32_t *ids = kvrt_exec_tokens_data(tokens);
      logits->tokens.assign(ids,
                            ids + kvrt_exec_tokens_size(ctx.get(), tokens));
      logits->position = kvrt_exec_logits_position(handle);
      logits->lastOnly = kvrt_exec_logits_last_only(handle);
      value.logits = std::move(logits);
      break;
    }
    case ValueKind::Tensor: {
      auto *handle = static_cast<kvrt_exec_tensor *>(pointer);
      auto tensor = std::make_shared<Tensor>();
      for (int d = 0; d < 3; ++d)
        tensor->dims[d] = kvrt_exec_tensor_size(handle, d);
      const float *data = kvrt_exec_tensor_data(handle);
      tensor->data.assign(data, data + tensor->dims[0] * tensor->dims[1] *
                                           tensor->dims[2]);
      value.tensor = std::move(tensor);
      break;
    }
    case ValueKind::Index:
      value.index = slot;
      break;
    }
    outcome.results.push_back(std::move(value));
  }
  return outcome;
}
