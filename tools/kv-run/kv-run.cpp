//===- kv-run.cpp - Run kv programs, report cost and fidelity ---*- C++ -*-===//
//
// Two forms:
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//          [--compare-full-prefill]
//     plans the program with kv-optimize, lowers it to one module
//     (kv-lower-to-cpu, or kv-lower-to-nvvm with --backend cuda), JIT-compiles
//     it, runs its entry over the backend and prints its results and, on
//     request, the cost and fidelity of the plan against a full prefill of the
//     same final context;
//   kv-run --model FILE (--tokens "1 2 3" | --tokens-file F)
//          [--dump-logits OUT]
//     prefills a token list from position 0.
// Without --model, a built-in synthetic model of stories260K's shape is used.
//
//===----------------------------------------------------------------------===//

#include "tools/compiler/Compiler.h"
#include "tools/kv-run/Report.h"

#include "runtime/core/ModelConfig.h"
#include "runtime/exec/Session.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
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
cl::opt<std::string> syntheticName(
    "synthetic",
    cl::desc("without --model, the seeded synthetic model to run: default "
             "(stories260K's shape), synthetic-test or synthetic-bench"),
    cl::value_desc("name"), cl::init("default"), cl::cat(kvRunCategory));
cl::opt<uint64_t> modelSeed("model-seed",
                            cl::desc("seed of the synthetic model (default: "
                                     "the preset's)"),
                            cl::value_desc("n"), cl::init(0),
                            cl::cat(kvRunCategory));
cl::opt<std::string> entryName("entry", cl::desc("function of PROGRAM to run"),
                               cl::value_desc("name"), cl::init("main"),
                               cl::cat(kvRunCategory));
cl::list<std::string>
    inputs("input",
           cl::desc("binds an argument (argN, or its kv.name) to a file: "
                    "whitespace-separated token ids for token tensors, "
                    "floats for query tensors"),
           cl::value_desc("NAME=FILE"), cl::cat(kvRunCategory));
cl::opt<bool> synthesizeInputs(
    "synthesize-inputs",
    cl::desc("make seeded random inputs for the arguments not given: static "
             "ones of their size, dynamic ones of their kv.sample_length or "
             "--sample-length"),
    cl::init(false), cl::cat(kvRunCategory));
cl::opt<int64_t> sampleLength("sample-length",
                              cl::desc("tokens (or query rows) of a "
                                       "synthesized dynamic argument without "
                                       "kv.sample_length"),
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
             "position (first form) or the first returned logits (program; "
             "the first returned tensor when there are none)"),
    cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<std::string> backendName(
    "backend",
    cl::desc("where the math runs: cpu (the program's generated CPU code, "
             "the default), cuda (its generated GPU code, PTX loaded by the "
             "driver; needs a GPU) or reference (the C++ oracle, for "
             "comparison)"),
    cl::value_desc("name"), cl::init("cpu"), cl::cat(kvRunCategory));
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

/// Rejects an unknown --backend before anything is loaded.
llvm::Error checkBackendName() {
  if (backendName == "reference" || backendName == "cpu" ||
      backendName == "cuda")
    return llvm::Error::success();
  return makeError("unknown backend '" + backendName +
                   "' (available: cpu, cuda, reference)");
}

/// Where the generated code of --backend runs.
compiler::Target target() {
  return backendName == "cuda" ? compiler::Target::Gpu : compiler::Target::Cpu;
}

/// The backend named by --backend.
llvm::Expected<std::unique_ptr<ComputeBackend>>
makeBackend(const kvrt_model *model) {
  std::string error;
  std::unique_ptr<ComputeBackend> backend =
      exec::createBackend(backendName, model, error);
  if (!backend)
    return makeError(error);
  return backend;
}

/// Reads the token list from --tokens or --tokens-file (exactly one).
llvm::Expected<std::vector<int32_t>> readTokens() {
  bool inline_ = tokensArg.getNumOccurrences() > 0;
  bool file = tokensFile.getNumOccurrences() > 0;
  if (inline_ == file)
    return makeError("give exactly one of --tokens and --tokens-file");
  std::string text = tokensArg, source = "--tokens", error;
  if (file) {
    source = "'" + tokensFile + "'";
    if (!exec::readFile(tokensFile, text, error))
      return makeError("cannot read token file " + source + ": " + error);
  }
  std::vector<int32_t> tokens;
  if (!exec::parseTokenList(text, source, tokens, error))
    return makeError(error);
  return tokens;
}

using ModelPtr = std::unique_ptr<kvrt_model, void (*)(kvrt_model *)>;
using PoolPtr = std::unique_ptr<kvrt_pool, void (*)(kvrt_pool *)>;

/// The model of --model, or the synthetic one; `description` says which.
llvm::Expected<ModelPtr> loadModel(std::string &description) {
  std::string error;
  kvrt_model *model =
      exec::loadModel(modelPath, syntheticName, modelSeed, description, error);
  if (!model)
    return makeError(error);
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

/// The forward of `config` for the first form (no program).
llvm::Expected<Forward> forwardFor(const ComputeBackend &backend,
                                   const kvrt_model_config &config) {
  Forward forward;
  if (!backend.runsGeneratedCode())
    return forward;
  if (compiler::compileForward(config, target(), &forward))
    return runtimeError("cannot compile the forward of the model");
  return forward;
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
  llvm::Expected<Forward> forward = forwardFor(**backend, config);
  if (!forward)
    return forward.takeError();

  size_t n = tokens->size(), vocab = config.vocab_size;
  std::vector<float> logits;
  kvrt_view *empty = nullptr, *filled = nullptr;
  auto start = std::chrono::steady_clock::now();
  kvrt_status status = kvrt_view_create(pool->get(), &empty);
  if (!status)
    status = (*backend)->prefill(*forward, model->get(), empty, tokens->data(),
                                 n, /*pos=*/0,
                                 /*label=*/nullptr,
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
  std::printf("model: %s (%s)\nbackend: %s\n", description.c_str(),
              describeConfig(config).c_str(), (*backend)->name());
  std::printf("tokens: %zu (positions 0..%zu)\n", n, n - 1);
  std::printf("argmax at last position: %zu (logit %.6f)\n", argmax,
              last[argmax]);
  std::printf("time: %.3f ms (%.1f tokens/s)\n", seconds * 1e3, n / seconds);
  if (dumpLogits.getNumOccurrences()) {
    std::string error;
    if (!writeFloats(logits, dumpLogits, error))
      return makeError(error);
    std::printf("logits: %zu x %zu float32 -> %s\n", n, vocab,
                dumpLogits.c_str());
  }
  return llvm::Error::success();
}

/// Reads every --input NAME=FILE.
llvm::Expected<exec::InputOptions> readInputs() {
  exec::InputOptions options;
  options.synthesize = synthesizeInputs;
  options.seed = inputSeed;
  options.dynamicLength = sampleLength;
  if (sampleLength < 0)
    return makeError("--sample-length must not be negative");
  for (const std::string &spec : inputs) {
    auto [name, file] = llvm::StringRef(spec).split('=');
    if (name.empty() || file.empty())
      return makeError("--input expects NAME=FILE, got '" + spec + "'");
    if (options.given.count(name.str()))
      return makeError("--input " + name + " is given twice");
    std::string text, error;
    if (!exec::readFile(file.str(), text, error))
      return makeError("cannot read the input file '" + file + "': " + error);
    options.given[name.str()] = {std::move(text), "'" + file.str() + "'"};
  }
  return options;
}

/// The program form.
llvm::Error runProgram() {
  if (tokensArg.getNumOccurrences() || tokensFile.getNumOccurrences())
    return makeError("--tokens/--tokens-file belong to the first form; a "
                     "program takes --input NAME=FILE");
  llvm::Expected<exec::InputOptions> options = readInputs();
  if (!options)
    return options.takeError();
  if (llvm::Error error = checkBackendName())
    return error;
  Report report;
  llvm::Expected<ModelPtr> model = loadModel(report.model);
  if (!model)
    return model.takeError();
  // The backend first: the cuda one checks the driver before any generated
  // code loads its kernels.
  llvm::Expected<std::unique_ptr<ComputeBackend>> backend =
      makeBackend(model->get());
  if (!backend)
    return backend.takeError();
  llvm::Expected<PoolPtr> pool = makePool(model->get());
  if (!pool)
    return pool.takeError();
  kvrt_model_config config;
  kvrt_model_get_config(model->get(), &config);

  mlir::DialectRegistry registry;
  compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  // Failures below were reported as diagnostics.
  auto failed = [] { return makeError("the program did not run"); };
  mlir::OwningOpRef<mlir::ModuleOp> planned =
      compiler::loadProgram(context, sourceMgr, programPath);
  if (!planned)
    return failed();
  mlir::FailureOr<mlir::func::FuncOp> entry =
      compiler::lookupEntry(*planned, entryName);
  if (mlir::failed(entry))
    return failed();
  mlir::FailureOr<exec::EntryManifest> manifest =
      compiler::describeEntry(*entry);
  if (mlir::failed(manifest))
    return failed();
  std::vector<exec::Value> args;
  std::string error;
  if (!exec::bindArguments(*manifest, config, *options, args, &report.inputs,
                           error)) {
    mlir::emitError(entry->getLoc()) << error;
    return failed();
  }
  compiler::LowerOptions lowering;
  lowering.target = target();
  lowering.format = "isa";
  lowering.exportModel = config;
  mlir::FailureOr<compiler::CompiledProgram> program =
      compiler::compileProgram(std::move(planned), entryName, lowering);
  if (mlir::failed(program))
    return failed();
  exec::RunOutcome outcome =
      exec::runEntry(program->entry, program->manifest, **backend, model->get(),
                     pool->get(), args);
  if (outcome.failed) {
    mlir::Location loc =
        outcome.site >= 0 && size_t(outcome.site) < program->sites.size()
            ? program->sites[outcome.site]
            : mlir::Location(entry->getLoc());
    mlir::emitError(loc) << outcome.message;
    return failed();
  }

  report.program = programPath;
  report.entry = entryName;
  report.backend = (*backend)->name();
  report.config = describeConfig(config);
  MeasureOptions measure;
  measure.greedy =
      greedyTokens >= 0 ? int64_t(greedyTokens) : (compareFull ? 16 : 0);
  measure.compareFull = compareFull;
  measure.dumpLogits = dumpLogits;
  if (dumpLogits.getNumOccurrences() && dumpLogits.empty())
    return makeError("--dump-logits: an empty output file name");
  if (!completeReport(report, outcome, program->manifest.hasPlanOps, **backend,
                      program->forward, model->get(), pool->get(), measure,
                      error))
    return makeError(error);
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
