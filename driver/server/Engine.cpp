//===- Engine.cpp - kv-serve's contexts, plans and generation ---*- C++ -*-===//
//
// The state of a context is its segments (token ids, kinds, dependencies)
// and, in kvir mode, a view of the pool that holds the K/V of a prefix of
// its tokens: everything but possibly the last generated token, which the
// next operation prefills together with whatever it adds ("pending"). The
// runs of the view are labelled by segment. Full and prefix modes keep only
// the tokens and compute at generation time (from nothing, or from the
// longest cached prefix).
//
//===----------------------------------------------------------------------===//

#include "driver/server/Engine.h"

#include "driver/compiler/CompileCache.h"
#include "driver/compiler/Compiler.h"
#include "driver/runner/Runner.h"
#include "driver/server/ChatTemplate.h"
#include "driver/server/PlanCache.h"
#include "driver/server/Plans.h"
#include "driver/server/PrefixCache.h"
#include "driver/server/Sampler.h"
#include "driver/server/Views.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelCost.h"
#include "runtime/exec/BlockStoreOptions.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <sys/random.h>

using namespace kvir;
using namespace kvir::serve;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ms(double seconds) { return seconds * 1e3; }

/// Tickets served in the order they were drawn: requests on one context run
/// one at a time, in arrival order. A waiter that gives up (its deadline)
/// leaves its ticket to be skipped.
class FifoLock {
public:
  bool lock(Clock::time_point deadline) {
    std::unique_lock<std::mutex> l(mutex);
    uint64_t ticket = next++;
    if (ready.wait_until(l, deadline, [&] { return serving == ticket; }))
      return true;
    abandoned.insert(ticket);
    return false;
  }
  /// Takes the lock only when nobody holds it or waits for it.
  bool tryLock() {
    std::lock_guard<std::mutex> l(mutex);
    if (serving != next)
      return false;
    ++next;
    return true;
  }
  void unlock() {
    std::lock_guard<std::mutex> l(mutex);
    ++serving;
    while (abandoned.erase(serving))
      ++serving;
    ready.notify_all();
  }

private:
  std::mutex mutex;
  std::condition_variable ready;
  uint64_t next = 0, serving = 0;
  std::set<uint64_t> abandoned;
};

struct Segment {
  std::string name, kind;
  std::vector<std::string> deps;
  std::vector<int32_t> tokens;
};

struct Context {
  std::string id, tenant;
  FifoLock lock;
  Clock::time_point created;
  // Under `lock`:
  std::vector<Segment> segments;
  /// kvir mode: the K/V of the first tokens (all but a pending one).
  exec::ViewRef view;
  /// The logits of the view's last token, when known.
  std::vector<float> logits;
  /// Leading tokens whose K/V are those of a full prefill.
  int64_t exactPrefix = 0;
  /// Tokens computed since the last generation (the turn's work).
  int64_t computedSinceGenerate = 0;
  int64_t generations = 0, errata = 0;
  /// Deleted: the requests queued behind the delete find it gone.
  bool deleted = false;
  /// Where the K/V are. Evicted out of the pool (idle, least recently used)
  /// with a block store configured, a context keeps its segments and
  /// tokens: its K/V go to the store (Spilled: the first `spilledTokens`
  /// tokens, mapped back on use), or, when the store cannot take them,
  /// nowhere (Dropped: recomputed from the tokens on use).
  enum class Residence { Resident, Spilled, Dropped };
  Residence residence = Residence::Resident;
  int64_t spilledTokens = 0;
  // Under Impl::contextsMutex:
  Clock::time_point lastUsed;
  int active = 0;
  /// Not resident, or being evicted (no evictor picks it again).
  bool evicted = false;

  int64_t total() const {
    int64_t n = 0;
    for (const Segment &s : segments)
      n += int64_t(s.tokens.size());
    return n;
  }
  std::vector<int32_t> tokens() const {
    std::vector<int32_t> all;
    for (const Segment &s : segments)
      all.insert(all.end(), s.tokens.begin(), s.tokens.end());
    return all;
  }
  int64_t covered() const {
    return view ? kvrt_view_num_tokens(view.get()) : 0;
  }
  int find(const std::string &name) const {
    for (size_t i = 0; i < segments.size(); ++i)
      if (segments[i].name == name)
        return int(i);
    return -1;
  }
  /// The segments as labelled parts of the first `tokens` tokens.
  std::vector<Part> parts(int64_t tokens) const {
    std::vector<Part> out;
    for (const Segment &s : segments) {
      int64_t n = std::min<int64_t>(int64_t(s.tokens.size()), tokens);
      out.push_back({s.name, n});
      tokens -= n;
    }
    return out;
  }
};

struct Block {
  std::vector<int32_t> tokens;
  exec::ViewRef view;
  std::string source;
};

struct AuditJob {
  std::string requestId, context, what, strategy;
  std::vector<int32_t> tokens;
  exec::ViewRef view;
};

/// What a decode produced.
struct Decoded {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish = "length";
  double ttft = -1, decodeSeconds = 0;
  uint64_t seed = 0;
};

uint64_t randomWord() {
  uint64_t word = 0;
  size_t got = 0;
  while (got < sizeof(word)) {
    ssize_t n =
        getrandom(reinterpret_cast<char *>(&word) + got, sizeof(word) - got, 0);
    if (n > 0)
      got += size_t(n);
  }
  return word;
}

/// The longest prefix of `text` that does not end inside a UTF-8
/// character.
size_t completeUtf8(const std::string &text) {
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xc0) == 0x80)
      continue;
    size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

std::mutex logMutex;

} // namespace

std::string kvir::serve::randomId(const std::string &prefix) {
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(randomWord()),
                static_cast<unsigned long long>(randomWord()));
  return prefix + hex;
}

const char *kvir::serve::reuseModeName(ReuseMode mode) {
  switch (mode) {
  case ReuseMode::Full:
    return "full";
  case ReuseMode::Prefix:
    return "prefix";
  case ReuseMode::Kvir:
    return "kvir";
  }
  return "kvir";
}

//===----------------------------------------------------------------------===//
// The engine's state
//===----------------------------------------------------------------------===//

struct Engine::Impl {
  Impl(const EngineOptions &options, Metrics &metrics)
      : options(options), metrics(metrics), prefix(options.prefixEntries) {}

  EngineOptions options;
  Metrics &metrics;
  std::unique_ptr<run::Runner> runner;
  Forward forward;
  kvrt_model_config config{};
  kvrt_kv_dtype dtype = KVRT_KV_F32;
  ModelCost cost;
  int64_t pageTokens = 16, capacityPages = 0;
  std::unique_ptr<PlanCache> plans;
  PrefixCache prefix;
  std::string modelId;
  ChatFormat chatFormat = ChatFormat::Plain;
  std::string chatSource;
  std::map<std::string, int32_t> specials;
  std::set<int32_t> stopTokens;
  int64_t startTime = 0;

  /// Math on backends not known to be reentrant runs under this lock.
  bool serialMath = false;
  std::mutex mathMutex;

  std::mutex contextsMutex;
  std::map<std::string, std::shared_ptr<Context>> contexts;
  /// Without a block store: the ids of the last 4096 contexts evicted.
  std::deque<std::string> evictedOrder;
  std::set<std::string> evicted;

  std::mutex blocksMutex;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Block>> blocks;

  std::mutex storesMutex;
  struct Store {
    exec::BlockStoreRef ref{nullptr, kvrt_block_store_release};
    exec::BlockStoreBinding binding;
  };
  std::map<std::string, std::unique_ptr<Store>> stores;

  /// Prefill throughput measured on the server's own prefills (FLOP/s).
  std::mutex rateMutex;
  double flopRate = 0;

  std::mutex auditMutex;
  std::condition_variable auditReady;
  std::deque<AuditJob> auditQueue;
  std::thread auditThread;
  bool auditStop = false;
  uint64_t auditState = 0;

  // Helpers (below).
  bool tokensOf(const Content &content, const std::string &param,
                std::vector<int32_t> &out, RequestError &error) const;
  bool checkLength(int64_t tokens, RequestError &error) const;
  bool prefill(const exec::ViewRef &view, const std::vector<int32_t> &tokens,
               size_t begin, const char *label, exec::ViewRef &out,
               std::vector<float> &logits, RequestError &error);
  exec::ViewRef emptyView(RequestError &error);
  void reclaim(int64_t pages);
  /// Kvir mode with a block store: evicted contexts are spilled to it and
  /// restored on use (else they are gone).
  bool spills() const {
    return options.mode == ReuseMode::Kvir && !options.runner.store.url.empty();
  }
  /// Contexts in the pool (not evicted); the second under contextsMutex.
  int64_t residentContexts() {
    std::lock_guard<std::mutex> lock(contextsMutex);
    return residentContextsLocked();
  }
  int64_t residentContextsLocked() const {
    int64_t n = 0;
    for (auto &[id, c] : contexts)
      n += !c->evicted;
    return n;
  }
  bool evictIdleContext();
  void evictContext(Context &c);
  bool restore(Context &c, RequestError &error, RequestLog *log);
  void forgetSpill(Context &c);
  void noteRate(int64_t tokens, int64_t context, double seconds);
  bool acquire(const std::string &tenant, const std::string &id,
               std::shared_ptr<Context> &out, RequestError &error);
  void release(const std::shared_ptr<Context> &context);
  bool syncView(Context &c, int64_t &computed, RequestError &error);
  bool ensureLogits(Context &c, int64_t &recomputed, RequestError &error);
  bool materialize(Context &c, int64_t &computed, int64_t &recomputed,
                   RequestError &error);
  bool labelled(Context &c, RequestError &error);
  void offerPrefix(Context &c);
  bool decode(exec::ViewRef &view, std::vector<float> logits, int32_t prev,
              const Sampling &sampling, Clock::time_point start,
              Clock::time_point deadline,
              const std::function<bool(int32_t, const std::string &)> &emit,
              Decoded &out, RequestError &error);
  bool compactDecoded(exec::ViewRef &view, int64_t begin, RequestError &error);
  bool runPlan(const std::string &program, const std::vector<exec::Value> &args,
               exec::RunOutcome &outcome, bool &compiled,
               double &compileSeconds, const exec::BlockStoreBinding *store,
               RequestError &error);
  Store &storeOf(const std::string &tenant, std::string &error, bool &ok);
  Json describe(const Context &c, bool withTokens) const;
  Json segmentsJson(const Context &c) const;
  Json fullPrefillCost(int64_t tokens);
  bool checkNewSegment(const Context &c, const std::string &name,
                       const std::vector<std::string> &deps,
                       RequestError &error) const;
  void prefillReply(const Context &c, int64_t computed, int64_t reused,
                    Clock::time_point start, RequestLog &log, Json &out);
  void deferredReply(Context &c, Clock::time_point start, Json &out);
  void planReply(Context &c, const exec::RunOutcome &outcome, bool compiled,
                 double compileSeconds, int64_t total, Clock::time_point start,
                 RequestLog &log, Json &out);
  void maybeAudit(const Context &c, const RequestLog &log,
                  const std::string &what, const std::string &strategy,
                  Json &out);
  void auditLoop();
  void recordTurn(int64_t contextTokens, int64_t computedTokens);
  bool generateFrom(exec::ViewRef &view, std::vector<float> &logits,
                    int32_t prev, const Sampling &sampling,
                    Clock::time_point start, const Sink &sink, Decoded &out,
                    RequestError &error);
  bool encodeChat(const std::vector<ChatMessage> &messages,
                  std::vector<int32_t> &out, RequestError &error) const;
  bool promptRun(const std::string &tenant, std::vector<int32_t> tokens,
                 const Sampling &sampling, const Sink &sink, Json &out,
                 RequestError &error, RequestLog &log);
  Clock::time_point deadlineFrom(Clock::time_point start) const {
    return start +
           std::chrono::milliseconds(int64_t(options.requestTimeout * 1000));
  }
};

//===----------------------------------------------------------------------===//
// Tokens, limits, math
//===----------------------------------------------------------------------===//

bool Engine::Impl::tokensOf(const Content &content, const std::string &param,
                            std::vector<int32_t> &out,
                            RequestError &error) const {
  if (content.isText) {
    const kvrt_tokenizer *tokenizer = runner->tokenizer();
    if (!tokenizer) {
      error = requestError(400, "no_tokenizer",
                           "the model has no tokenizer: give token ids "
                           "(\"tokens\") instead of text, or start kv-serve "
                           "with --tokenizer",
                           param);
      return false;
    }
    uint32_t flags =
        (content.bos ? KVRT_ENCODE_BOS : 0u) |
        (content.special.value_or(options.special) ? KVRT_ENCODE_SPECIAL : 0u);
    if (encode(tokenizer, content.text, flags, out)) {
      error = requestError(
          400, "invalid_value",
          param + ": cannot encode the text: " + kvrt_last_error(), param);
      return false;
    }
  } else {
    out = content.tokens;
  }
  if (int64_t(out.size()) > options.limits.maxTokens) {
    error = requestError(400, "too_many_tokens",
                         param + ": " + std::to_string(out.size()) +
                             " tokens, more than the limit of " +
                             std::to_string(options.limits.maxTokens) +
                             " per request (--max-request-tokens)",
                         param);
    return false;
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] >= config.vocab_size) {
      error = requestError(400, "out_of_range",
                           param + ": token " + std::to_string(out[i]) +
                               " at index " + std::to_string(i) +
                               " is outside the vocabulary [0, " +
                               std::to_string(config.vocab_size) + ")",
                           param);
      return false;
    }
  return true;
}

bool Engine::Impl::checkLength(int64_t tokens, RequestError &error) const {
  int64_t limit = runner->maxContext();
  if (limit > 0 && tokens > limit) {
    error = requestError(400, "context_too_long",
                         "the context would hold " + std::to_string(tokens) +
                             " tokens, more than the limit of " +
                             std::to_string(limit) + " (--max-context)");
    return false;
  }
  return true;
}

exec::ViewRef Engine::Impl::emptyView(RequestError &error) {
  kvrt_view *view = nullptr;
  if (kvrt_view_create(runner->pool(), &view)) {
    error =
        requestError(500, "runtime_error",
                     std::string("cannot create a view: ") + kvrt_last_error());
    return nullptr;
  }
  return exec::adoptView(view);
}

void Engine::Impl::noteRate(int64_t tokens, int64_t context, double seconds) {
  // Small prefills measure overheads, not throughput.
  if (tokens < 32 || seconds <= 0)
    return;
  double rate = double(cost.prefillFlops(context, tokens, 1)) / seconds;
  std::lock_guard<std::mutex> lock(rateMutex);
  flopRate = flopRate == 0 ? rate : 0.8 * flopRate + 0.2 * rate;
}

bool Engine::Impl::prefill(const exec::ViewRef &view,
                           const std::vector<int32_t> &tokens, size_t begin,
                           const char *label, exec::ViewRef &out,
                           std::vector<float> &logits, RequestError &error) {
  int64_t n = int64_t(tokens.size()) - int64_t(begin);
  if (n <= 0) {
    out = view;
    return true;
  }
  int64_t position = exec::endPosition(view.get());
  if (!checkLength(position + n, error))
    return false;
  reclaim((n + pageTokens - 1) / pageTokens + 1);
  for (int attempt = 0;; ++attempt) {
    auto start = Clock::now();
    kvrt_view *next = nullptr;
    kvrt_status status;
    {
      std::unique_lock<std::mutex> lock(mathMutex, std::defer_lock);
      if (serialMath)
        lock.lock();
      status = runner->backend().prefill(
          forward, runner->model(), view.get(), tokens.data() + begin, n,
          position, label, kvir::LogitRows::last(), &logits, &next);
    }
    if (status == KVRT_OK) {
      noteRate(n, position, secondsSince(start));
      out = exec::adoptView(next);
      return true;
    }
    if (status == KVRT_ERR_POOL_EXHAUSTED && attempt == 0) {
      // Everything idle may go: then one more try.
      while (prefix.evictOne() || evictIdleContext())
        metrics.add("kvserve_evictions_total", 1, "reason=\"pool_full\"");
      continue;
    }
    bool full = status == KVRT_ERR_POOL_EXHAUSTED;
    error = requestError(full ? 503 : 500,
                         full ? "pool_exhausted" : "runtime_error",
                         std::string(full ? "the KV pool is full (--pool-pages "
                                            "bounds it; every idle context was "
                                            "evicted): "
                                          : "prefill failed: ") +
                             kvrt_last_error());
    return false;
  }
}

void Engine::Impl::reclaim(int64_t pages) {
  for (;;) {
    kvrt_pool_stats stats;
    if (kvrt_pool_get_stats(runner->pool(), &stats))
      return;
    if (double(stats.pages_in_use + pages) <=
        options.poolHighWater * double(capacityPages))
      return;
    if (prefix.evictOne()) {
      metrics.add("kvserve_evictions_total", 1, "what=\"prefix\"");
      continue;
    }
    if (!evictIdleContext())
      return;
  }
}

bool Engine::Impl::evictIdleContext() {
  std::shared_ptr<Context> victim;
  bool spill = spills();
  {
    std::lock_guard<std::mutex> lock(contextsMutex);
    std::vector<std::shared_ptr<Context>> idle;
    for (auto &[id, c] : contexts)
      if (c->active == 0 && !c->evicted)
        idle.push_back(c);
    std::sort(idle.begin(), idle.end(), [](const auto &a, const auto &b) {
      return a->lastUsed < b->lastUsed;
    });
    // Taken only when nobody waits for it; a request that comes for it
    // from now on waits until it is evicted, then restores it.
    for (const std::shared_ptr<Context> &c : idle)
      if (c->lock.tryLock()) {
        victim = c;
        break;
      }
    if (!victim)
      return false;
    if (spill) {
      ++victim->active;
      victim->evicted = true;
    } else {
      // Without a block store an evicted context is gone: nobody can find
      // it any more, and a request for it is told why (410).
      contexts.erase(victim->id);
      evicted.insert(victim->id);
      evictedOrder.push_back(victim->id);
      while (evictedOrder.size() > 4096) {
        evicted.erase(evictedOrder.front());
        evictedOrder.pop_front();
      }
    }
  }
  if (spill)
    evictContext(*victim);
  else
    victim->view.reset();
  victim->lock.unlock();
  if (spill) {
    std::lock_guard<std::mutex> lock(contextsMutex);
    --victim->active;
  }
  metrics.add("kvserve_evictions_total", 1, "what=\"context\"");
  return true;
}

void Engine::Impl::evictContext(Context &c) {
  // Spilled, a context comes back as it was (an edit's approximation
  // included); a context the store cannot take is recomputed from its
  // tokens on use, as a full prefill computes them.
  c.residence = Context::Residence::Dropped;
  if (c.view && c.covered() > 0) {
    std::string problem;
    bool ok = true;
    Store &store = storeOf(c.tenant, problem, ok);
    kvrt_block_result result{};
    kvrt_status status = KVRT_ERR_UNAVAILABLE;
    if (ok && store.ref)
      status = kvrt_block_store_save_context(
          store.ref.get(), runner->model(), c.id.c_str(), c.view.get(),
          c.logits.data(), int64_t(c.logits.size()), &result);
    else
      problem = "cannot open the block store: " + problem;
    if (status == KVRT_OK) {
      c.residence = Context::Residence::Spilled;
      c.spilledTokens = c.covered();
      metrics.add("kvserve_context_spills_total", 1, "outcome=\"stored\"");
    } else {
      if (problem.empty())
        problem = kvrt_last_error();
      metrics.add("kvserve_context_spills_total", 1, "outcome=\"failed\"");
      writeLogLine({{"event", "spill_failed"},
                    {"context", c.id},
                    {"fault", kvrt_block_fault_name(result.fault)},
                    {"error", problem}});
    }
  }
  c.view.reset();
  c.logits.clear();
}

void Engine::Impl::forgetSpill(Context &c) {
  if (c.residence != Context::Residence::Spilled)
    return;
  std::string problem;
  bool ok = true;
  Store &store = storeOf(c.tenant, problem, ok);
  // What cannot be removed now expires with the store's TTL, or stays:
  // nothing reads it again (a context id is never reused).
  if (ok && store.ref)
    kvrt_block_store_remove_context(store.ref.get(), c.id.c_str(), nullptr);
  c.residence = Context::Residence::Dropped;
}

bool Engine::Impl::restore(Context &c, RequestError &error, RequestLog *log) {
  auto start = Clock::now();
  Json note = Json::object();
  bool mapped = false;
  // Back in the pool it counts toward --max-contexts: the least recently
  // used idle one makes room (none when all are busy).
  while (residentContexts() >= options.maxContexts && evictIdleContext())
    ;
  if (c.residence == Context::Residence::Spilled) {
    std::string problem;
    bool ok = true;
    Store &store = storeOf(c.tenant, problem, ok);
    std::vector<int32_t> tokens = c.tokens();
    tokens.resize(size_t(c.spilledTokens));
    std::vector<float> logits(size_t(config.vocab_size));
    if (!ok || !store.ref)
      note["error"] = "cannot open the block store: " + problem;
    for (int attempt = 0; ok && store.ref; ++attempt) {
      reclaim((c.spilledTokens + pageTokens - 1) / pageTokens + 1);
      kvrt_view *view = nullptr;
      int64_t nLogits = 0;
      kvrt_block_result result;
      kvrt_status status = kvrt_block_store_load_context(
          store.ref.get(), runner->model(), runner->pool(), c.id.c_str(),
          tokens.data(), int64_t(tokens.size()), logits.data(),
          int64_t(logits.size()), &nLogits, &view, &result);
      if (status == KVRT_ERR_POOL_EXHAUSTED && attempt == 0) {
        while (prefix.evictOne() || evictIdleContext())
          metrics.add("kvserve_evictions_total", 1, "reason=\"pool_full\"");
        continue;
      }
      if (status == KVRT_ERR_POOL_EXHAUSTED) {
        // Still spilled: a later request may find room.
        error = requestError(503, "pool_exhausted",
                             "the KV pool is full (--pool-pages bounds it; "
                             "every idle context was evicted): cannot "
                             "restore context " +
                                 c.id + " from the block store");
        return false;
      }
      note["bytes"] = result.bytes;
      if (status == KVRT_OK && view) {
        c.view = exec::adoptView(view);
        logits.resize(size_t(nLogits));
        c.logits = std::move(logits);
        mapped = true;
      } else {
        // Gone (expired, evicted, the store restarted) or rejected: the
        // tokens are here, the K/V are computed again.
        note["fault"] = status == KVRT_OK ? "miss"
                        : result.fault    ? kvrt_block_fault_name(result.fault)
                                          : "error";
        if (status != KVRT_OK)
          note["error"] = kvrt_last_error();
      }
      break;
    }
    forgetSpill(c);
  }
  if (!mapped) {
    // From the tokens, as a full prefill computes them: the longest exact
    // prefix the prefix cache holds, the rest when a request needs it.
    c.view.reset();
    c.logits.clear();
    c.exactPrefix = 0;
    if (options.mode == ReuseMode::Kvir) {
      exec::ViewRef view;
      std::vector<int32_t> all = c.tokens();
      int64_t reused = prefix.lookup(c.tenant, all, int64_t(all.size()), view);
      if (reused) {
        c.view = view;
        c.exactPrefix = reused;
      }
      note["reused"] = reused;
    }
  }
  c.residence = Context::Residence::Resident;
  {
    std::lock_guard<std::mutex> lock(contextsMutex);
    c.evicted = false;
  }
  const char *from = mapped ? "store" : "tokens";
  metrics.add("kvserve_context_restores_total", 1,
              std::string("from=\"") + from + "\"");
  note["from"] = from;
  note["ms"] = ms(secondsSince(start));
  if (log)
    log->extra["restored"] = note;
  return true;
}

//===----------------------------------------------------------------------===//
// Contexts
//===----------------------------------------------------------------------===//

bool Engine::Impl::acquire(const std::string &tenant, const std::string &id,
                           std::shared_ptr<Context> &out, RequestError &error) {
  std::lock_guard<std::mutex> lock(contextsMutex);
  auto it = contexts.find(id);
  if (it == contexts.end() || it->second->tenant != tenant) {
    if (evicted.count(id))
      error = requestError(410, "context_evicted",
                           "context " + id +
                               " was evicted (least recently used, under pool "
                               "pressure or --max-contexts) and no --kv-store "
                               "keeps evicted contexts: create it again");
    else
      error = requestError(404, "context_not_found", "no context " + id);
    return false;
  }
  out = it->second;
  ++out->active;
  out->lastUsed = Clock::now();
  return true;
}

void Engine::Impl::release(const std::shared_ptr<Context> &context) {
  std::lock_guard<std::mutex> lock(contextsMutex);
  --context->active;
  context->lastUsed = Clock::now();
}

namespace {

/// Holds a context for one request: not evictable, and locked in turn.
class Held {
public:
  explicit Held(Engine::Impl &impl) : impl(impl) {}
  ~Held() {
    if (locked)
      context->lock.unlock();
    if (context)
      impl.release(context);
  }
  /// Takes context `id` of `tenant` for a request that started at
  /// `start`, waiting for the requests before it (at most until the
  /// request's deadline); names it in `log`. An evicted context is brought
  /// back into the pool first, unless `needsCache` is false (a read, a
  /// delete).
  bool take(const std::string &tenant, const std::string &id,
            Clock::time_point start, RequestError &error,
            RequestLog *log = nullptr, bool needsCache = true) {
    if (log)
      log->context = id;
    if (!impl.acquire(tenant, id, context, error))
      return false;
    locked = context->lock.lock(impl.deadlineFrom(start));
    if (!locked) {
      error = requestError(503, "timeout",
                           "timed out waiting for the requests before this one "
                           "on context " +
                               id + " (--request-timeout)");
      return false;
    }
    if (context->deleted) {
      error = requestError(404, "context_not_found",
                           "context " + id + " was deleted");
      return false;
    }
    if (needsCache && context->residence != Context::Residence::Resident)
      return impl.restore(*context, error, log);
    return true;
  }
  Context &operator*() { return *context; }
  Context *operator->() { return context.get(); }

private:
  Engine::Impl &impl;
  std::shared_ptr<Context> context;
  bool locked = false;
};

} // namespace

bool Engine::Impl::labelled(Context &c, RequestError &error) {
  if (!c.view)
    return true;
  exec::ViewRef out;
  std::string problem;
  if (!relabel(c.view.get(), c.parts(c.covered()), out, problem)) {
    error = requestError(500, "runtime_error", problem);
    return false;
  }
  c.view = out;
  return true;
}

bool Engine::Impl::syncView(Context &c, int64_t &computed,
                            RequestError &error) {
  int64_t total = c.total(), have = c.covered();
  if (!c.view && !(c.view = emptyView(error)))
    return false;
  if (have < total) {
    exec::ViewRef next;
    std::vector<int32_t> all = c.tokens();
    if (!prefill(c.view, all, size_t(have), nullptr, next, c.logits, error))
      return false;
    c.view = next;
    computed += total - have;
    c.computedSinceGenerate += total - have;
    if (c.exactPrefix == have)
      c.exactPrefix = total;
  }
  return labelled(c, error);
}

bool Engine::Impl::ensureLogits(Context &c, int64_t &recomputed,
                                RequestError &error) {
  if (!c.logits.empty())
    return true;
  int64_t total = c.covered();
  if (total == 0) {
    error = requestError(400, "empty_context",
                         "the context holds no tokens to generate from");
    return false;
  }
  // Logits come from a prefill: the last token is computed again over the
  // rest (as llama.cpp does when a whole prompt is cached).
  std::string problem;
  exec::ViewRef head = sliceView(c.view.get(), 0, total - 1, problem);
  if (!head) {
    error = requestError(500, "runtime_error", problem);
    return false;
  }
  std::vector<int32_t> last = {exec::viewTokens(c.view.get()).back()};
  exec::ViewRef next;
  if (!prefill(head, last, 0, nullptr, next, c.logits, error))
    return false;
  c.view = next;
  ++recomputed;
  ++c.computedSinceGenerate;
  if (c.exactPrefix == total - 1)
    c.exactPrefix = total;
  return labelled(c, error);
}

bool Engine::Impl::materialize(Context &c, int64_t &computed,
                               int64_t &recomputed, RequestError &error) {
  if (options.mode == ReuseMode::Kvir)
    return syncView(c, computed, error) && ensureLogits(c, recomputed, error);
  // Full and prefix modes: from nothing, or from the longest cached prefix
  // (at most all but the last token: its logits are needed).
  std::vector<int32_t> all = c.tokens();
  if (all.empty()) {
    error = requestError(400, "empty_context",
                         "the context holds no tokens to generate from");
    return false;
  }
  exec::ViewRef start;
  int64_t reused = 0;
  if (options.mode == ReuseMode::Prefix)
    reused = prefix.lookup(c.tenant, all, int64_t(all.size()) - 1, start);
  if (!reused && !(start = emptyView(error)))
    return false;
  exec::ViewRef next;
  if (!prefill(start, all, size_t(reused), nullptr, next, c.logits, error))
    return false;
  c.view = next;
  computed += int64_t(all.size()) - reused;
  c.computedSinceGenerate += int64_t(all.size()) - reused;
  c.exactPrefix = int64_t(all.size());
  return labelled(c, error);
}

void Engine::Impl::offerPrefix(Context &c) {
  if (options.mode == ReuseMode::Full || !c.view)
    return;
  int64_t n = std::min(c.exactPrefix, c.covered());
  if (n < pageTokens)
    return;
  std::string problem;
  exec::ViewRef exact = sliceView(c.view.get(), 0, n, problem);
  if (exact)
    prefix.insert(c.tenant, c.tokens(), exact);
}

Json Engine::Impl::segmentsJson(const Context &c) const {
  Json segments = Json::array();
  std::vector<int64_t> positions;
  if (c.view)
    positions = effectivePositions(c.view.get());
  int64_t at = 0;
  for (const Segment &s : c.segments) {
    int64_t n = int64_t(s.tokens.size());
    Json j = {{"name", s.name},
              {"kind", s.kind},
              {"deps", s.deps},
              {"tokens", n},
              {"offset", at}};
    // Positions as the cache holds them (a shifted run is relocated by
    // its offset); a token not computed yet sits at its index.
    auto position = [&](int64_t i) {
      return i < int64_t(positions.size()) ? positions[size_t(i)] : i;
    };
    if (n > 0) {
      j["start"] = position(at);
      j["end"] = position(at + n - 1) + 1;
    } else {
      j["start"] = j["end"] = at;
    }
    segments.push_back(std::move(j));
    at += n;
  }
  return segments;
}

Json Engine::Impl::describe(const Context &c, bool withTokens) const {
  Json out = {{"id", c.id},
              {"object", "context"},
              {"tokens", c.total()},
              {"cached_tokens", c.covered()},
              {"exact_prefix", std::min(c.exactPrefix, c.covered())},
              {"resident", c.residence == Context::Residence::Resident},
              {"segments", segmentsJson(c)}};
  if (c.residence == Context::Residence::Spilled)
    out["evicted"] = "spilled";
  else if (c.residence == Context::Residence::Dropped)
    out["evicted"] = "dropped";
  if (withTokens) {
    Json tokens = Json::object();
    for (const Segment &s : c.segments) {
      tokens[s.name] = s.tokens;
      std::string text;
      if (runner->tokenizer() &&
          !kvir::decode(runner->tokenizer(), s.tokens, text))
        out["text"][s.name] = text;
    }
    out["token_ids"] = tokens;
  }
  return out;
}

Json Engine::Impl::fullPrefillCost(int64_t tokens) {
  int64_t flops = cost.prefillFlops(0, tokens, 1);
  Json j = {{"tokens", tokens}, {"flops", flops}};
  std::lock_guard<std::mutex> lock(rateMutex);
  j["estimated_ms"] =
      flopRate > 0 ? Json(ms(double(flops) / flopRate)) : Json(nullptr);
  return j;
}

bool Engine::Impl::checkNewSegment(const Context &c, const std::string &name,
                                   const std::vector<std::string> &deps,
                                   RequestError &error) const {
  if (c.find(name) >= 0) {
    error = requestError(409, "duplicate_segment",
                         "the context already has a segment " + name, "name");
    return false;
  }
  for (const std::string &dep : deps)
    if (c.find(dep) < 0) {
      error = requestError(400, "invalid_dependency",
                           "deps: " + dep + " is not a segment of the context",
                           "deps");
      return false;
    }
  return true;
}

void Engine::Impl::prefillReply(const Context &c, int64_t computed,
                                int64_t reused, Clock::time_point start,
                                RequestLog &log, Json &out) {
  metrics.add("kvserve_tokens_prefilled_total", double(computed));
  metrics.add("kvserve_tokens_reused_total", double(reused));
  log.context = c.id;
  log.prefilled = computed;
  log.reused = reused;
  out = describe(c, false);
  out["work"] = {{"prefilled", computed},
                 {"reused", reused},
                 {"ms", ms(secondsSince(start))}};
}

void Engine::Impl::deferredReply(Context &c, Clock::time_point start,
                                 Json &out) {
  // Full and prefix modes: the tokens change now; the next generation
  // computes what it must (from the change on, at best).
  c.view.reset();
  c.logits.clear();
  out["applied"] = "tokens only (computed at the next generation)";
  out["tokens_recomputed"] = 0;
  out["full_prefill"] = fullPrefillCost(c.total());
  out["segments"] = segmentsJson(c);
  out["tokens"] = c.total();
  out["ms"] = ms(secondsSince(start));
}

void Engine::Impl::planReply(Context &c, const exec::RunOutcome &outcome,
                             bool compiled, double compileSeconds,
                             int64_t total, Clock::time_point start,
                             RequestLog &log, Json &out) {
  int64_t recomputed = outcome.plan.prefillTokens;
  int64_t reused = std::max<int64_t>(0, total - recomputed);
  c.computedSinceGenerate += recomputed;
  metrics.add("kvserve_tokens_recomputed_total", double(recomputed));
  metrics.add("kvserve_tokens_reused_total", double(reused));
  log.recomputed = recomputed;
  log.reused = reused;
  log.extra["plan_ms"] = ms(outcome.plan.seconds);
  out["applied"] = "plan";
  out["tokens_recomputed"] = recomputed;
  out["plan"] = {{"prefill_tokens", outcome.plan.prefillTokens},
                 {"scan_tokens", outcome.plan.scanTokens},
                 {"flops", outcome.plan.flops},
                 {"kv_bytes_written", outcome.plan.kvBytesWritten},
                 {"ms", ms(outcome.plan.seconds)},
                 {"compiled", compiled},
                 {"compile_ms", ms(compileSeconds)}};
  if (!outcome.repairs.empty()) {
    Json repairs = Json::array();
    for (const kvrt_exec_repair &r : outcome.repairs)
      repairs.push_back({{"candidates", r.candidates},
                         {"scanned", r.scanned},
                         {"chosen", r.chosen}});
    out["plan"]["selective_recompute"] = repairs;
  }
  out["full_prefill"] = fullPrefillCost(total);
  out["segments"] = segmentsJson(c);
  out["tokens"] = total;
  out["ms"] = ms(secondsSince(start));
}

void Engine::Impl::recordTurn(int64_t contextTokens, int64_t computedTokens) {
  int64_t reused = std::max<int64_t>(0, contextTokens - computedTokens);
  metrics.add("kvserve_context_tokens_total", double(contextTokens));
  metrics.add("kvserve_reused_context_tokens_total", double(reused));
}

//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

Engine::Impl::Store &Engine::Impl::storeOf(const std::string &tenant,
                                           std::string &error, bool &ok) {
  std::lock_guard<std::mutex> lock(storesMutex);
  std::unique_ptr<Store> &store = stores[tenant];
  ok = true;
  if (!store) {
    store = std::make_unique<Store>();
    exec::StoreOptions o = options.runner.store;
    if (!o.url.empty()) {
      // Each tenant keeps to its own part of the store.
      o.prefix += tenant + ":";
      ok = exec::openBlockStore(o, store->ref, store->binding, error);
      if (!ok)
        store.reset();
    }
  }
  static Store none;
  return store ? *store : none;
}

bool Engine::Impl::runPlan(const std::string &program,
                           const std::vector<exec::Value> &args,
                           exec::RunOutcome &outcome, bool &compiled,
                           double &compileSeconds,
                           const exec::BlockStoreBinding *store,
                           RequestError &error) {
  std::string problem;
  std::shared_ptr<const Plan> plan = plans->get(program, compiled, problem);
  if (!plan) {
    error = requestError(500, "plan_error", problem);
    return false;
  }
  compileSeconds = compiled ? plan->compileSeconds : 0;
  metrics.add(compiled ? "kvserve_plan_compiles_total"
                       : "kvserve_plan_cache_hits_total");
  if (compiled)
    metrics.observe("kvserve_plan_compile_seconds", plan->compileSeconds);
  for (int attempt = 0;; ++attempt) {
    {
      std::unique_lock<std::mutex> lock(mathMutex, std::defer_lock);
      if (serialMath)
        lock.lock();
      outcome = exec::runEntry(plan->entry, plan->manifest, runner->backend(),
                               runner->model(), runner->pool(), args,
                               runner->maxContext(), store);
    }
    for (const exec::BlockEvent &e : outcome.blockEvents) {
      const char *what = e.event.outcome == KVRT_EXEC_BLOCK_HIT      ? "hit"
                         : e.event.outcome == KVRT_EXEC_BLOCK_MISS   ? "miss"
                         : e.event.outcome == KVRT_EXEC_BLOCK_STORED ? "stored"
                         : e.event.outcome == KVRT_EXEC_BLOCK_FAULT  ? "fault"
                                                                     : "other";
      metrics.add("kvserve_block_store_events_total", 1,
                  std::string("outcome=\"") + what + "\"");
    }
    if (!outcome.failed)
      return true;
    if (outcome.status == KVRT_ERR_POOL_EXHAUSTED && attempt == 0) {
      while (prefix.evictOne() || evictIdleContext())
        metrics.add("kvserve_evictions_total", 1, "reason=\"pool_full\"");
      continue;
    }
    bool full = outcome.status == KVRT_ERR_POOL_EXHAUSTED;
    bool tooLong = outcome.message.find("context limit") != std::string::npos;
    error = requestError(full      ? 503
                         : tooLong ? 400
                                   : 500,
                         full      ? "pool_exhausted"
                         : tooLong ? "context_too_long"
                                   : "plan_error",
                         "the plan failed: " + outcome.message);
    return false;
  }
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

bool Engine::Impl::decode(
    exec::ViewRef &view, std::vector<float> logits, int32_t prev,
    const Sampling &sampling, Clock::time_point start,
    Clock::time_point deadline,
    const std::function<bool(int32_t, const std::string &)> &emit, Decoded &out,
    RequestError &error) {
  out = Decoded();
  out.seed = sampling.seedGiven ? sampling.seed : randomWord() >> 1;
  Sampler sampler(sampling.temperature, sampling.topK, sampling.topP, out.seed);
  const kvrt_tokenizer *tokenizer = runner->tokenizer();
  size_t emitted = 0, longestStop = 0;
  for (const std::string &s : sampling.stop)
    longestStop = std::max(longestStop, s.size());
  auto decodeStart = Clock::now();
  for (int64_t i = 0; i < sampling.maxTokens; ++i) {
    if (Clock::now() > deadline) {
      out.finish = "timeout";
      break;
    }
    if (i > 0) {
      // The token sampled last goes into the cache, for the next logits.
      exec::ViewRef next;
      std::vector<int32_t> one = {out.tokens.back()};
      if (!prefill(view, one, 0, nullptr, next, logits, error))
        return false;
      view = next;
    }
    int32_t token = sampler.sample(logits.data(), config.vocab_size);
    if (i == 0)
      out.ttft = secondsSince(start);
    if (stopTokens.count(token)) {
      out.finish = "stop";
      break;
    }
    out.tokens.push_back(token);
    std::string piece;
    if (tokenizer) {
      const char *bytes = nullptr;
      size_t length = 0;
      if (!kvrt_tokenizer_decode_token(tokenizer, prev, token, &bytes, &length))
        piece.assign(bytes, length);
    }
    prev = token;
    out.text += piece;
    // Stop strings: the text up to the first one; text that could still
    // become one is held back, and so is an unfinished UTF-8 character.
    size_t stopAt = std::string::npos;
    for (const std::string &s : sampling.stop) {
      size_t from = emitted > s.size() ? emitted - s.size() : 0;
      size_t at = out.text.find(s, from);
      if (at != std::string::npos && at < stopAt)
        stopAt = at;
    }
    size_t ready = out.text.size();
    if (stopAt != std::string::npos) {
      ready = stopAt;
    } else {
      for (size_t hold = std::min(longestStop, out.text.size() - emitted);
           hold > 0; --hold) {
        bool prefixOfStop = false;
        for (const std::string &s : sampling.stop)
          if (s.size() > hold &&
              out.text.compare(out.text.size() - hold, hold, s, 0, hold) == 0)
            prefixOfStop = true;
        if (prefixOfStop) {
          ready = out.text.size() - hold;
          break;
        }
      }
      ready = std::min(ready, completeUtf8(out.text));
    }
    std::string delta =
        ready > emitted ? out.text.substr(emitted, ready - emitted) : "";
    emitted = std::max(emitted, ready);
    if (emit && !emit(token, delta)) {
      out.finish = "cancelled";
      break;
    }
    if (stopAt != std::string::npos) {
      out.text.resize(stopAt);
      out.finish = "stop";
      break;
    }
  }
  if (emit && emitted < out.text.size() && out.finish != "cancelled")
    emit(-1, out.text.substr(emitted));
  out.decodeSeconds = secondsSince(decodeStart);
  metrics.add("kvserve_tokens_generated_total", double(out.tokens.size()));
  if (out.ttft >= 0)
    metrics.observe("kvserve_ttft_seconds", out.ttft);
  return true;
}

bool Engine::Impl::compactDecoded(exec::ViewRef &view, int64_t begin,
                                  RequestError &error) {
  int64_t end = kvrt_view_num_tokens(view.get());
  if (end - begin < 2)
    return true;
  exec::ViewRef out;
  bool merged = false;
  std::string problem;
  if (!compact(view.get(), begin, end, out, merged, problem)) {
    // Compaction saves pages; without room for it the runs stay as they
    // are.
    metrics.add("kvserve_compactions_skipped_total");
    return true;
  }
  view = out;
  return true;
}

bool Engine::Impl::generateFrom(exec::ViewRef &view, std::vector<float> &logits,
                                int32_t prev, const Sampling &sampling,
                                Clock::time_point start, const Sink &sink,
                                Decoded &out, RequestError &error) {
  Clock::time_point deadline = deadlineFrom(start);
  int64_t begin = kvrt_view_num_tokens(view.get());
  int64_t index = 0;
  auto emit = [&](int32_t token, const std::string &text) {
    if (!sink)
      return true;
    Json event = {{"text", text}};
    if (token >= 0) {
      event["token"] = token;
      event["index"] = index++;
    }
    return sink(event);
  };
  if (!checkLength(begin + sampling.maxTokens, error))
    return false;
  if (!decode(view, logits, prev, sampling, start, deadline, emit, out, error))
    return false;
  logits.clear();
  return compactDecoded(view, begin, error);
}

//===----------------------------------------------------------------------===//
// The audit
//===----------------------------------------------------------------------===//

void Engine::Impl::maybeAudit(const Context &c, const RequestLog &log,
                              const std::string &what,
                              const std::string &strategy, Json &out) {
  if (options.auditFraction <= 0 || !c.view)
    return;
  bool sampled;
  {
    std::lock_guard<std::mutex> lock(auditMutex);
    uint64_t z = (auditState += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    sampled = double(z >> 11) / 9007199254740992.0 < options.auditFraction;
    if (sampled && auditQueue.size() >= 16) {
      metrics.add("kvserve_audits_dropped_total");
      sampled = false;
    } else if (sampled) {
      auditQueue.push_back(
          {log.requestId, c.id, what, strategy, c.tokens(), c.view});
      auditReady.notify_one();
    }
  }
  out["audit"] = sampled ? "queued" : "not sampled";
}

void Engine::Impl::auditLoop() {
  for (;;) {
    AuditJob job;
    {
      std::unique_lock<std::mutex> lock(auditMutex);
      auditReady.wait(lock, [&] { return auditStop || !auditQueue.empty(); });
      if (auditQueue.empty())
        return;
      job = std::move(auditQueue.front());
      auditQueue.pop_front();
    }
    auto start = Clock::now();
    RequestError error;
    std::string problem;
    int64_t n = int64_t(job.tokens.size());
    Json line = {{"event", "audit"},         {"request_id", job.requestId},
                 {"context", job.context},   {"what", job.what},
                 {"strategy", job.strategy}, {"tokens", n}};
    // The plan's answer to "what comes next": its last token computed
    // over its cache; the reference: a full prefill of the same tokens.
    exec::ViewRef head = sliceView(job.view.get(), 0, n - 1, problem);
    exec::Logits approx, full;
    exec::ViewRef approxView;
    exec::WorkStats work;
    std::vector<int32_t> last = {job.tokens.back()};
    bool ok =
        head && prefill(head, last, 0, nullptr, approxView, approx.data, error);
    if (ok) {
      std::unique_lock<std::mutex> lock(mathMutex, std::defer_lock);
      if (serialMath)
        lock.lock();
      ok =
          exec::fullPrefill(runner->backend(), forward, runner->model(),
                            runner->pool(), job.tokens, 1, full, work, problem);
    }
    std::vector<int32_t> greedyApprox, greedyFull;
    if (ok) {
      approx.rows = 1;
      approx.vocab = config.vocab_size;
      std::unique_lock<std::mutex> lock(mathMutex, std::defer_lock);
      if (serialMath)
        lock.lock();
      ok = exec::greedyContinue(runner->backend(), forward, runner->model(),
                                approx, approxView, options.auditGreedy,
                                greedyApprox, problem) &&
           exec::greedyContinue(runner->backend(), forward, runner->model(),
                                full, full.result, options.auditGreedy,
                                greedyFull, problem);
    }
    if (!ok) {
      line["error"] = problem.empty() ? error.message : problem;
      metrics.add("kvserve_audits_total", 1, "result=\"error\"");
      writeLogLine(line);
      continue;
    }
    exec::Fidelity f = exec::compareLogits(approx.data.data(), full.data.data(),
                                           1, config.vocab_size);
    int64_t agree = 0;
    while (agree < int64_t(greedyFull.size()) &&
           greedyApprox[size_t(agree)] == greedyFull[size_t(agree)])
      ++agree;
    metrics.add("kvserve_audits_total", 1, "result=\"ok\"");
    metrics.observe("kvserve_audit_kl", f.klMean);
    metrics.add("kvserve_audit_top1_agree_total", double(f.top1Agree));
    metrics.add("kvserve_audit_greedy_agree_tokens_total", double(agree));
    metrics.add("kvserve_audit_greedy_tokens_total", double(greedyFull.size()));
    line["kl"] = f.klMean;
    line["cosine"] = f.cosineMin;
    line["top1_agree"] = f.top1Agree == 1;
    line["greedy_agree"] = agree;
    line["greedy_tokens"] = greedyFull.size();
    line["ms"] = ms(secondsSince(start));
    writeLogLine(line);
  }
}

//===----------------------------------------------------------------------===//
// Prompts (OpenAI)
//===----------------------------------------------------------------------===//

bool Engine::Impl::encodeChat(const std::vector<ChatMessage> &messages,
                              std::vector<int32_t> &out,
                              RequestError &error) const {
  const kvrt_tokenizer *tokenizer = runner->tokenizer();
  if (!tokenizer) {
    error = requestError(400, "no_tokenizer",
                         "the model has no tokenizer: chat needs one (start "
                         "kv-serve with --tokenizer), or use /v1/completions "
                         "with token ids");
    return false;
  }
  ChatPrompt prompt = formatChat(chatFormat, messages);
  out.clear();
  for (const ChatPiece &piece : prompt.pieces) {
    if (piece.special) {
      auto it = specials.find(piece.text);
      if (it == specials.end()) {
        error = requestError(500, "chat_template",
                             std::string("the model's vocabulary has no ") +
                                 piece.text + " token, which the " +
                                 chatFormatName(chatFormat) +
                                 " chat template needs (--chat-template)");
        return false;
      }
      out.push_back(it->second);
      continue;
    }
    std::vector<int32_t> ids;
    if (encode(tokenizer, piece.text, false, false, ids)) {
      error = requestError(400, "invalid_value",
                           std::string("cannot encode a message: ") +
                               kvrt_last_error());
      return false;
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (int64_t(out.size()) > options.limits.maxTokens) {
    error = requestError(400, "too_many_tokens",
                         "messages: " + std::to_string(out.size()) +
                             " tokens, more than the limit of " +
                             std::to_string(options.limits.maxTokens) +
                             " per request (--max-request-tokens)",
                         "messages");
    return false;
  }
  return true;
}

bool Engine::Impl::promptRun(const std::string &tenant,
                             std::vector<int32_t> tokens,
                             const Sampling &sampling, const Sink &sink,
                             Json &out, RequestError &error, RequestLog &log) {
  auto start = Clock::now();
  if (tokens.empty()) {
    error = requestError(400, "invalid_value",
                         "the prompt encodes to no tokens: give at least one",
                         "prompt");
    return false;
  }
  if (!checkLength(int64_t(tokens.size()) + sampling.maxTokens, error))
    return false;
  exec::ViewRef view;
  int64_t reused = 0;
  if (options.mode != ReuseMode::Full)
    reused = prefix.lookup(tenant, tokens, int64_t(tokens.size()) - 1, view);
  if (!reused && !(view = emptyView(error)))
    return false;
  std::vector<float> logits;
  exec::ViewRef filled;
  if (!prefill(view, tokens, size_t(reused), nullptr, filled, logits, error))
    return false;
  int64_t computed = int64_t(tokens.size()) - reused;
  metrics.add("kvserve_tokens_prefilled_total", double(computed));
  metrics.add("kvserve_tokens_reused_total", double(reused));
  recordTurn(int64_t(tokens.size()), computed);
  Decoded decoded;
  if (!generateFrom(filled, logits, tokens.back(), sampling, start, sink,
                    decoded, error))
    return false;
  if (options.mode != ReuseMode::Full) {
    std::vector<int32_t> all = tokens;
    all.insert(all.end(), decoded.tokens.begin(), decoded.tokens.end());
    prefix.insert(tenant, std::move(all), filled);
  }
  log.prefilled = computed;
  log.reused = reused;
  log.generated = int64_t(decoded.tokens.size());
  log.ttftMs = decoded.ttft >= 0 ? ms(decoded.ttft) : -1;
  out = {{"text", decoded.text},
         {"token_ids", decoded.tokens},
         {"finish_reason", decoded.finish},
         {"prompt_tokens", tokens.size()},
         {"cached_tokens", reused},
         {"completion_tokens", decoded.tokens.size()},
         {"seed", decoded.seed},
         {"ttft_ms", decoded.ttft >= 0 ? Json(ms(decoded.ttft)) : Json()},
         {"decode_tokens_per_s",
          decoded.decodeSeconds > 0 && decoded.tokens.size() > 1
              ? Json(double(decoded.tokens.size() - 1) / decoded.decodeSeconds)
              : Json()}};
  return true;
}

//===----------------------------------------------------------------------===//
// Engine
//===----------------------------------------------------------------------===//

void kvir::serve::writeLogLine(const Json &line) {
  std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(logMutex);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

std::unique_ptr<Engine> Engine::create(const EngineOptions &options,
                                       Metrics &metrics, std::string &error) {
  std::unique_ptr<Engine> engine(new Engine());
  engine->impl = std::make_unique<Impl>(options, metrics);
  Impl &m = *engine->impl;
  run::RunnerOptions runnerOptions = options.runner;
  if (!runnerOptions.backendGiven)
    runnerOptions.backend = "cpu";
  m.runner = run::Runner::create(runnerOptions, error);
  if (!m.runner)
    return nullptr;
  if (!m.runner->preparePool(KVRT_KV_F32, /*fromProgram=*/false, error))
    return nullptr;
  m.config = m.runner->config();
  m.dtype = m.runner->pageType();
  m.cost = ModelCost::of(m.config, m.dtype);
  m.pageTokens = runnerOptions.pageTokens;
  m.capacityPages = runnerOptions.poolPages;
  m.serialMath = std::string(m.runner->backend().name()) != "cpu";
  if (m.runner->backend().runsGeneratedCode()) {
    compiler::Target target = std::string(m.runner->backend().name()) == "cuda"
                                  ? compiler::Target::Gpu
                                  : compiler::Target::Cpu;
    if (compiler::compileForward(m.config, target, &m.forward, m.dtype)) {
      error = std::string("cannot compile the forward of the model: ") +
              kvrt_last_error();
      return nullptr;
    }
  }
  m.plans =
      std::make_unique<PlanCache>(m.config, m.dtype, options.planCapacity);
  m.modelId = options.modelId;
  if (m.modelId.empty()) {
    const std::string &file = runnerOptions.model;
    m.modelId = file.empty() ? "synthetic-" + runnerOptions.synthetic
                             : file.substr(file.find_last_of('/') + 1);
  }
  // The chat template: named, or detected from the GGUF file.
  m.chatSource = "default (no template in the model)";
  if (options.chatTemplate != "auto") {
    std::optional<ChatFormat> format = parseChatFormat(options.chatTemplate);
    if (!format) {
      error = "--chat-template must be auto, plain, llama-2, chatml or "
              "llama-3, got '" +
              options.chatTemplate + "'";
      return nullptr;
    }
    m.chatFormat = *format;
    m.chatSource = "--chat-template";
  } else if (!runnerOptions.model.empty()) {
    std::string jinja;
    bool found = false;
    if (!readGgufString(runnerOptions.model, "tokenizer.chat_template", jinja,
                        found, error))
      return nullptr;
    if (found) {
      std::optional<ChatFormat> format = detectChatFormat(jinja);
      m.chatFormat = format.value_or(ChatFormat::Plain);
      m.chatSource = format ? "tokenizer.chat_template of the GGUF file"
                            : "tokenizer.chat_template of the GGUF file is "
                              "of no known family: plain";
    }
  }
  // Special pieces (`<|im_start|>`, `</s>`), and the tokens that end a
  // generation: EOS and BOS (llama2.c's models end a story with BOS).
  if (const kvrt_tokenizer *tokenizer = m.runner->tokenizer()) {
    int32_t vocab = kvrt_tokenizer_vocab_size(tokenizer);
    for (int32_t id = 0; id < vocab; ++id) {
      const char *bytes = nullptr;
      size_t length = 0;
      if (kvrt_tokenizer_get_piece(tokenizer, id, &bytes, &length, nullptr))
        continue;
      std::string piece(bytes, length);
      if (piece.size() > 2 && piece.front() == '<' && piece.back() == '>' &&
          piece.rfind("<0x", 0) != 0)
        m.specials.emplace(piece, id);
    }
    int32_t bos = kvrt_tokenizer_bos_id(tokenizer),
            eos = kvrt_tokenizer_eos_id(tokenizer);
    if (bos >= 0) {
      m.specials["<s>"] = bos;
      m.stopTokens.insert(bos);
    }
    if (eos >= 0) {
      m.specials["</s>"] = eos;
      m.stopTokens.insert(eos);
    }
    for (const std::string &piece : formatChat(m.chatFormat, {}).endPieces)
      if (auto it = m.specials.find(piece); it != m.specials.end())
        m.stopTokens.insert(it->second);
  }
  m.startTime = int64_t(std::time(nullptr));
  m.auditState = options.auditSeed;

  metrics.counter("kvserve_requests_total",
                  "HTTP requests by route and status");
  metrics.histogram("kvserve_request_seconds", "HTTP request latency",
                    {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60});
  metrics.histogram("kvserve_ttft_seconds",
                    "time to first token of a generation, from the start of "
                    "its request",
                    {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                     2.5, 5, 10, 30});
  metrics.counter("kvserve_tokens_prefilled_total",
                  "new tokens computed (contexts created, appended, prompts)");
  metrics.counter("kvserve_tokens_reused_total",
                  "tokens whose K/V a request reused instead of computing");
  metrics.counter("kvserve_tokens_recomputed_total",
                  "tokens computed again (edit and compose plans, repairs, "
                  "a last token re-evaluated)");
  metrics.counter("kvserve_tokens_generated_total", "tokens sampled");
  metrics.counter("kvserve_context_tokens_total",
                  "context tokens at generations (hit rate denominator)");
  metrics.counter("kvserve_reused_context_tokens_total",
                  "of those, tokens not computed during the turn");
  metrics.counter("kvserve_evictions_total",
                  "contexts and cached prefixes evicted");
  metrics.counter("kvserve_context_spills_total",
                  "evicted contexts written to the block store (stored) or "
                  "not (failed: recomputed from their tokens on use)");
  metrics.counter("kvserve_context_restores_total",
                  "evicted contexts brought back: from the block store, or "
                  "recomputed from their tokens");
  metrics.counter("kvserve_plan_compiles_total",
                  "plans compiled (or loaded from the compile cache on disk)");
  metrics.counter("kvserve_plan_cache_hits_total",
                  "plans found compiled in the cache");
  metrics.histogram("kvserve_plan_compile_seconds", "time to compile a plan",
                    {0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10});
  metrics.counter("kvserve_block_store_events_total",
                  "block store outcomes of kv.load_block (hit, miss, fault)");
  metrics.counter("kvserve_audits_total",
                  "edits and composes audited against a full prefill");
  metrics.counter("kvserve_audits_dropped_total",
                  "audits sampled but dropped (queue full)");
  metrics.histogram("kvserve_audit_kl",
                    "KL(full || plan) of the next-token distribution",
                    {1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 0.1, 1});
  metrics.counter("kvserve_audit_top1_agree_total",
                  "audits whose next-token argmax agrees with a full prefill");
  metrics.counter("kvserve_audit_greedy_agree_tokens_total",
                  "greedy tokens agreeing with a full prefill before the "
                  "first divergence");
  metrics.counter("kvserve_audit_greedy_tokens_total",
                  "greedy tokens compared by audits");
  metrics.counter("kvserve_compactions_skipped_total",
                  "decode runs left uncompacted (no free pages)");
  if (options.auditFraction > 0)
    m.auditThread = std::thread([&m] { m.auditLoop(); });
  return engine;
}

Engine::~Engine() {
  if (impl) {
    drain();
    // Spilled contexts die with the server: their blobs leave the store.
    for (auto &[id, c] : impl->contexts)
      impl->forgetSpill(*c);
    // Contexts, blocks and cached prefixes release their views before the
    // runner's pool goes.
    impl->contexts.clear();
    impl->blocks.clear();
    while (impl->prefix.evictOne())
      ;
  }
}

void Engine::drain() {
  {
    std::lock_guard<std::mutex> lock(impl->auditMutex);
    impl->auditStop = true;
  }
  impl->auditReady.notify_all();
  if (impl->auditThread.joinable())
    impl->auditThread.join();
}

const std::string &Engine::modelId() const { return impl->modelId; }
const char *Engine::chatFormat() const {
  return chatFormatName(impl->chatFormat);
}

bool Engine::createContext(const std::string &tenant,
                           const CreateContextRequest &request, Json &out,
                           RequestError &error, RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  auto context = std::make_shared<Context>();
  context->id = randomId("ctx_");
  context->tenant = tenant;
  context->created = start;
  std::set<std::string> names;
  for (size_t i = 0; i < request.segments.size(); ++i) {
    const SegmentSpec &spec = request.segments[i];
    std::string param = "segments[" + std::to_string(i) + "]";
    if (!names.insert(spec.name).second) {
      error = requestError(400, "duplicate_segment",
                           param + ".name: segment " + spec.name +
                               " is given twice",
                           param + ".name");
      return false;
    }
    for (const std::string &dep : spec.deps)
      if (!names.count(dep) || dep == spec.name) {
        error = requestError(400, "invalid_dependency",
                             param + ".deps: " + dep +
                                 " is not an earlier segment (dependencies "
                                 "point backwards)",
                             param + ".deps");
        return false;
      }
    Segment s{spec.name, spec.kind, spec.deps, {}};
    if (!m.tokensOf(spec.content, param, s.tokens, error))
      return false;
    if (s.tokens.empty()) {
      error = requestError(400, "empty_segment",
                           param + ": segment " + spec.name + " has no tokens",
                           param);
      return false;
    }
    context->segments.push_back(std::move(s));
  }
  int64_t total = context->total();
  if (total > m.options.limits.maxTokens) {
    error = requestError(400, "too_many_tokens",
                         "the segments hold " + std::to_string(total) +
                             " tokens, more than the limit of " +
                             std::to_string(m.options.limits.maxTokens) +
                             " per request (--max-request-tokens)");
    return false;
  }
  if (!m.checkLength(total, error))
    return false;
  // Room for it: the global limit evicts, the tenant's refuses.
  for (;;) {
    std::unique_lock<std::mutex> lock(m.contextsMutex);
    int64_t mine = 0;
    for (auto &[id, c] : m.contexts)
      mine += c->tenant == tenant;
    if (mine >= m.options.maxContextsPerTenant) {
      error =
          requestError(429, "too_many_contexts",
                       "this tenant holds " + std::to_string(mine) +
                           " contexts, the limit (--max-contexts-per-tenant): "
                           "delete some");
      return false;
    }
    if (m.residentContextsLocked() < m.options.maxContexts)
      break;
    lock.unlock();
    if (!m.evictIdleContext()) {
      error = requestError(429, "too_many_contexts",
                           "the server holds --max-contexts contexts in the "
                           "pool, all busy");
      return false;
    }
  }
  // The new context is locked before anyone can find it.
  context->lock.lock(start + std::chrono::hours(1));
  struct Unlock {
    Context &c;
    ~Unlock() { c.lock.unlock(); }
  } unlock{*context};
  {
    std::lock_guard<std::mutex> lock(m.contextsMutex);
    context->active = 1;
    context->lastUsed = start;
    m.contexts[context->id] = context;
  }
  struct Release {
    Impl &m;
    std::shared_ptr<Context> c;
    ~Release() { m.release(c); }
  } release{m, context};
  int64_t reused = 0, computed = 0;
  bool ok = true;
  if (m.options.mode == ReuseMode::Kvir) {
    exec::ViewRef view;
    reused = m.prefix.lookup(tenant, context->tokens(), total, view);
    if (reused) {
      context->view = view;
      context->exactPrefix = reused;
    }
    ok = m.syncView(*context, computed, error);
    // The prefix reused is exact; so is what the sync computed after it.
    if (ok)
      m.offerPrefix(*context);
  }
  if (!ok) {
    std::lock_guard<std::mutex> lock(m.contextsMutex);
    m.contexts.erase(context->id);
    return false;
  }
  m.prefillReply(*context, computed, reused, start, log, out);
  return true;
}

bool Engine::readContext(const std::string &tenant, const std::string &id,
                         bool withTokens, Json &out, RequestError &error) {
  Held held(*impl);
  if (!held.take(tenant, id, Clock::now(), error, nullptr,
                 /*needsCache=*/false))
    return false;
  out = impl->describe(*held, withTokens);
  return true;
}

bool Engine::deleteContext(const std::string &tenant, const std::string &id,
                           Json &out, RequestError &error) {
  std::shared_ptr<Context> context;
  {
    Held held(*impl);
    // After the requests queued before it.
    if (!held.take(tenant, id, Clock::now(), error, nullptr,
                   /*needsCache=*/false))
      return false;
    impl->forgetSpill(*held);
    std::lock_guard<std::mutex> lock(impl->contextsMutex);
    impl->contexts.erase(id);
    held->deleted = true;
    held->view.reset();
  }
  out = {{"id", id}, {"object", "context"}, {"deleted", true}};
  return true;
}

Json Engine::listContexts(const std::string &tenant) {
  Json list = Json::array();
  std::lock_guard<std::mutex> lock(impl->contextsMutex);
  for (auto &[id, c] : impl->contexts)
    if (c->tenant == tenant)
      list.push_back(id);
  return {{"object", "list"}, {"data", list}};
}

bool Engine::append(const std::string &tenant, const std::string &id,
                    const AppendRequest &request, Json &out,
                    RequestError &error, RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  Held c(m);
  if (!c.take(tenant, id, start, error, &log))
    return false;
  const SegmentSpec &spec = request.segment;
  if (!m.checkNewSegment(*c, spec.name, spec.deps, error))
    return false;
  Segment s{spec.name, spec.kind, spec.deps, {}};
  if (!m.tokensOf(spec.content, "", s.tokens, error))
    return false;
  if (s.tokens.empty()) {
    error = requestError(400, "empty_segment",
                         "segment " + spec.name + " has no tokens");
    return false;
  }
  if (!m.checkLength(c->total() + int64_t(s.tokens.size()), error))
    return false;
  int64_t before = c->total();
  c->segments.push_back(std::move(s));
  // Deferred by default: the next request that needs the cache (a
  // generation, an edit, a compose) prefills every pending token in one
  // forward call, which reads the weights once.
  int64_t computed = 0;
  if (m.options.mode == ReuseMode::Kvir && request.prefill) {
    if (!m.syncView(*c, computed, error)) {
      c->segments.pop_back();
      return false;
    }
    m.offerPrefix(*c);
  }
  m.prefillReply(*c, computed, m.options.mode == ReuseMode::Kvir ? before : 0,
                 start, log, out);
  return true;
}

bool Engine::edit(const std::string &tenant, const std::string &id,
                  const EditRequest &request, Json &out, RequestError &error,
                  RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  Held c(m);
  if (!c.take(tenant, id, start, error, &log))
    return false;
  int edited = c->find(request.segment);
  if (edited < 0) {
    error = requestError(404, "segment_not_found",
                         "the context has no segment " + request.segment,
                         "segment");
    return false;
  }
  std::vector<int32_t> tokens, correction;
  if (!m.tokensOf(request.content, "text", tokens, error) ||
      (request.hasCorrection &&
       !m.tokensOf(request.correction, "correction", correction, error)))
    return false;
  if (tokens.empty() || (request.hasCorrection && correction.empty())) {
    error = requestError(400, "empty_segment",
                         tokens.empty() ? "the new content has no tokens"
                                        : "the correction has no tokens");
    return false;
  }
  std::vector<SegmentShape> shapes;
  for (const Segment &s : c->segments)
    shapes.push_back({s.name, s.kind, s.deps, int64_t(s.tokens.size())});
  EditShape shape;
  std::string problem;
  bool perSegment = request.repair.kind != Repair::Kind::None;
  if (!canonicalEdit(shapes, size_t(edited), request.strategy, perSegment,
                     shape, problem)) {
    error = requestError(400, "invalid_edit", problem, "strategy");
    return false;
  }
  bool erratum = request.strategy == "erratum";
  int64_t newTotal =
      c->total() + (erratum ? int64_t(correction.size())
                            : int64_t(tokens.size()) -
                                  int64_t(c->segments[edited].tokens.size()));
  if (!m.checkLength(newTotal, error))
    return false;

  // The segments after the edit.
  std::vector<Segment> after = c->segments;
  std::string correctionName;
  if (erratum) {
    correctionName = request.segment + "_erratum" + std::to_string(++c->errata);
    while (c->find(correctionName) >= 0)
      correctionName =
          request.segment + "_erratum" + std::to_string(++c->errata);
    after.insert(after.begin() + long(shape.answer),
                 Segment{correctionName, "correction", {}, correction});
  } else {
    after[size_t(edited)].tokens = tokens;
  }
  int64_t editBegin = 0;
  for (int i = 0; i < edited; ++i)
    editBegin += int64_t(c->segments[size_t(i)].tokens.size());

  out = {{"id", id},
         {"segment", request.segment},
         {"strategy", request.strategy},
         {"mode", reuseModeName(m.options.mode)}};
  if (request.repair.kind != Repair::Kind::None)
    out["repair"] = repairText(request.repair);
  if (erratum)
    out["correction_segment"] = correctionName;

  if (m.options.mode != ReuseMode::Kvir) {
    c->segments = std::move(after);
    m.deferredReply(*c, start, out);
    return true;
  }

  int64_t synced = 0;
  if (!m.syncView(*c, synced, error))
    return false;
  // The cache labelled by the plan's groups.
  std::vector<Part> groups;
  for (const SegmentShape &g : shape.groups)
    groups.push_back({g.name, g.tokens});
  exec::ViewRef canonical;
  if (!relabel(c->view.get(), groups, canonical, problem)) {
    error = requestError(500, "runtime_error", problem);
    return false;
  }
  std::string program =
      editProgram(m.plans->modelType(), m.plans->cacheType(), shape,
                  strategyText(request.strategy, request.repair), erratum);
  std::vector<exec::Value> args(erratum ? 4 : 3);
  args[0].kind = exec::ValueKind::Model;
  args[1].kind = exec::ValueKind::Cache;
  args[1].cache = canonical;
  args[2].kind = exec::ValueKind::Tokens;
  args[2].tokens = tokens;
  if (erratum) {
    args[3].kind = exec::ValueKind::Tokens;
    args[3].tokens = correction;
  }
  m.reclaim(
      (int64_t(tokens.size()) + int64_t(correction.size())) / m.pageTokens + 8);
  exec::RunOutcome outcome;
  bool compiled = false;
  double compileSeconds = 0;
  if (!m.runPlan(program, args, outcome, compiled, compileSeconds, nullptr,
                 error))
    return false;
  exec::ViewRef result = outcome.results.at(0).cache;
  int64_t resultTokens = kvrt_view_num_tokens(result.get());
  if (resultTokens != newTotal) {
    error = requestError(500, "plan_error",
                         "the plan returned " + std::to_string(resultTokens) +
                             " tokens, the edited context has " +
                             std::to_string(newTotal));
    return false;
  }
  c->segments = std::move(after);
  c->view = result;
  c->logits.clear();
  if (!m.labelled(*c, error))
    return false;
  // What stays exact: the prefix before the edit, and with `exact` all of
  // it; an erratum keeps everything before the correction.
  if (request.strategy == "exact")
    c->exactPrefix = c->exactPrefix >= editBegin ? newTotal : c->exactPrefix;
  else if (erratum)
    c->exactPrefix = std::min(c->exactPrefix, newTotal);
  else
    c->exactPrefix =
        std::min(c->exactPrefix, editBegin + int64_t(tokens.size()));
  m.offerPrefix(*c);
  m.planReply(*c, outcome, compiled, compileSeconds, newTotal, start, log, out);
  out["plan"]["groups"] = shape.groups.size();
  log.extra["strategy"] = request.strategy;
  m.maybeAudit(*c, log, "edit", request.strategy, out);
  if (out.contains("audit"))
    log.extra["audit"] = out["audit"];
  return true;
}

bool Engine::compose(const std::string &tenant, const std::string &id,
                     const ComposeRequest &request, Json &out,
                     RequestError &error, RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  std::shared_ptr<Block> block;
  {
    std::lock_guard<std::mutex> lock(m.blocksMutex);
    auto it = m.blocks.find({tenant, request.block});
    if (it != m.blocks.end())
      block = it->second;
  }
  if (!block) {
    error = requestError(404, "block_not_found",
                         "no block " + request.block + " (POST /v1/blocks)",
                         "block");
    return false;
  }
  Held c(m);
  if (!c.take(tenant, id, start, error, &log))
    return false;
  if (!m.checkNewSegment(*c, request.name, request.deps, error))
    return false;
  int64_t newTotal = c->total() + int64_t(block->tokens.size());
  if (!m.checkLength(newTotal, error))
    return false;
  Segment s{request.name, request.kind, request.deps, block->tokens};
  out = {{"id", id},
         {"block", request.block},
         {"segment", request.name},
         {"mode", reuseModeName(m.options.mode)}};
  if (m.options.mode != ReuseMode::Kvir) {
    c->segments.push_back(std::move(s));
    m.deferredReply(*c, start, out);
    return true;
  }
  int64_t synced = 0;
  if (!m.syncView(*c, synced, error))
    return false;
  std::string repair = repairText(request.repair);
  std::vector<exec::Value> args(3);
  args[0].kind = exec::ValueKind::Model;
  args[1].kind = exec::ValueKind::Cache;
  args[1].cache = c->view;
  args[2].kind = exec::ValueKind::Cache;
  args[2].cache = block->view;
  exec::RunOutcome outcome;
  bool compiled = false;
  double compileSeconds = 0;
  if (!m.runPlan(
          composeProgram(m.plans->modelType(), m.plans->cacheType(), repair),
          args, outcome, compiled, compileSeconds, nullptr, error))
    return false;
  c->segments.push_back(std::move(s));
  c->view = outcome.results.at(0).cache;
  c->logits.clear();
  if (!m.labelled(*c, error))
    return false;
  m.planReply(*c, outcome, compiled, compileSeconds, newTotal, start, log, out);
  if (!repair.empty())
    out["repair"] = repair;
  m.maybeAudit(*c, log, "compose", repair.empty() ? "none" : repair, out);
  return true;
}

bool Engine::generate(const std::string &tenant, const std::string &id,
                      const GenerateRequest &request, const Sink &sink,
                      Json &out, RequestError &error, RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  Held c(m);
  if (!c.take(tenant, id, start, error, &log))
    return false;
  std::string name = request.name;
  if (name.empty()) {
    do
      name = "gen" + std::to_string(++c->generations);
    while (c->find(name) >= 0);
  }
  std::vector<std::string> deps = request.deps;
  if (!request.depsGiven)
    for (const Segment &s : c->segments)
      deps.push_back(s.name);
  if (!m.checkNewSegment(*c, name, deps, error))
    return false;
  if (!m.checkLength(c->total() + request.sampling.maxTokens, error))
    return false;
  int64_t computed = 0, recomputed = 0;
  if (!m.materialize(*c, computed, recomputed, error))
    return false;
  int64_t contextTokens = c->total();
  m.metrics.add("kvserve_tokens_prefilled_total", double(computed));
  m.metrics.add("kvserve_tokens_recomputed_total", double(recomputed));
  m.metrics.add("kvserve_tokens_reused_total",
                double(contextTokens - computed - recomputed));
  m.recordTurn(contextTokens, c->computedSinceGenerate);
  int64_t turnComputed = c->computedSinceGenerate;
  c->computedSinceGenerate = 0;
  std::vector<int32_t> all = c->tokens();
  Decoded decoded;
  exec::ViewRef view = c->view;
  std::vector<float> logits = c->logits;
  if (!m.generateFrom(view, logits, all.back(), request.sampling, start, sink,
                      decoded, error))
    return false;
  if (!decoded.tokens.empty())
    c->segments.push_back({name, request.kind, deps, decoded.tokens});
  if (m.options.mode == ReuseMode::Kvir) {
    c->view = view;
    c->logits.clear();
    if (c->exactPrefix == contextTokens)
      c->exactPrefix = contextTokens + int64_t(decoded.tokens.size());
    if (!m.labelled(*c, error))
      return false;
    m.offerPrefix(*c);
  } else {
    // Prefix mode keeps the K/V in the prefix cache only; full mode
    // nowhere.
    c->view = view;
    c->exactPrefix = c->covered();
    m.offerPrefix(*c);
    c->view.reset();
    c->logits.clear();
  }
  log.prefilled = computed;
  log.recomputed = recomputed;
  log.reused = std::max<int64_t>(0, contextTokens - turnComputed);
  log.generated = int64_t(decoded.tokens.size());
  log.ttftMs = decoded.ttft >= 0 ? ms(decoded.ttft) : -1;
  out = {{"id", id},
         {"segment", decoded.tokens.empty() ? Json() : Json(name)},
         {"text", decoded.text},
         {"token_ids", decoded.tokens},
         {"finish_reason", decoded.finish},
         {"seed", decoded.seed},
         {"context_tokens", contextTokens},
         {"turn_computed_tokens", turnComputed},
         {"hit_rate", contextTokens ? double(std::max<int64_t>(
                                          0, contextTokens - turnComputed)) /
                                          double(contextTokens)
                                    : 0.0},
         {"prefilled", computed},
         {"recomputed", recomputed},
         {"ttft_ms", decoded.ttft >= 0 ? Json(ms(decoded.ttft)) : Json()},
         {"decode_tokens_per_s",
          decoded.decodeSeconds > 0 && decoded.tokens.size() > 1
              ? Json(double(decoded.tokens.size() - 1) / decoded.decodeSeconds)
              : Json()},
         {"tokens", c->total()},
         {"ms", ms(secondsSince(start))}};
  return true;
}

bool Engine::createBlock(const std::string &tenant, const BlockRequest &request,
                         Json &out, RequestError &error, RequestLog &log) {
  Impl &m = *impl;
  auto start = Clock::now();
  std::vector<int32_t> tokens;
  if (!m.tokensOf(request.content, "text", tokens, error))
    return false;
  if (tokens.empty()) {
    error = requestError(400, "empty_segment", "the block has no tokens");
    return false;
  }
  if (!m.checkLength(int64_t(tokens.size()), error))
    return false;
  {
    std::lock_guard<std::mutex> lock(m.blocksMutex);
    auto it = m.blocks.find({tenant, request.name});
    if (it != m.blocks.end()) {
      if (it->second->tokens != tokens) {
        error = requestError(409, "block_exists",
                             "a block " + request.name +
                                 " with other tokens exists: DELETE it first",
                             "name");
        return false;
      }
      out = {{"name", request.name},
             {"object", "block"},
             {"tokens", tokens.size()},
             {"source", "existing"}};
      return true;
    }
    int64_t mine = 0;
    for (auto &[key, b] : m.blocks)
      mine += key.first == tenant;
    if (mine >= m.options.maxBlocks) {
      error =
          requestError(429, "too_many_blocks",
                       "this tenant holds " + std::to_string(mine) +
                           " blocks, the limit (--max-blocks): delete some");
      return false;
    }
  }
  std::string problem;
  bool storeOk = true;
  Impl::Store &store = m.storeOf(tenant, problem, storeOk);
  if (!storeOk) {
    error = requestError(500, "block_store", problem);
    return false;
  }
  std::vector<exec::Value> args(2);
  args[0].kind = exec::ValueKind::Model;
  args[1].kind = exec::ValueKind::Tokens;
  args[1].tokens = tokens;
  m.reclaim(int64_t(tokens.size()) / m.pageTokens + 2);
  exec::RunOutcome outcome;
  bool compiled = false;
  double compileSeconds = 0;
  if (!m.runPlan(blockProgram(m.plans->modelType(), m.plans->cacheType()), args,
                 outcome, compiled, compileSeconds,
                 store.ref ? &store.binding : nullptr, error))
    return false;
  auto block = std::make_shared<Block>();
  block->tokens = tokens;
  block->view = outcome.results.at(0).cache;
  block->source = "prefilled";
  for (const exec::BlockEvent &e : outcome.blockEvents)
    if (e.event.op == KVRT_EXEC_BLOCK_LOAD)
      block->source = e.event.outcome == KVRT_EXEC_BLOCK_HIT
                          ? "block store (hit)"
                      : e.event.outcome == KVRT_EXEC_BLOCK_FAULT
                          ? "prefilled (block store fault: " + e.message + ")"
                      : e.event.outcome == KVRT_EXEC_BLOCK_MISS
                          ? "prefilled (block store miss; stored)"
                          : "prefilled";
  {
    std::lock_guard<std::mutex> lock(m.blocksMutex);
    m.blocks[{tenant, request.name}] = block;
  }
  m.metrics.add(
      "kvserve_tokens_prefilled_total",
      double(outcome.plan.prefillTokens + outcome.setup.prefillTokens));
  log.prefilled = outcome.plan.prefillTokens + outcome.setup.prefillTokens;
  out = {{"name", request.name},         {"object", "block"},
         {"tokens", tokens.size()},      {"source", block->source},
         {"prefilled", log.prefilled},   {"compiled", compiled},
         {"ms", ms(secondsSince(start))}};
  return true;
}

Json Engine::listBlocks(const std::string &tenant) {
  Json list = Json::array();
  std::lock_guard<std::mutex> lock(impl->blocksMutex);
  for (auto &[key, b] : impl->blocks)
    if (key.first == tenant)
      list.push_back({{"name", key.second}, {"tokens", b->tokens.size()}});
  return {{"object", "list"}, {"data", list}};
}

bool Engine::deleteBlock(const std::string &tenant, const std::string &name,
                         Json &out, RequestError &error) {
  std::lock_guard<std::mutex> lock(impl->blocksMutex);
  if (!impl->blocks.erase({tenant, name})) {
    error = requestError(404, "block_not_found", "no block " + name);
    return false;
  }
  out = {{"name", name}, {"object", "block"}, {"deleted", true}};
  return true;
}

bool Engine::complete(const std::string &tenant,
                      const CompletionRequest &request, const Sink &sink,
                      Json &out, RequestError &error, RequestLog &log) {
  Content prompt = request.prompt;
  // A text prompt gets BOS in front where the vocabulary has one (llama.cpp
  // and llama2.c do the same).
  prompt.bos = prompt.isText && impl->runner->tokenizer() &&
               kvrt_tokenizer_bos_id(impl->runner->tokenizer()) >= 0;
  std::vector<int32_t> tokens;
  if (!impl->tokensOf(prompt, "prompt", tokens, error))
    return false;
  return impl->promptRun(tenant, std::move(tokens), request.sampling, sink, out,
                         error, log);
}

bool Engine::chat(const std::string &tenant, const ChatRequest &request,
                  const Sink &sink, Json &out, RequestError &error,
                  RequestLog &log) {
  std::vector<int32_t> tokens;
  if (!impl->encodeChat(request.messages, tokens, error))
    return false;
  return impl->promptRun(tenant, std::move(tokens), request.sampling, sink, out,
                         error, log);
}

Json Engine::models() const {
  const Impl &m = *impl;
  return {{"object", "list"},
          {"data",
           {{{"id", m.modelId},
             {"object", "model"},
             {"created", m.startTime},
             {"owned_by", "kvir"},
             {"kvir",
              {{"config", run::describeConfig(m.config)},
               {"backend", m.runner->backend().name()},
               {"kv_dtype", kvDtypeName(m.dtype)},
               {"mode", reuseModeName(m.options.mode)},
               {"tokenizer", m.runner->tokenizerPath()},
               {"chat_template", chatFormatName(m.chatFormat)},
               {"chat_template_source", m.chatSource},
               {"max_context", m.runner->maxContext()}}}}}}};
}

Json Engine::health() const {
  std::lock_guard<std::mutex> lock(impl->contextsMutex);
  return {{"status", "ok"},
          {"model", impl->modelId},
          {"contexts", impl->contexts.size()}};
}

std::string Engine::metricsText() {
  Impl &m = *impl;
  kvrt_pool_stats stats{};
  kvrt_pool_get_stats(m.runner->pool(), &stats);
  size_t contexts, evicted = 0;
  {
    std::lock_guard<std::mutex> lock(m.contextsMutex);
    contexts = m.contexts.size();
    for (auto &[id, c] : m.contexts)
      evicted += c->evicted;
  }
  size_t blocks;
  {
    std::lock_guard<std::mutex> lock(m.blocksMutex);
    blocks = m.blocks.size();
  }
  double context = m.metrics.value("kvserve_context_tokens_total");
  double reused = m.metrics.value("kvserve_reused_context_tokens_total");
  std::vector<Metrics::Gauge> gauges = {
      {"kvserve_pool_pages_used", "KV pool pages in use",
       double(stats.pages_in_use)},
      {"kvserve_pool_pages_capacity", "KV pool pages in all",
       double(stats.capacity_pages)},
      {"kvserve_pool_bytes_used", "KV pool bytes in use",
       double(stats.bytes_in_use)},
      {"kvserve_contexts", "live contexts", double(contexts)},
      {"kvserve_contexts_evicted",
       "of those, contexts whose K/V are out of the pool (spilled or "
       "dropped; restored on use)",
       double(evicted)},
      {"kvserve_blocks", "blocks kept", double(blocks)},
      {"kvserve_prefix_cache_entries", "cached prefixes",
       double(m.prefix.size())},
      {"kvserve_plans_cached", "compiled plans held", double(m.plans->size())},
      {"kvserve_hit_rate",
       "reused context tokens / context tokens, over all generations",
       context > 0 ? reused / context : 0},
  };
  // The compile cache on disk (plans and the forward an earlier process
  // compiled), where the server has one.
  if (std::shared_ptr<compiler::CompileCache> cache =
          compiler::compileCache()) {
    compiler::CacheStats s = cache->stats();
    gauges.push_back({"kvserve_compile_cache_hits",
                      "compiled code loaded from the compile cache",
                      double(s.hits)});
    gauges.push_back({"kvserve_compile_cache_misses",
                      "compiles the compile cache had no entry for",
                      double(s.misses)});
    gauges.push_back({"kvserve_compile_cache_rejected",
                      "compile cache entries that failed a check (compiled "
                      "afresh)",
                      double(s.rejected)});
    gauges.push_back({"kvserve_compile_cache_stored",
                      "entries written to the compile cache",
                      double(s.stored)});
  }
  return m.metrics.render(gauges);
}
