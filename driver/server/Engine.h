//===- Engine.h - kv-serve's contexts, plans and generation -----*- C++ -*-===//
//
// What kv-serve does behind its HTTP routes, one method per operation; the
// HTTP layer (Server.h) decodes requests and shapes responses around it.
//
//   one model per process    a run::Runner (the model, its tokenizer, the
//                            backend, the KV pool, the block store) and the
//                            model's JIT-compiled forward, shared by every
//                            request
//   contexts                 named segments (kind, deps, token ids) and a
//                            cache in the pool; 128-bit random ids, one
//                            tenant each, LRU-evicted when idle under pool
//                            pressure or beyond --max-contexts (spilled to
//                            the block store and restored on use when one
//                            is configured)
//   edits, composes, blocks  compiled kv programs (Plans.h, PlanCache.h)
//                            run on the context's cache
//   generation               sampling (Sampler.h) one token at a time; the
//                            tokens join the context as a segment
//   OpenAI endpoints         prompts (chat-formatted: ChatTemplate.h) with
//                            automatic prefix reuse (PrefixCache.h)
//   the audit                a sampled share of edits and composes compared
//                            with a full prefill in the background
//
// Concurrency: any number of threads call the engine. Requests on one
// context are served one at a time in arrival order (a ticket lock per
// context); requests on different contexts run in parallel. What that
// relies on, in the runtime: the pool and views are internally locked
// (KVPool.cpp), the tokenizer is immutable, the CPU backend and the
// generated forward keep no state between calls (each call allocates its
// own working memory), kvrt_parallel_for serves one loop at a time and runs
// a concurrent caller's loop on that caller's thread, and kvrt_last_error is
// per thread. Plan compiles run one at a time (PlanCache.h). Backends other
// than cpu (reference, cuda) are not known to be reentrant: the engine runs
// their math under one lock. Decode steps of concurrent generations are not
// batched into one forward call: the forward ABI prefills tokens over one
// view, so tokens of different contexts cannot share a call.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_ENGINE_H
#define KVIR_DRIVER_SERVER_ENGINE_H

#include "driver/runner/RunOptions.h"
#include "driver/server/Metrics.h"
#include "driver/server/Requests.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

namespace kvir::serve {

/// How much a server reuses (the benchmark's three modes).
enum class ReuseMode {
  /// Every generation prefills its whole context (a stateless server).
  Full,
  /// Contexts are token lists; a generation reuses the longest cached
  /// prefix and prefills the rest (vLLM, llama.cpp's cache_prompt).
  Prefix,
  /// Contexts keep their cache: appends prefill what is new, edits and
  /// composes run compiled plans (KVIR).
  Kvir,
};
const char *reuseModeName(ReuseMode mode);

struct EngineOptions {
  run::RunnerOptions runner;
  ReuseMode mode = ReuseMode::Kvir;
  RequestLimits limits;
  /// Live contexts in all, and per tenant.
  int64_t maxContexts = 1024, maxContextsPerTenant = 256;
  /// Blocks kept per tenant.
  int64_t maxBlocks = 256;
  /// The share of the pool's pages beyond which idle contexts and cached
  /// prefixes are evicted (least recently used first).
  double poolHighWater = 0.9;
  size_t prefixEntries = 256, planCapacity = 64;
  /// The share of edits and composes audited against a full prefill, the
  /// greedy tokens compared, and the seed of the draw.
  double auditFraction = 0;
  int64_t auditGreedy = 16;
  uint64_t auditSeed = 1;
  /// `auto` (from the GGUF file, else plain) or a ChatTemplate.h name.
  std::string chatTemplate = "auto";
  /// The model's name in /v1/models and responses ("": from the file).
  std::string modelId;
  /// Whether special tokens written in a request's text are those tokens
  /// where the request does not say ("special"; kv-serve --special).
  bool special = false;
  /// Seconds a request may take (waiting for its context included).
  double requestTimeout = 300;
};

/// What one request did, for its log line.
struct RequestLog {
  /// The request's id (the server's), and the context it touched.
  std::string requestId, context;
  int64_t prefilled = 0, reused = 0, recomputed = 0, generated = 0;
  double ttftMs = -1;
  nlohmann::json extra = nlohmann::json::object();
};

class Engine {
public:
  using Json = nlohmann::json;
  /// Receives one event of a streamed generation; false stops the
  /// generation (the client went away).
  using Sink = std::function<bool(const Json &event)>;

  /// Opens the model (the runner's options), compiles its forward and
  /// reads its chat template. Null with `error`.
  static std::unique_ptr<Engine> create(const EngineOptions &options,
                                        Metrics &metrics, std::string &error);
  ~Engine();

  /// Contexts (docs/serve.md has the request and response fields). Each
  /// returns false with `error` (a 4xx for the request's fault).
  bool createContext(const std::string &tenant,
                     const CreateContextRequest &request, Json &out,
                     RequestError &error, RequestLog &log);
  bool readContext(const std::string &tenant, const std::string &id,
                   bool withTokens, Json &out, RequestError &error);
  bool deleteContext(const std::string &tenant, const std::string &id,
                     Json &out, RequestError &error);
  Json listContexts(const std::string &tenant);
  bool append(const std::string &tenant, const std::string &id,
              const AppendRequest &request, Json &out, RequestError &error,
              RequestLog &log);
  bool edit(const std::string &tenant, const std::string &id,
            const EditRequest &request, Json &out, RequestError &error,
            RequestLog &log);
  bool compose(const std::string &tenant, const std::string &id,
               const ComposeRequest &request, Json &out, RequestError &error,
               RequestLog &log);
  /// Generates; with `sink`, one event per token as it comes, and `out`
  /// the summary.
  bool generate(const std::string &tenant, const std::string &id,
                const GenerateRequest &request, const Sink &sink, Json &out,
                RequestError &error, RequestLog &log);

  /// Blocks: prefilled once at position 0 (or fetched from the block
  /// store), kept by name per tenant.
  bool createBlock(const std::string &tenant, const BlockRequest &request,
                   Json &out, RequestError &error, RequestLog &log);
  Json listBlocks(const std::string &tenant);
  bool deleteBlock(const std::string &tenant, const std::string &name,
                   Json &out, RequestError &error);

  /// OpenAI completions and chat completions: `out` is the response body
  /// (the last chunk's fields when streamed through `sink`).
  bool complete(const std::string &tenant, const CompletionRequest &request,
                const Sink &sink, Json &out, RequestError &error,
                RequestLog &log);
  bool chat(const std::string &tenant, const ChatRequest &request,
            const Sink &sink, Json &out, RequestError &error, RequestLog &log);

  /// /v1/models, /health and /metrics.
  Json models() const;
  Json health() const;
  std::string metricsText();

  /// Stops the audit worker after the audits queued (SIGTERM).
  void drain();

  const std::string &modelId() const;
  const char *chatFormat() const;

  struct Impl;

private:
  Engine() = default;
  std::unique_ptr<Impl> impl;
};

/// Writes one JSON line to stderr (one writer at a time).
void writeLogLine(const nlohmann::json &line);

/// A new 128-bit random id (getrandom), as 32 hex digits after `prefix`.
std::string randomId(const std::string &prefix);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_ENGINE_H
