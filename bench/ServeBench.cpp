//===- ServeBench.cpp - Agent traces replayed against kv-serve --*- C++ -*-===//
//
// kv-bench-serve: the serving benchmark of issue 22. It starts kv-serve in
// each of three modes on the same model and replays the same agent traces
// over HTTP with N concurrent clients:
//
//   full     every generation prefills its whole context (a stateless
//            server)
//   prefix   a generation reuses the longest cached token prefix and
//            prefills the rest (vLLM's automatic prefix caching,
//            llama.cpp's cache_prompt)
//   kvir     contexts keep their cache; appends prefill what is new, edits
//            and composes run compiled kv plans (cot_slice)
//
// A session is an agent: a system prompt and a fact, tool manuals composed
// in as blocks, then turns that each append a user message and a tool
// result and generate an answer (streamed, greedy); every few turns the
// fact is edited first. A turn's time to first token is measured by the
// client from the start of the turn's first request to the first streamed
// token. Reported per mode: TTFT p50/p90/p99, decode tokens/s, the hit rate
// (context tokens not computed during the turn / context tokens, from the
// server's accounting) and the tokens computed per turn; then, in a
// separate run that is not timed, the fidelity of kvir's answers audited
// against a full prefill (kv-serve --audit-fraction 1). Token ids are
// drawn from a seeded generator, the same in every mode.
//
//===----------------------------------------------------------------------===//

#include "driver/runner/Options.h"
#include "driver/server/ServeProcess.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

using namespace kvir;
using namespace kvir::serve;
using Clock = std::chrono::steady_clock;

namespace {

struct Trace {
  int64_t system = 256, fact = 16, manuals = 3, manual = 192, user = 24,
          tool = 48, answer = 16, turns = 8, editEvery = 3, sessions = 2;
  uint64_t seed = 1;
};

struct Options {
  std::string serve = KVIR_KV_SERVE_PATH;
  std::string model, synthetic;
  int64_t clients = 4, threads = 1, vocab = 0, warmupTurns = -1;
  /// What an answer depends on: `turn` (its turn's user message and tool
  /// result) or `all` (every earlier segment, the fact included).
  std::string answerDeps = "turn";
  Trace trace;
  std::string modes = "full,prefix,kvir";
  bool noAudit = false;
  std::string logDir = "/tmp";
};

/// One turn as the client saw it.
struct Turn {
  double ttftMs = 0, decodeTokensPerS = 0;
  int64_t contextTokens = 0, computed = 0;
  bool edited = false;
};

struct ModeResult {
  std::string mode;
  std::vector<Turn> turns;
  int64_t failures = 0, requests = 0;
  double seconds = 0;
  std::string firstFailure;
  std::map<std::string, double> metrics;
};

uint64_t splitmix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// `n` token ids in [3, vocab): no BOS or EOS in the middle of a context.
Json tokens(uint64_t &state, int64_t n, int64_t vocab) {
  Json ids = Json::array();
  for (int64_t i = 0; i < n; ++i)
    ids.push_back(3 + int64_t(splitmix(state) % uint64_t(vocab - 3)));
  return ids;
}

/// "name value" and "name{labels} value" lines of Prometheus text.
std::map<std::string, double> parseMetrics(const std::string &text) {
  std::map<std::string, double> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    if (line.empty() || line[0] == '#')
      continue;
    size_t space = line.rfind(' ');
    if (space != std::string::npos)
      out[line.substr(0, space)] = std::atof(line.c_str() + space + 1);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t i = size_t(std::ceil(p * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

class Session {
public:
  Session(ServeProcess &server, const Options &o, uint64_t seed,
          ModeResult &result, std::mutex &mutex)
      : server(server), o(o), state(seed), result(result), mutex(mutex) {}

  /// Runs the session's turns (`turns` of them; `record` says whether they
  /// count).
  void run(int64_t turns, bool record) {
    const Trace &t = o.trace;
    auto turnStart = Clock::now();
    Reply created = post("/v1/contexts",
                         {{"segments",
                           {{{"name", "system"},
                             {"kind", "system"},
                             {"tokens", tokens(state, t.system, o.vocab)}},
                            {{"name", "fact"},
                             {"kind", "fact"},
                             {"tokens", tokens(state, t.fact, o.vocab)}}}}},
                         201);
    if (created.status != 201)
      return;
    std::string ctx = "/v1/contexts/" + created.json["id"].get<std::string>();
    for (int64_t m = 0; m < t.manuals; ++m)
      post(ctx + "/compose", {{"block", "manual" + std::to_string(m)}}, 200);
    for (int64_t turn = 1; turn <= turns; ++turn) {
      Turn record_;
      if (turn > 1)
        turnStart = Clock::now();
      if (turn > 1 && t.editEvery > 0 && (turn - 1) % t.editEvery == 0) {
        post(ctx + "/edit",
             {{"segment", "fact"},
              {"tokens", tokens(state, t.fact, o.vocab)},
              {"strategy", "cot_slice"}},
             200);
        record_.edited = true;
      }
      std::string n = std::to_string(turn);
      post(ctx + "/segments",
           {{"name", "user" + n},
            {"kind", "user"},
            {"tokens", tokens(state, t.user, o.vocab)}},
           200);
      post(ctx + "/segments",
           {{"name", "tool" + n},
            {"kind", "tool"},
            {"tokens", tokens(state, t.tool, o.vocab)}},
           200);
      // The answer, streamed: the first token event ends the turn's TTFT.
      int status = 0;
      Clock::time_point first{}, last{};
      size_t count = 0;
      Json request = {{"max_tokens", t.answer},
                      {"temperature", 0},
                      {"stream", true},
                      {"name", "answer" + n}};
      if (o.answerDeps == "turn")
        request["deps"] = {"user" + n, "tool" + n};
      std::vector<std::string> events = server.stream(
          ctx + "/generate", request, status, [&](const std::string &event) {
            if (event.find("\"token\"") == std::string::npos)
              return;
            last = Clock::now();
            if (count++ == 0)
              first = last;
          });
      Json summary = events.size() >= 2 ? Json::parse(events[events.size() - 2],
                                                      nullptr, false)
                                        : Json();
      bool ok = status == 200 && summary.is_object() &&
                summary.value("done", false) && count > 0;
      note(ok, "generate: " + (events.size() >= 2 ? events[events.size() - 2]
                                                  : std::string("no events")));
      if (!ok || !record)
        continue;
      record_.ttftMs =
          std::chrono::duration<double>(first - turnStart).count() * 1e3;
      if (count > 1)
        record_.decodeTokensPerS =
            double(count - 1) /
            std::chrono::duration<double>(last - first).count();
      record_.contextTokens = summary["context_tokens"];
      record_.computed = summary["turn_computed_tokens"];
      std::lock_guard<std::mutex> lock(mutex);
      result.turns.push_back(record_);
    }
    post(ctx, Json(), 200, "DELETE");
  }

private:
  Reply post(const std::string &path, const Json &body, int expected,
             const std::string &method = "POST") {
    Reply r = method == "POST" ? server.post(path, body)
                               : server.request(method, path);
    note(r.status == expected,
         path + " " + std::to_string(r.status) + " " + r.body.substr(0, 300));
    return r;
  }
  void note(bool ok, const std::string &what) {
    std::lock_guard<std::mutex> lock(mutex);
    ++result.requests;
    if (!ok && !result.failures++)
      result.firstFailure = what;
  }

  ServeProcess &server;
  const Options &o;
  uint64_t state;
  ModeResult &result;
  std::mutex &mutex;
};

std::vector<std::string> serverArgs(const Options &o, const std::string &mode) {
  std::vector<std::string> args = {"--mode",
                                   mode,
                                   "--threads",
                                   std::to_string(o.threads),
                                   "--max-request-tokens",
                                   "65536",
                                   "--max-context",
                                   "65536",
                                   "--request-timeout",
                                   "3600"};
  if (!o.model.empty()) {
    args.push_back("--model");
    args.push_back(o.model);
  } else {
    args.push_back("--synthetic");
    args.push_back(o.synthetic);
    args.push_back("--no-tokenizer");
  }
  return args;
}

bool startServer(ServeProcess &server, const Options &o,
                 const std::string &mode, std::vector<std::string> extra,
                 const std::string &name = "") {
  std::vector<std::string> args = serverArgs(o, mode);
  args.insert(args.end(), extra.begin(), extra.end());
  std::string error;
  if (!server.start(o.serve, args,
                    o.logDir + "/kv-bench-serve-" +
                        (name.empty() ? mode : name) + ".log",
                    error)) {
    std::fprintf(stderr, "kv-bench-serve: %s\n", error.c_str());
    return false;
  }
  return true;
}

/// The manuals, as blocks of the server (prefilled once; not timed).
bool createBlocks(ServeProcess &server, const Options &o) {
  uint64_t state = o.trace.seed * 0x1000193;
  for (int64_t m = 0; m < o.trace.manuals; ++m) {
    Reply r = server.post("/v1/blocks",
                          {{"name", "manual" + std::to_string(m)},
                           {"tokens", tokens(state, o.trace.manual, o.vocab)}});
    if (r.status != 201) {
      std::fprintf(stderr, "kv-bench-serve: block: %s\n", r.body.c_str());
      return false;
    }
  }
  return true;
}

ModeResult runMode(const Options &o, const std::string &mode) {
  ModeResult result;
  result.mode = mode;
  ServeProcess server;
  if (!startServer(server, o, mode, {}) || !createBlocks(server, o)) {
    result.failures = 1;
    return result;
  }
  std::mutex mutex;
  // Warm-up (not counted): the plans of the trace's shapes are compiled,
  // the pool's pages touched.
  ModeResult warm;
  Session(server, o, ~o.trace.seed, warm, mutex).run(o.warmupTurns, false);
  auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < o.clients; ++c)
    clients.emplace_back([&, c] {
      for (int64_t s = 0; s < o.trace.sessions; ++s)
        Session(server, o, o.trace.seed + uint64_t(c * 1000 + s), result, mutex)
            .run(o.trace.turns, true);
    });
  for (std::thread &t : clients)
    t.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.metrics = parseMetrics(server.get("/metrics").body);
  result.failures += warm.failures;
  if (result.firstFailure.empty())
    result.firstFailure = warm.firstFailure;
  server.stop();
  return result;
}

/// The audits of one kind (edit or compose).
struct Audits {
  int64_t count = 0, top1 = 0, greedyAgree = 0, greedyTokens = 0;
  double klSum = 0, klMax = 0;
};

/// kvir mode with every edit and compose audited: one client, not timed.
/// The audits of each kind, from the server's audit log lines.
std::map<std::string, Audits> auditFidelity(const Options &o) {
  ServeProcess server;
  if (!startServer(server, o, "kvir",
                   {"--audit-fraction", "1", "--audit-greedy", "16"},
                   "audit") ||
      !createBlocks(server, o))
    return {};
  std::mutex mutex;
  ModeResult result;
  Session(server, o, o.trace.seed, result, mutex).run(o.trace.turns, false);
  // Every compose and edit is audited: wait for the queue to drain.
  const Trace &t = o.trace;
  double expected = double(t.manuals) +
                    (t.editEvery > 0 ? double((t.turns - 1) / t.editEvery) : 0);
  std::map<std::string, double> m;
  for (int i = 0; i < 3000; ++i) {
    m = parseMetrics(server.get("/metrics").body);
    if (m["kvserve_audits_total{result=\"ok\"}"] +
            m["kvserve_audits_total{result=\"error\"}"] >=
        expected)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  server.stop();
  std::map<std::string, Audits> out;
  std::istringstream log(server.log());
  for (std::string line; std::getline(log, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != "audit" ||
        j.contains("error"))
      continue;
    Audits &a = out[j["what"].get<std::string>()];
    double kl = j["kl"];
    ++a.count;
    a.klSum += kl;
    a.klMax = std::max(a.klMax, kl);
    a.top1 += j["top1_agree"].get<bool>();
    a.greedyAgree += j["greedy_agree"].get<int64_t>();
    a.greedyTokens += j["greedy_tokens"].get<int64_t>();
  }
  return out;
}

void report(const std::vector<ModeResult> &results) {
  std::printf("\n%-7s %6s %9s %9s %9s %11s %9s %11s %9s\n", "mode", "turns",
              "TTFT p50", "p90", "p99", "decode t/s", "hit rate", "computed/t",
              "failures");
  for (const ModeResult &r : results) {
    std::vector<double> ttft, decode;
    double context = 0, computed = 0;
    for (const Turn &t : r.turns) {
      ttft.push_back(t.ttftMs);
      if (t.decodeTokensPerS > 0)
        decode.push_back(t.decodeTokensPerS);
      context += double(t.contextTokens);
      computed += double(t.computed);
    }
    std::printf("%-7s %6zu %7.1fms %7.1fms %7.1fms %11.0f %9.3f %11.0f %9lld\n",
                r.mode.c_str(), r.turns.size(), percentile(ttft, 0.5),
                percentile(ttft, 0.9), percentile(ttft, 0.99),
                percentile(decode, 0.5),
                context > 0 ? (context - computed) / context : 0,
                r.turns.empty() ? 0 : computed / double(r.turns.size()),
                static_cast<long long>(r.failures));
  }
  for (const ModeResult &r : results) {
    std::vector<double> edited, plain;
    for (const Turn &t : r.turns)
      (t.edited ? edited : plain).push_back(t.ttftMs);
    std::printf("%-7s turns with an edit: TTFT p50 %.1f ms p90 %.1f ms (%zu); "
                "without: p50 %.1f ms p90 %.1f ms (%zu); %.1f s, %lld "
                "requests\n",
                r.mode.c_str(), percentile(edited, 0.5),
                percentile(edited, 0.9), edited.size(), percentile(plain, 0.5),
                percentile(plain, 0.9), plain.size(), r.seconds,
                static_cast<long long>(r.requests));
    if (r.failures)
      std::printf("%-7s first failure: %s\n", r.mode.c_str(),
                  r.firstFailure.c_str());
  }
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  run::OptionParser parser("kv-bench-serve");
  Trace &t = o.trace;
  parser.section("the server");
  parser.text("serve", "PATH", "the kv-serve binary (default: this build's)",
              o.serve);
  parser.text("model", "FILE", "model file (default: --synthetic)", o.model);
  parser.text("synthetic", "NAME",
              "synthetic model without --model (default synthetic-bench)",
              o.synthetic);
  parser.integer("threads", "N", "kv-serve's --threads (default 1)", o.threads);
  parser.text("modes", "LIST", "modes to run (default full,prefix,kvir)",
              o.modes);
  parser.text("log-dir", "DIR", "where the servers' logs go (default /tmp)",
              o.logDir);
  parser.section("the trace");
  parser.integer("clients", "N", "concurrent clients (default 4)", o.clients);
  parser.integer("sessions", "N", "sessions per client (default 2)",
                 t.sessions);
  parser.integer("turns", "N", "turns per session (default 8)", t.turns);
  parser.integer("system", "N", "system prompt tokens (default 256)", t.system);
  parser.integer("fact", "N", "tokens of the edited fact (default 16)", t.fact);
  parser.integer("manuals", "N", "tool manuals composed (default 3)",
                 t.manuals);
  parser.integer("manual", "N", "tokens per manual (default 192)", t.manual);
  parser.integer("user", "N", "tokens per user message (default 24)", t.user);
  parser.integer("tool", "N", "tokens per tool result (default 48)", t.tool);
  parser.integer("answer", "N", "tokens generated per turn (default 16)",
                 t.answer);
  parser.integer("edit-every", "N",
                 "edit the fact every N turns (default 3; 0: never)",
                 t.editEvery);
  parser.text("answer-deps", "turn|all",
              "what an answer depends on: its turn's user message and tool "
              "result (default), or every earlier segment (the fact "
              "included: an edit recomputes every answer)",
              o.answerDeps);
  parser.integer("warmup-turns", "N",
                 "turns of the warm-up session (default: --turns)",
                 o.warmupTurns);
  parser.unsignedInteger("seed", "N", "seed of the token ids (default 1)",
                         t.seed);
  parser.flag("no-audit", "skip the audited fidelity run", o.noAudit);
  std::vector<std::string> positionals;
  std::string error;
  if (!parser.parse(argc, argv, 1, positionals, error) ||
      !positionals.empty()) {
    std::fprintf(stderr, "kv-bench-serve: %s\n",
                 error.empty() ? "unexpected argument" : error.c_str());
    return 1;
  }
  if (parser.helpRequested()) {
    parser.printHelp(stdout, "kv-bench-serve: agent traces replayed against "
                             "kv-serve in three modes (docs/serve.md)\n\n"
                             "usage: kv-bench-serve [options]\n");
    return 0;
  }
  if (o.model.empty() && o.synthetic.empty())
    o.synthetic = "synthetic-bench";
  if (o.warmupTurns < 0)
    o.warmupTurns = t.turns;
  if (o.answerDeps != "turn" && o.answerDeps != "all") {
    std::fprintf(stderr, "kv-bench-serve: --answer-deps is turn or all\n");
    return 1;
  }
  {
    // The vocabulary, from the server itself.
    ServeProcess probe;
    if (!startServer(probe, o, "kvir", {}))
      return 1;
    Json models = probe.get("/v1/models").json;
    std::string config = models["data"][0]["kvir"]["config"];
    o.vocab = std::atoll(config.substr(config.find("vocab ") + 6).c_str());
    std::printf("model: %s (%s)\n",
                models["data"][0]["id"].get<std::string>().c_str(),
                config.c_str());
    probe.stop();
  }
  std::printf("trace: %lld clients x %lld sessions x %lld turns; system %lld "
              "+ fact %lld tokens, %lld manuals of %lld composed; per turn a "
              "user message of %lld and a tool result of %lld tokens, an "
              "answer of %lld tokens (greedy, streamed) depending on %s; the "
              "fact edited (cot_slice) every %lld turns; a warm-up session of "
              "%lld turns first (not counted); kv-serve --threads %lld\n",
              (long long)o.clients, (long long)t.sessions, (long long)t.turns,
              (long long)t.system, (long long)t.fact, (long long)t.manuals,
              (long long)t.manual, (long long)t.user, (long long)t.tool,
              (long long)t.answer,
              o.answerDeps == "turn" ? "its turn's user message and tool result"
                                     : "every earlier segment",
              (long long)t.editEvery, (long long)o.warmupTurns,
              (long long)o.threads);
  std::vector<ModeResult> results;
  for (size_t at = 0; at <= o.modes.size();) {
    size_t comma = std::min(o.modes.find(',', at), o.modes.size());
    std::string mode = o.modes.substr(at, comma - at);
    at = comma + 1;
    if (mode.empty())
      continue;
    std::fprintf(stderr, "kv-bench-serve: mode %s\n", mode.c_str());
    results.push_back(runMode(o, mode));
  }
  report(results);
  if (!o.noAudit) {
    std::printf("\nfidelity of kvir (one session, every edit and compose "
                "audited against a full prefill of the same context: the "
                "next token's distribution and 16 greedy tokens):\n");
    for (const auto &[what, a] : auditFidelity(o))
      std::printf("  %-8s %lld audits, KL mean %.3g max %.3g, top-1 "
                  "agreement %lld/%lld, greedy agreement %lld/%lld tokens "
                  "before the first divergence\n",
                  what.c_str(), static_cast<long long>(a.count),
                  a.count ? a.klSum / double(a.count) : 0, a.klMax,
                  static_cast<long long>(a.top1),
                  static_cast<long long>(a.count),
                  static_cast<long long>(a.greedyAgree),
                  static_cast<long long>(a.greedyTokens));
  }
  int64_t failures = 0;
  for (const ModeResult &r : results)
    failures += r.failures;
  return failures ? 1 : 0;
}
