//===- kv-serve.cpp - Editable contexts as a service ------------*- C++ -*-===//
//
//   kv-serve [--model FILE] [--port 8080] [--api-key [TENANT=]KEY]...
//
// Loads one model and serves it over HTTP/1.1 + JSON: contexts as
// resources (create from segments, append, edit with a compiled plan,
// compose a block, generate, read, delete), blocks, the OpenAI
// completions, chat completions and models endpoints with automatic prefix
// reuse, /health and /metrics (docs/serve.md). The model, tokenizer,
// backend, pool and block store options are the runners' (driver/runner);
// the rest is the server's (driver/server). The first line on stdout is the
// port it listens on. SIGTERM or SIGINT stops accepting, finishes the
// requests in flight and exits 0.
//
//===----------------------------------------------------------------------===//

#include "driver/server/Server.h"

#include "driver/compiler/CompileCache.h"
#include "driver/runner/RunOptions.h"
#include "driver/version/Version.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include <pthread.h>

using namespace kvir;
using namespace kvir::serve;

namespace {

const char *kUsage =
    "kv-serve: editable KV contexts as a service, with OpenAI-compatible "
    "endpoints\n(docs/serve.md)\n"
    "\n"
    "usage: kv-serve [options]\n"
    "\n"
    "  kv-serve --model ../shared/models/stories260K.bin --port 8080\n"
    "  kv-serve --model M.gguf --api-key alice=$ALICE_KEY --api-key "
    "bob=$BOB_KEY\n"
    "  kv-serve --synthetic synthetic-bench --no-tokenizer --mode prefix\n"
    "\n"
    "The first line on stdout is the port the server listens on (--port 0 "
    "takes\nany free one). SIGTERM stops accepting, finishes the requests in "
    "flight, exits.\n";

struct Options {
  run::RunOptions run;
  run::CacheOptions cache;
  EngineOptions engine;
  ServerOptions server;
  std::vector<std::string> apiKeys;
  std::string apiKeyFile, mode = "kvir";
  int64_t port = 8080, threads = 16, maxBody = 1 << 20, maxTokens = 8192,
          maxGenerate = 4096, maxContexts = 1024, maxPerTenant = 256,
          maxBlocks = 256, prefixEntries = 256, maxPlans = 64, auditGreedy = 16;
  uint64_t auditSeed = 1;
  std::string timeout = "300", highWater = "0.9", auditFraction = "0";
};

/// The runners' options kv-serve has no use for: a server takes its inputs
/// in requests.
const char *const kRequestOptions[] = {
    "entry",         "input", "synthesize-inputs",
    "sample-length", "seed",  "text",
    "text-file",     "bos",   "compare-full-prefill",
    "greedy",        "json",  "dump-logits"};

bool parseDouble(const std::string &text, const char *option, double min,
                 double max, double &out, std::string &error) {
  char *end = nullptr;
  out = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || !(out >= min && out <= max)) {
    error = std::string("--") + option + " must be a number in [" +
            std::to_string(min) + ", " + std::to_string(max) + "], got '" +
            text + "'";
    return false;
  }
  return true;
}

bool positive(int64_t value, const char *option, std::string &error) {
  if (value > 0)
    return true;
  error = std::string("--") + option + " must be positive, got " +
          std::to_string(value);
  return false;
}

/// The compile cache in the log: where, and whether the forward came from
/// it.
nlohmann::json compileCacheLog() {
  std::shared_ptr<compiler::CompileCache> cache = compiler::compileCache();
  if (!cache)
    return "off";
  compiler::CacheStats s = cache->stats();
  return {{"dir", cache->directory()},
          {"hits", s.hits},
          {"misses", s.misses},
          {"rejected", s.rejected}};
}

/// Reads the command line into `o`; false with `error`.
bool parseOptions(int argc, char **argv, Options &o, run::OptionParser &parser,
                  std::string &error) {
  run::addRunOptions(parser, o.run);
  for (const char *name : kRequestOptions)
    parser.withdraw(name, (std::string("--") + name +
                           " belongs to kv-run: kv-serve takes its inputs in "
                           "requests (docs/serve.md)")
                              .c_str());
  run::addCacheOptions(parser, o.cache);
  parser.withdraw("cache-stats", "--cache-stats belongs to kv-run: kv-serve "
                                 "reports the compile cache in /metrics and "
                                 "its log");
  parser.section("serving");
  parser.text("host", "ADDRESS",
              "address to listen on (default 127.0.0.1: this machine only)",
              o.server.host);
  parser.integer("port", "N",
                 "port to listen on (default 8080; 0: any free port); the "
                 "first line on stdout is the port",
                 o.port);
  parser.list("api-key", "[TENANT=]KEY",
              "require Authorization: Bearer KEY on every endpoint but "
              "/health; each key is a tenant, which sees only its own "
              "contexts, blocks and block-store prefix (repeatable)",
              o.apiKeys);
  parser.text("api-key-file", "FILE",
              "read [TENANT=]KEY lines from FILE (keeps keys out of the "
              "process list)",
              o.apiKeyFile);
  parser.integer("http-threads", "N",
                 "worker threads serving connections (default 16)", o.threads);
  parser.text("mode", "kvir|prefix|full",
              "what the server reuses: kvir (contexts keep their cache; "
              "edits and composes run compiled plans; the default), prefix "
              "(the longest cached prefix, as vLLM and llama.cpp), full "
              "(every generation prefills its whole context)",
              o.mode);
  parser.text("chat-template", "NAME",
              "chat template of /v1/chat/completions: auto (from the GGUF "
              "file's tokenizer.chat_template, else plain), plain, llama-2, "
              "chatml or llama-3",
              o.engine.chatTemplate);
  parser.text("model-id", "NAME",
              "the model's name in /v1/models (default: the model file's "
              "name)",
              o.engine.modelId);

  parser.section("limits");
  parser.integer("max-body-bytes", "N",
                 "largest request body (default 1048576)", o.maxBody);
  parser.integer("max-request-tokens", "N",
                 "most tokens one request may give (default 8192)",
                 o.maxTokens);
  parser.integer("max-generate", "N",
                 "most tokens one generation may ask for (default 4096)",
                 o.maxGenerate);
  parser.integer("max-contexts", "N",
                 "contexts in the pool; beyond, the least recently used idle "
                 "one is evicted: spilled to --kv-store and restored on use "
                 "when one is given, else gone (default 1024)",
                 o.maxContexts);
  parser.integer("max-contexts-per-tenant", "N",
                 "live contexts of one tenant; beyond, creating one is "
                 "refused (default 256)",
                 o.maxPerTenant);
  parser.integer("max-blocks", "N", "blocks kept per tenant (default 256)",
                 o.maxBlocks);
  parser.text("request-timeout", "SECONDS",
              "longest a request may take, waiting for its context included "
              "(default 300)",
              o.timeout);
  parser.text("pool-high-water", "F",
              "share of the KV pool beyond which idle contexts and cached "
              "prefixes are evicted, least recently used first (default 0.9)",
              o.highWater);
  parser.integer("prefix-cache-entries", "N",
                 "token prefixes kept for reuse (default 256)",
                 o.prefixEntries);
  parser.integer("max-plans", "N", "compiled plans kept (default 64)",
                 o.maxPlans);

  parser.section("fidelity audit");
  parser.text("audit-fraction", "F",
              "share of edits and composes compared with a full prefill of "
              "the same context in the background: KL and greedy agreement "
              "(metrics and a log line; default 0)",
              o.auditFraction);
  parser.integer("audit-greedy", "N",
                 "greedy tokens an audit compares (default 16)", o.auditGreedy);
  parser.unsignedInteger("audit-seed", "N",
                         "seed of the audit's sampling (default 1)",
                         o.auditSeed);

  std::vector<std::string> positionals;
  if (!parser.parse(argc, argv, 1, positionals, error))
    return false;
  if (parser.helpRequested() || parser.versionRequested())
    return true;
  if (!positionals.empty()) {
    error = "unexpected argument '" + positionals[0] +
            "': kv-serve takes no program (kv-serve --help)";
    return false;
  }
  if (!run::checkRunOptions(o.run, error) ||
      !run::checkCacheOptions(o.cache, error))
    return false;
  if (o.port < 0 || o.port > 65535) {
    error = "--port must be in [0, 65535], got " + std::to_string(o.port);
    return false;
  }
  for (auto [value, name] : {std::pair{o.threads, "http-threads"},
                             {o.maxBody, "max-body-bytes"},
                             {o.maxTokens, "max-request-tokens"},
                             {o.maxGenerate, "max-generate"},
                             {o.maxContexts, "max-contexts"},
                             {o.maxPerTenant, "max-contexts-per-tenant"},
                             {o.maxBlocks, "max-blocks"},
                             {o.maxPlans, "max-plans"}})
    if (!positive(value, name, error))
      return false;
  if (o.prefixEntries < 0 || o.auditGreedy < 0) {
    error = "--prefix-cache-entries and --audit-greedy must not be negative";
    return false;
  }
  if (o.mode == "kvir")
    o.engine.mode = ReuseMode::Kvir;
  else if (o.mode == "prefix")
    o.engine.mode = ReuseMode::Prefix;
  else if (o.mode == "full")
    o.engine.mode = ReuseMode::Full;
  else {
    error = "--mode must be kvir, prefix or full, got '" + o.mode + "'";
    return false;
  }
  if (!parseDouble(o.timeout, "request-timeout", 0.001, 86400,
                   o.engine.requestTimeout, error) ||
      !parseDouble(o.highWater, "pool-high-water", 0.01, 1,
                   o.engine.poolHighWater, error) ||
      !parseDouble(o.auditFraction, "audit-fraction", 0, 1,
                   o.engine.auditFraction, error))
    return false;
  if (!o.apiKeyFile.empty()) {
    std::ifstream file(o.apiKeyFile);
    if (!file) {
      error = "--api-key-file: cannot read '" + o.apiKeyFile + "'";
      return false;
    }
    for (std::string line; std::getline(file, line);)
      if (!line.empty() && line[0] != '#')
        o.apiKeys.push_back(line);
  }
  for (size_t i = 0; i < o.apiKeys.size(); ++i) {
    const std::string &spec = o.apiKeys[i];
    size_t eq = spec.find('=');
    std::string tenant = eq == std::string::npos ? "tenant" + std::to_string(i)
                                                 : spec.substr(0, eq);
    std::string key = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (key.size() < 8 || !isIdentifier(tenant)) {
      error = "--api-key: give [TENANT=]KEY with a key of at least 8 "
              "characters and a tenant name of letters, digits and _";
      return false;
    }
    o.server.apiKeys.push_back({tenant, key});
  }
  RequestLimits limits;
  limits.maxBodyBytes = size_t(o.maxBody);
  limits.maxTokens = o.maxTokens;
  limits.maxGenerate = o.maxGenerate;
  o.server.port = int(o.port);
  o.server.threads = int(o.threads);
  o.server.limits = o.engine.limits = limits;
  o.engine.runner = o.run.runner;
  o.engine.special = o.run.request.special;
  o.engine.maxContexts = o.maxContexts;
  o.engine.maxContextsPerTenant = o.maxPerTenant;
  o.engine.maxBlocks = o.maxBlocks;
  o.engine.prefixEntries = size_t(o.prefixEntries);
  o.engine.planCapacity = size_t(o.maxPlans);
  o.engine.auditGreedy = o.auditGreedy;
  o.engine.auditSeed = o.auditSeed;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  // Every thread the server starts inherits this mask: SIGTERM and SIGINT
  // are taken by one thread, which stops the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that goes away mid-stream is a failed write, not a signal.
  std::signal(SIGPIPE, SIG_IGN);

  Options o;
  run::OptionParser parser("kv-serve");
  std::string error;
  if (!parseOptions(argc, argv, o, parser, error)) {
    std::fprintf(stderr, "kv-serve: error: %s\n", error.c_str());
    return 1;
  }
  if (parser.helpRequested()) {
    parser.printHelp(stdout, kUsage);
    return 0;
  }
  if (parser.versionRequested()) {
    std::fputs(versionText("kv-serve").c_str(), stdout);
    return 0;
  }
  if (!run::applyThreads(o.run.runner.threads, error)) {
    std::fprintf(stderr, "kv-serve: error: %s\n", error.c_str());
    return 1;
  }
  // Plans and the forward compiled by an earlier server on this machine are
  // loaded, not compiled again; without a cache everything is compiled.
  if (!o.cache.disabled && !compiler::installDefaultCompileCache(
                               uint64_t(o.cache.maxMb) << 20, error))
    writeLogLine(
        {{"event", "warning"}, {"message", "compile cache off: " + error}});
  Metrics metrics;
  std::unique_ptr<Engine> engine = Engine::create(o.engine, metrics, error);
  if (!engine) {
    std::fprintf(stderr, "kv-serve: error: %s\n", error.c_str());
    return 1;
  }
  int port;
  {
    Server server(*engine, metrics, o.server);
    port = server.bind(error);
    if (port < 0) {
      std::fprintf(stderr, "kv-serve: error: %s\n", error.c_str());
      return 1;
    }
    std::printf("%d\n", port);
    std::fflush(stdout);
    writeLogLine(
        {{"event", "listening"},
         {"url", "http://" + o.server.host + ":" + std::to_string(port)},
         {"model", engine->modelId()},
         {"mode", reuseModeName(o.engine.mode)},
         {"chat_template", engine->chatFormat()},
         {"tenants", o.server.apiKeys.size()},
         {"compile_cache", compileCacheLog()}});
    std::atomic<bool> served{false};
    std::thread waiter([&] {
      int signal = 0;
      sigwait(&signals, &signal);
      if (served)
        return;
      writeLogLine({{"event", "stopping"},
                    {"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
      server.stop();
    });
    bool ok = server.serve();
    served = true;
    // Wakes the waiter when the server stopped by itself.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    if (!ok) {
      std::fprintf(stderr, "kv-serve: error: the server stopped "
                           "unexpectedly\n");
      return 1;
    }
  }
  engine->drain();
  engine.reset();
  writeLogLine({{"event", "stopped"}});
  return 0;
}
