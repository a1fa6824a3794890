//===- kv-run.cpp - Run kv programs, report cost and fidelity ---*- C++ -*-===//
//
// Two forms:
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//   [--compare-full-prefill]
//     plans the program with kv-optimize, executes its entry function over a
//     ComputeBackend, prints its results and, on request, the cost and
//     fidelity of the plan against a full prefill of the same final context;
//   kv-run --model FILE (--tokens "1 2 3" | --tokens-file F) [--dump-logits
//   OUT]
//     prefills a token list from position 0 (the first form).
// Without --model, a built-in synthetic model of stories260K's shape is used.
//
//===----------------------------------------------------------------------===//

#include "tools/kv-run/ProgramCompiler.h"
#include "tools/kv-run/ProgramRunner.h"

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/KVRuntime.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cl = llvm::cl;
using namespace kvir;
using namespace kvir::run;

namespace {

cl::OptionCategory kvRunCategory("kv-run options");

cl::opt<std::string> programPath(cl::Positional, cl::desc("[PROGRAM.mlir]"),
                                 cl::cat(kvRunCategory));
cl::opt<std::string>
    modelPath("model",
              cl::desc("llama2.c checkpoint to run (default: the built-in "
                       "synthetic model of stories260K's shape)"),
              cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<uint64_t> modelSeed("model-seed",
                            cl::desc("seed of the built-in synthetic model"),
                            cl::value_desc("n"), cl::init(1),
                            cl::cat(kvRunCategory));
cl::opt<std::string> entryName("entry", cl::desc("function of PROGRAM to run"),
                               cl::value_desc("name"), cl::init("main"),
                               cl::cat(kvRunCategory));
cl::list<std::string>
    inputs("input",
           cl::desc("binds an argument (argN, or its kv.name) to a file of "
                    "whitespace-separated token ids"),
           cl::value_desc("NAME=FILE"), cl::cat(kvRunCategory));
cl::opt<bool> synthesizeInputs(
    "synthesize-inputs",
    cl::desc("make seeded random tokens for the arguments not given: static "
             "ones of their size, dynamic ones of their kv.sample_length or "
             "--sample-length"),
    cl::init(false), cl::cat(kvRunCategory));
cl::opt<int64_t> sampleLength("sample-length",
                              cl::desc("tokens of a synthesized dynamic "
                                       "argument without kv.sample_length"),
                              cl::value_desc("n"), cl::init(16),
                              cl::cat(kvRunCategory));
cl::opt<uint64_t> inputSeed("seed", cl::desc("seed of synthesized inputs"),
                            cl::value_desc("n"), cl::init(1),
                            cl::cat(kvRunCategory));
cl::opt<bool> compareFull(
    "compare-full-prefill",
    cl::desc("also prefill the final context in full and report cost and "
             "fidelity side by side"),
    cl::init(false), cl::cat(kvRunCategory));
cl::opt<int64_t> greedyTokens(
    "greedy",
    cl::desc("continue greedily for N tokens from the answer (default 16 "
             "with --compare-full-prefill, else 0)"),
    cl::value_desc("N"), cl::init(-1), cl::cat(kvRunCategory));
cl::opt<bool> jsonOutput("json", cl::desc("print the report as JSON"),
                         cl::init(false), cl::cat(kvRunCategory));
cl::opt<std::string>
    tokensArg("tokens",
              cl::desc("first form: whitespace-separated token ids, e.g. "
                       "\"1 2 3\" (taken verbatim: no BOS is added)"),
              cl::value_desc("ids"), cl::cat(kvRunCategory));
cl::opt<std::string>
    tokensFile("tokens-file",
               cl::desc("first form: file of whitespace-separated token ids"),
               cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<std::string> dumpLogits(
    "dump-logits",
    cl::desc("write logits as little-endian float32 [rows][vocab]: every "
             "position (first form) or the first returned logits (program)"),
    cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<std::string>
    backendName("backend",
                cl::desc("backend that computes the forward: "
                         "reference (the C++ oracle), cpu "
                         "(generated, JIT) or cuda (generated, "
                         "ahead of time; needs a GPU)"),
                cl::value_desc("name"), cl::init("reference"),
                cl::cat(kvRunCategory));
cl::opt<std::string> execMode(
    "exec",
    cl::desc("how the program runs: jit (lowered by kv-lower-to-cpu and "
             "compiled with the ExecutionEngine, the default) or interpret "
             "(walked op by op, for debugging)"),
    cl::value_desc("jit|interpret"), cl::init("jit"), cl::cat(kvRunCategory));
cl::opt<int> pageTokens("page-tokens",
                        cl::desc("token slots per KV page (default 16)"),
                        cl::value_desc("n"), cl::init(16),
                        cl::cat(kvRunCategory));
cl::opt<int64_t> poolPages("pool-pages",
                           cl::desc("capacity of the KV pool in pages "
                                    "(reserved lazily; default 8192)"),
                           cl::value_desc("n"), cl::init(8192),
                           cl::cat(kvRunCategory));

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Turns the runtime's last error into an llvm::Error.
llvm::Error runtimeError(llvm::StringRef what) {
  return makeError(what + ": " + kvrt_last_error());
}

/// The backend named by --backend.
llvm::Expected<std::unique_ptr<ComputeBackend>>
makeBackend(const kvrt_model *model) {
  std::string error;
  std::unique_ptr<ComputeBackend> backend =
      createBackend(backendName, model, error);
  if (!backend)
    return makeError(error);
  return backend;
}

/// Parses whitespace-separated decimal token ids from `text`.
llvm::Expected<std::vector<int32_t>> parseTokens(llvm::StringRef text,
                                                 llvm::StringRef source) {
  constexpr llvm::StringLiteral spaces = " \t\n\v\f\r";
  llvm::SmallVector<llvm::StringRef> words;
  for (llvm::StringRef rest = text.ltrim(spaces); !rest.empty();
       rest = rest.ltrim(spaces)) {
    llvm::StringRef word = rest.take_front(rest.find_first_of(spaces));
    words.push_back(word);
    rest = rest.drop_front(word.size());
  }
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < words.size(); ++i) {
    int64_t value;
    if (words[i].getAsInteger(10, value) || value < 0 ||
        value > std::numeric_limits<int32_t>::max())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "malformed token list in " + source + ": item " + llvm::Twine(i + 1) +
              " '" + words[i] + "' is not a non-negative int32 token id");
    tokens.push_back(static_cast<int32_t>(value));
  }
  if (tokens.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no token ids in " + source);
  return tokens;
}

/// Reads a token file.
llvm::Expected<std::vector<int32_t>> readTokenFile(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read token file '" + path +
                                       "': " + buffer.getError().message());
  return parseTokens((*buffer)->getBuffer(), ("'" + path + "'").str());
}

/// Reads the token list from --tokens or --tokens-file (exactly one).
llvm::Expected<std::vector<int32_t>> readTokens() {
  bool inline_ = tokensArg.getNumOccurrences() > 0;
  bool file = tokensFile.getNumOccurrences() > 0;
  if (inline_ == file)
    return makeError("give exactly one of --tokens and --tokens-file");
  if (inline_)
    return parseTokens(tokensArg, "--tokens");
  return readTokenFile(tokensFile);
}

/// Writes logits as little-endian float32 (the host order, checked below).
llvm::Error writeLogits(const std::vector<float> &logits,
                        llvm::StringRef path) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "logits are written in host order");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError(ec, "cannot create '" + path +
                                           "': " + ec.message());
  os.write(reinterpret_cast<const char *>(logits.data()),
           logits.size() * sizeof(float));
  os.close();
  if (os.has_error())
    return llvm::createStringError(
        os.error(), "cannot write '" + path + "': " + os.error().message());
  return llvm::Error::success();
}

using ModelPtr = std::unique_ptr<kvrt_model, void (*)(kvrt_model *)>;
using PoolPtr = std::unique_ptr<kvrt_pool, void (*)(kvrt_pool *)>;

/// The model of --model, or the built-in synthetic one; `description` says
/// which.
llvm::Expected<ModelPtr> loadModel(std::string &description) {
  kvrt_model *model = nullptr;
  if (!modelPath.empty()) {
    if (kvrt_model_load(modelPath.c_str(), &model))
      return runtimeError("cannot load the model");
    description = modelPath;
  } else {
    kvrt_model_config config;
    kvrt_model_config_init(&config);
    if (kvrt_model_synthetic(&config, modelSeed, &model))
      return runtimeError("cannot build the built-in synthetic model");
    description = "built-in synthetic model (seed " +
                  std::to_string(uint64_t(modelSeed)) +
                  ", stories260K's shape, random weights: pass --model FILE "
                  "for a trained checkpoint)";
  }
  return ModelPtr(model, kvrt_model_release);
}

llvm::Expected<PoolPtr> makePool(const kvrt_model *model) {
  if (pageTokens <= 0)
    return makeError("--page-tokens must be positive, got " +
                     llvm::Twine(int(pageTokens)));
  if (poolPages <= 0)
    return makeError("--pool-pages must be positive, got " +
                     llvm::Twine(int64_t(poolPages)));
  kvrt_pool_config poolConfig;
  if (kvrt_pool_config_for_model(model, &poolConfig))
    return runtimeError("cannot size the kv pool");
  poolConfig.page_tokens = pageTokens;
  poolConfig.capacity_pages = poolPages;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&poolConfig, &pool))
    return runtimeError("cannot create the kv pool");
  return PoolPtr(pool, kvrt_pool_release);
}

std::string describeConfig(const kvrt_model_config &c) {
  return "dim " + std::to_string(c.dim) + ", hidden " +
         std::to_string(c.hidden_dim) + ", layers " +
         std::to_string(c.n_layers) + ", heads " + std::to_string(c.n_heads) +
         "/" + std::to_string(c.n_kv_heads) + ", vocab " +
         std::to_string(c.vocab_size);
}

/// Rejects an unknown --backend before anything is loaded.
llvm::Error checkBackendName() {
  if (backendName == "reference" || backendName == "cpu" ||
      backendName == "cuda")
    return llvm::Error::success();
  return makeError("unknown backend '" + backendName +
                   "' (available: reference, cpu, cuda)");
}

/// The first form: prefill a token list from position 0.
llvm::Error runTokens() {
  llvm::Expected<std::vector<int32_t>> tokens = readTokens();
  if (!tokens)
    return tokens.takeError();
  if (llvm::Error error = checkBackendName())
    return error;
  std::string description;
  llvm::Expected<ModelPtr> model = loadModel(description);
  if (!model)
    return model.takeError();
  llvm::Expected<std::unique_ptr<ComputeBackend>> backend =
      makeBackend(model->get());
  if (!backend)
    return backend.takeError();
  kvrt_model_config config;
  kvrt_model_get_config(model->get(), &config);
  for (size_t i = 0; i < tokens->size(); ++i)
    if ((*tokens)[i] >= config.vocab_size)
      return makeError("token " + llvm::Twine((*tokens)[i]) + " at index " +
                       llvm::Twine(i) + " is outside the vocabulary [0, " +
                       llvm::Twine(config.vocab_size) + ")");
  llvm::Expected<PoolPtr> pool = makePool(model->get());
  if (!pool)
    return pool.takeError();

  size_t n = tokens->size(), vocab = config.vocab_size;
  std::vector<float> logits;
  kvrt_view *empty = nullptr, *filled = nullptr;
  auto start = std::chrono::steady_clock::now();
  kvrt_status status = kvrt_view_create(pool->get(), &empty);
  if (!status)
    status = (*backend)->prefill(model->get(), empty, tokens->data(), n,
                                 /*pos=*/0, /*label=*/nullptr,
                                 /*lastOnly=*/false, &logits, &filled);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  kvrt_view_release(empty);
  kvrt_view_release(filled);
  if (status)
    return runtimeError(std::string((*backend)->name()) + " prefill failed");

  const float *last = logits.data() + (n - 1) * vocab;
  size_t argmax = std::max_element(last, last + vocab) - last;
  llvm::outs() << "model: " << description << " (" << describeConfig(config)
               << ")\n"
               << "backend: " << (*backend)->name() << "\n"
               << "tokens: " << n << " (positions 0.." << n - 1 << ")\n"
               << "argmax at last position: " << argmax << " (logit "
               << llvm::format("%.6f", last[argmax]) << ")\n"
               << "time: " << llvm::format("%.3f", seconds * 1e3) << " ms ("
               << llvm::format("%.1f", n / seconds) << " tokens/s)\n";
  if (!dumpLogits.empty()) {
    if (llvm::Error error = writeLogits(logits, dumpLogits))
      return error;
    llvm::outs() << "logits: " << n << " x " << vocab << " float32 -> "
                 << dumpLogits << "\n";
  }
  return llvm::Error::success();
}

/// Reads every --input NAME=FILE.
llvm::Expected<InputOptions> readInputs() {
  InputOptions options;
  options.synthesize = synthesizeInputs;
  options.seed = inputSeed;
  options.dynamicLength = sampleLength;
  if (sampleLength < 0)
    return makeError("--sample-length must not be negative");
  for (const std::string &spec : inputs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    if (name.empty() || file.empty())
      return makeError("--input expects NAME=FILE, got '" + spec + "'");
    if (options.given.count(name))
      return makeError("--input " + name + " is given twice");
    llvm::Expected<std::vector<int32_t>> tokens = readTokenFile(file);
    if (!tokens)
      return tokens.takeError();
    options.given[name] = std::move(*tokens);
  }
  return options;
}

/// Everything the report prints.
struct Report {
  std::string program, entry, model, backend, config, exec;
  std::vector<BoundInput> inputs;
  std::vector<RuntimeValue> results;
  WorkStats plan, setup;
  bool hasPlanOps = false;
  std::vector<std::pair<int64_t, int64_t>> repairs;
  int64_t greedy = 0;
  std::vector<int32_t> greedyPlan;
  // --compare-full-prefill
  bool compared = false;
  std::string compareNote;
  int64_t answerResult = -1;
  int64_t finalTokens = 0;
  bool contiguous = true;
  WorkStats full;
  Fidelity fidelity;
  std::vector<int32_t> greedyFull;
  int64_t greedyAgree = 0;
};

std::string kindName(const RuntimeValue &v) {
  switch (v.kind) {
  case RuntimeValue::Kind::Logits:
    return "logits";
  case RuntimeValue::Kind::Cache:
    return "cache";
  case RuntimeValue::Kind::Index:
    return "index";
  case RuntimeValue::Kind::Tokens:
    return "tokens";
  case RuntimeValue::Kind::Model:
    return "model";
  case RuntimeValue::Kind::None:
    break;
  }
  return "none";
}

double ratio(double a, double b) { return b != 0 ? a / b : 0; }

void printText(const Report &r) {
  llvm::raw_ostream &os = llvm::outs();
  os << "program: " << r.program << " (entry @" << r.entry
     << ", planned by kv-optimize)\n"
     << "model: " << r.model << " (" << r.config << ")\n"
     << "backend: " << r.backend << "\n"
     << "exec: "
     << (r.exec == "jit" ? "jit (compiled by kv-lower-to-cpu)" : "interpret")
     << "\n"
     << "inputs:";
  for (const BoundInput &in : r.inputs)
    if (in.tokens >= 0)
      os << " " << in.name << "=" << in.tokens
         << (in.synthesized ? "(synth)" : "");
  os << "\n";
  for (size_t i = 0; i < r.results.size(); ++i) {
    const RuntimeValue &v = r.results[i];
    os << "result " << i << ": " << kindName(v);
    if (v.kind == RuntimeValue::Kind::Logits) {
      const Logits &l = *v.logits;
      os << " " << l.rows << " x " << l.vocab;
      if (l.rows > 0) {
        const float *last = l.data.data() + (l.rows - 1) * l.vocab;
        std::vector<int32_t> top = topK(last, l.vocab, 5);
        os << ", last row argmax " << top[0] << " (logit "
           << llvm::format("%.4f", last[top[0]]) << "), top-5";
        for (int32_t t : top)
          os << " " << t << ":" << llvm::format("%.3f", last[t]);
      }
    } else if (v.kind == RuntimeValue::Kind::Cache) {
      os << " " << kvrt_view_num_tokens(v.cache.get()) << " tokens in "
         << kvrt_view_num_runs(v.cache.get()) << " runs";
    } else if (v.kind == RuntimeValue::Kind::Index) {
      os << " " << v.index;
    } else if (v.kind == RuntimeValue::Kind::Tokens) {
      os << " " << v.tokens->size();
    }
    os << "\n";
  }
  if (!r.greedyPlan.empty()) {
    os << "greedy continuation (" << r.greedyPlan.size() << "):";
    for (int32_t t : r.greedyPlan)
      os << " " << t;
    os << "\n";
  }
  os << "work: plan " << r.plan.prefillTokens << " prefill tokens, "
     << llvm::format("%.4g", double(r.plan.flops)) << " FLOPs, "
     << llvm::format("%.3f", r.plan.seconds * 1e3) << " ms; setup "
     << r.setup.prefillTokens << " prefill tokens, "
     << llvm::format("%.3f", r.setup.seconds * 1e3) << " ms"
     << (r.hasPlanOps ? "" : " (no edit/compose/logits: all is plan)") << "\n";
  for (auto [candidates, chosen] : r.repairs)
    os << "selective recompute: " << chosen << " of " << candidates
       << " reused tokens recomputed\n";
  if (!r.compared) {
    if (!r.compareNote.empty())
      os << "compare: " << r.compareNote << "\n";
    return;
  }
  const Fidelity &f = r.fidelity;
  os << "\n== plan vs full prefill of the final context (" << r.finalTokens
     << " tokens; answer = result " << r.answerResult << ", " << f.rows
     << " rows)\n";
  if (!r.contiguous)
    os << "note: the plan's positions are not 0..n-1; full prefill places the "
          "same tokens at 0..n-1\n";
  os << llvm::format("  %-22s %14s %14s %10s\n", "", "plan", "full prefill",
                     "plan/full");
  os << llvm::format("  %-22s %14lld %14lld %10.4f\n", "prefill tokens",
                     (long long)r.plan.prefillTokens,
                     (long long)r.full.prefillTokens,
                     ratio(r.plan.prefillTokens, r.full.prefillTokens));
  os << llvm::format("  %-22s %14.4g %14.4g %10.4f\n", "model FLOPs",
                     double(r.plan.flops), double(r.full.flops),
                     ratio(r.plan.flops, r.full.flops));
  os << llvm::format("  %-22s %14.3f %14.3f %10.4f\n", "wall time (ms)",
                     r.plan.seconds * 1e3, r.full.seconds * 1e3,
                     ratio(r.plan.seconds, r.full.seconds));
  os << llvm::format("  %-22s %14.4g %14.4g %10.4f\n", "K/V bytes written",
                     double(r.plan.kvBytesWritten),
                     double(r.full.kvBytesWritten),
                     ratio(r.plan.kvBytesWritten, r.full.kvBytesWritten));
  os << "fidelity at the answer positions:\n"
     << llvm::format("  logit cosine           min %.6f  mean %.6f\n",
                     f.cosineMin, f.cosineMean)
     << llvm::format("  KL(full || plan)       mean %.3e  max %.3e\n", f.klMean,
                     f.klMax)
     << "  top-1 agreement        " << f.top1Agree << "/" << f.rows << "\n"
     << llvm::format("  max |logit diff|       %.3e\n", f.maxAbsDiff)
     << "  greedy agreement       " << r.greedyAgree << "/" << r.greedy
     << " tokens before the first divergence\n";
}

void printJson(const Report &r) {
  llvm::json::OStream j(llvm::outs(), 2);
  auto work = [&](const WorkStats &w) {
    j.object([&] {
      j.attribute("prefill_calls", w.prefillCalls);
      j.attribute("prefill_tokens", w.prefillTokens);
      j.attribute("logits_rows", w.logitsRows);
      j.attribute("scan_tokens", w.scanTokens);
      j.attribute("flops", w.flops);
      j.attribute("kv_bytes_written", w.kvBytesWritten);
      j.attribute("wall_ms", w.seconds * 1e3);
    });
  };
  j.object([&] {
    j.attribute("program", r.program);
    j.attribute("entry", r.entry);
    j.attribute("model", r.model);
    j.attribute("model_config", r.config);
    j.attribute("backend", r.backend);
    j.attribute("exec", r.exec);
    j.attributeArray("inputs", [&] {
      for (const BoundInput &in : r.inputs)
        if (in.tokens >= 0)
          j.object([&] {
            j.attribute("name", in.name);
            j.attribute("tokens", in.tokens);
            j.attribute("synthesized", in.synthesized);
          });
    });
    j.attributeArray("results", [&] {
      for (const RuntimeValue &v : r.results)
        j.object([&] {
          j.attribute("kind", kindName(v));
          if (v.kind == RuntimeValue::Kind::Logits) {
            const Logits &l = *v.logits;
            j.attribute("rows", l.rows);
            j.attribute("vocab", l.vocab);
            if (l.rows > 0) {
              const float *last = l.data.data() + (l.rows - 1) * l.vocab;
              std::vector<int32_t> top = topK(last, l.vocab, 5);
              j.attribute("argmax_last", top[0]);
              j.attributeArray("top5", [&] {
                for (int32_t t : top)
                  j.object([&] {
                    j.attribute("token", t);
                    j.attribute("logit", double(last[t]));
                  });
              });
            }
          } else if (v.kind == RuntimeValue::Kind::Cache) {
            j.attribute("tokens", kvrt_view_num_tokens(v.cache.get()));
            j.attribute("runs", kvrt_view_num_runs(v.cache.get()));
          } else if (v.kind == RuntimeValue::Kind::Index) {
            j.attribute("value", v.index);
          }
        });
    });
    j.attributeArray("greedy_plan", [&] {
      for (int32_t t : r.greedyPlan)
        j.value(t);
    });
    j.attributeBegin("plan");
    work(r.plan);
    j.attributeEnd();
    j.attributeBegin("setup");
    work(r.setup);
    j.attributeEnd();
    j.attributeArray("selective_recompute", [&] {
      for (const auto &repair : r.repairs)
        j.object([&] {
          j.attribute("candidates", repair.first);
          j.attribute("chosen", repair.second);
        });
    });
    if (!r.compared) {
      if (!r.compareNote.empty())
        j.attribute("compare_note", r.compareNote);
      return;
    }
    j.attributeObject("compare", [&] {
      j.attribute("answer_result", r.answerResult);
      j.attribute("final_tokens", r.finalTokens);
      j.attribute("contiguous_positions", r.contiguous);
      j.attributeBegin("full");
      work(r.full);
      j.attributeEnd();
      j.attribute("tokens_ratio",
                  ratio(r.plan.prefillTokens, r.full.prefillTokens));
      j.attribute("flops_ratio", ratio(r.plan.flops, r.full.flops));
      j.attribute("time_ratio", ratio(r.plan.seconds, r.full.seconds));
      const Fidelity &f = r.fidelity;
      j.attributeObject("fidelity", [&] {
        j.attribute("rows", f.rows);
        j.attribute("cosine_min", f.cosineMin);
        j.attribute("cosine_mean", f.cosineMean);
        j.attribute("kl_mean", f.klMean);
        j.attribute("kl_max", f.klMax);
        j.attribute("top1_agree", f.top1Agree);
        j.attribute("max_abs_diff", f.maxAbsDiff);
        j.attribute("greedy_tokens", r.greedy);
        j.attribute("greedy_agree", r.greedyAgree);
        j.attributeArray("greedy_full", [&] {
          for (int32_t t : r.greedyFull)
            j.value(t);
        });
      });
    });
  });
  llvm::outs() << "\n";
}

/// The program form.
llvm::Error runProgram() {
  if (tokensArg.getNumOccurrences() || tokensFile.getNumOccurrences())
    return makeError("--tokens/--tokens-file belong to the first form; a "
                     "program takes --input NAME=FILE");
  llvm::Expected<InputOptions> options = readInputs();
  if (!options)
    return options.takeError();
  if (llvm::Error error = checkBackendName())
    return error;
  if (execMode != "jit" && execMode != "interpret")
    return makeError("unknown --exec '" + execMode +
                     "' (available: jit, interpret)");
  Report report;
  llvm::Expected<ModelPtr> model = loadModel(report.model);
  if (!model)
    return model.takeError();
  llvm::Expected<std::unique_ptr<ComputeBackend>> backend =
      makeBackend(model->get());
  if (!backend)
    return backend.takeError();
  llvm::Expected<PoolPtr> pool = makePool(model->get());
  if (!pool)
    return pool.takeError();

  mlir::DialectRegistry registry;
  ProgramRunner::registerDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  ProgramRunner runner(context, **backend, model->get(), pool->get());
  // Failures below were reported as diagnostics.
  auto failed = [] { return makeError("the program did not run"); };
  if (mlir::failed(runner.loadFile(programPath)))
    return failed();
  mlir::FailureOr<mlir::func::FuncOp> entry = runner.lookupEntry(entryName);
  if (mlir::failed(entry))
    return failed();
  mlir::FailureOr<std::vector<RuntimeValue>> args =
      runner.bindArguments(*entry, *options, &report.inputs);
  if (mlir::failed(args))
    return failed();
  bool jit = execMode == "jit";
  ProgramCompiler compiler(runner);
  if (jit && mlir::failed(compiler.compile(*entry)))
    return failed();
  mlir::FailureOr<std::vector<RuntimeValue>> results =
      jit ? compiler.run(*args) : runner.run(*entry, *args);
  if (mlir::failed(results))
    return failed();

  report.program = programPath;
  report.entry = entryName;
  report.backend = (*backend)->name();
  report.config = describeConfig(runner.config());
  report.results = *results;
  report.exec = execMode;
  report.plan = jit ? compiler.planStats() : runner.planStats();
  report.setup = jit ? compiler.setupStats() : runner.setupStats();
  report.hasPlanOps = runner.hasPlanOps();
  report.repairs = jit ? compiler.repairs() : runner.repairs();
  report.greedy =
      greedyTokens >= 0 ? int64_t(greedyTokens) : (compareFull ? 16 : 0);

  // The answer: the first returned logits with rows.
  const Logits *answer = nullptr;
  for (size_t i = 0; i < report.results.size() && !answer; ++i)
    if (report.results[i].kind == RuntimeValue::Kind::Logits &&
        report.results[i].logits->rows > 0) {
      answer = report.results[i].logits.get();
      report.answerResult = i;
    }
  std::string error;
  if (!dumpLogits.empty()) {
    if (!answer)
      return makeError("--dump-logits: the entry returns no logits");
    if (llvm::Error e = writeLogits(answer->data, dumpLogits))
      return e;
  }
  if (answer && report.greedy > 0 &&
      mlir::failed(greedyContinue(**backend, model->get(), *answer,
                                  answer->result, report.greedy,
                                  report.greedyPlan, error)))
    return makeError(error);

  if (compareFull) {
    if (!answer) {
      report.compareNote = "the entry returns no logits with rows: nothing "
                           "to compare";
    } else {
      std::vector<int32_t> final = viewTokens(answer->context.get());
      final.insert(final.end(), answer->tokens.begin(), answer->tokens.end());
      report.finalTokens = final.size();
      report.contiguous =
          hasContiguousPositions(answer->context.get()) &&
          answer->position == kvrt_view_num_tokens(answer->context.get());
      Logits full;
      if (mlir::failed(fullPrefill(**backend, model->get(), pool->get(), final,
                                   answer->rows, full, report.full, error)))
        return makeError(error);
      report.fidelity = compareLogits(answer->data.data(), full.data.data(),
                                      answer->rows, answer->vocab);
      if (report.greedy > 0) {
        if (mlir::failed(greedyContinue(**backend, model->get(), full,
                                        full.result, report.greedy,
                                        report.greedyFull, error)))
          return makeError(error);
        while (report.greedyAgree < report.greedy &&
               report.greedyPlan[report.greedyAgree] ==
                   report.greedyFull[report.greedyAgree])
          ++report.greedyAgree;
      }
      report.compared = true;
    }
  }
  if (jsonOutput)
    printJson(report);
  else
    printText(report);
  return llvm::Error::success();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(kvRunCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kv-run: run kv programs (or a token list) on a model; report logits, "
      "cost and fidelity\n\n"
      "  kv-run examples/agent-edit.mlir --synthesize-inputs "
      "--compare-full-prefill\n"
      "  kv-run PROGRAM.mlir --model M.bin --input city=city.txt ...\n"
      "  kv-run --model M.bin --tokens \"1 2 3\" --dump-logits out.f32\n");
  llvm::Error error = programPath.empty() ? runTokens() : runProgram();
  if (error) {
    llvm::WithColor::error(llvm::errs(), "kv-run")
        << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  return 0;
}
