//===- kv-run-jit.cpp - kv-run with the compiler loaded --------*- C++ -*-===//
//
// kv-run's runs that compile just in time: the program form
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//          [--text NAME=STRING]... [--compare-full-prefill] [--attribute]
// plans the program with kv-optimize, lowers it to one module
// (kv-lower-to-cpu, or kv-lower-to-nvvm with --backend cuda), JIT-compiles
// it, runs its entry over the backend and prints its results and, on
// request, the cost and fidelity of the plan against a full prefill of the
// same final context, and the attribution of an edited answer to the
// segments before it; and the token-list form on the CUDA backend.
//
// kv-run (kv-run.cpp), which never loads LLVM, hands these runs to this
// executable (exec, same arguments); run directly it does every run kv-run
// does, compiling the token-list form's forward with the JIT. The command
// line and the token-list form are kv-run's (CommandLine.h, TokenList.h);
// the options, the run and the report the runner's (driver/runner).
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Attribution.h"
#include "driver/compiler/CompileCache.h"
#include "driver/compiler/Compiler.h"
#include "driver/runner/Runner.h"
#include "passes/Transforms/RetargetModel.h"
#include "runtime/core/ForwardCall.h"
#include "tools/kv-run/CommandLine.h"
#include "tools/kv-run/TokenList.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace kvir;
using namespace kvir::run;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Where the generated code of --backend runs.
compiler::Target target(const RunnerOptions &options) {
  return options.backendGiven && options.backend == "cuda"
             ? compiler::Target::Gpu
             : compiler::Target::Cpu;
}

/// The token-list form's forward: the JIT's (or the compile cache's JIT
/// object).
ForwardSource jitForward(const KvRunOptions &options) {
  return [&options](Runner &r, Forward &out, std::string &error) {
    if (compiler::compileForward(r.config(), target(options.run.runner), &out,
                                 r.pageType(), /*cpuVectorBits=*/0,
                                 modelWeightFormats(r.model()),
                                 options.quantDot) == KVRT_OK)
      return true;
    error = std::string("cannot compile the forward of the model: ") +
            kvrt_last_error();
    return false;
  };
}

/// Runs the auxiliary entry of `spec` for the edit's operands and
/// attributes the answer's change to the segments (report.attribution).
/// False after a diagnostic at `loc`.
bool runAttribution(const compiler::AttributionEntry &spec,
                    compiler::CompiledProgram &program, Runner &runner,
                    const std::vector<exec::Value> &args, Report &report,
                    mlir::Location loc) {
  mlir::FailureOr<mlir::func::FuncOp> aux =
      compiler::lookupEntry(*program.planned, spec.entry);
  if (mlir::failed(aux))
    return false;
  mlir::FailureOr<exec::EntryManifest> manifest = compiler::describeEntry(*aux);
  if (mlir::failed(manifest))
    return false;
  manifest->sites = program.manifest.sites;
  exec::EntryFn fn = program.jit->entry(spec.entry);
  if (!fn) {
    mlir::emitError(loc) << "the compiled program has no "
                         << exec::entrySymbol(spec.entry);
    return false;
  }
  exec::RunOutcome outcome = exec::runEntry(
      fn, *manifest, runner.backend(), runner.model(), runner.pool(), args);
  if (outcome.failed) {
    mlir::Location at =
        outcome.site >= 0 && size_t(outcome.site) < program.sites.size()
            ? program.sites[outcome.site]
            : loc;
    mlir::emitError(at) << "--attribute: " << outcome.message;
    return false;
  }
  if (report.answerResult != int64_t(spec.answerResult)) {
    mlir::emitError(loc) << "--attribute: the answer is result "
                         << report.answerResult << ", the edit feeds result "
                         << spec.answerResult
                         << " (it has no rows at run time)";
    return false;
  }
  exec::AttributionRequest request;
  request.oldCache = outcome.results[0].cache;
  request.newTokens = outcome.results[1].tokens;
  request.edited = spec.edited;
  request.answer = spec.answer;
  request.segments = spec.segments;
  std::string error;
  if (!exec::attribute(runner.backend(), program.forward, runner.model(),
                       runner.pool(), request, report.attribution, error)) {
    mlir::emitError(loc) << "--attribute: " << error;
    return false;
  }
  report.attributed = true;
  return true;
}

/// Runs the entry of `reference` (compiler::exactReferenceOf the program:
/// every erratum edit planned exact) on the same arguments, for the
/// full-prefill comparison of an erratum plan against the edited context.
/// Its work is not reported.
llvm::Expected<exec::RunOutcome>
runExactReference(mlir::OwningOpRef<mlir::ModuleOp> reference,
                  llvm::StringRef entryName,
                  const compiler::LowerOptions &lowering, Runner &runner,
                  const std::vector<exec::Value> &args) {
  mlir::FailureOr<compiler::CompiledProgram> program =
      compiler::compileProgram(std::move(reference), entryName, lowering);
  if (mlir::failed(program))
    return makeError("cannot compile the exact reference of the program");
  exec::RunOutcome outcome =
      exec::runEntry(program->entry, program->manifest, runner.backend(),
                     runner.model(), runner.pool(), args);
  if (outcome.failed)
    return makeError("the exact reference of the program failed: " +
                     outcome.message);
  return outcome;
}

/// The program form.
llvm::Error runProgram(const KvRunOptions &options) {
  const RunOptions &o = options.run;
  const std::string &entryName = o.request.entry;
  if (options.tokensGiven || options.tokensFileGiven)
    return makeError("--tokens/--tokens-file belong to the first form; a "
                     "program takes --input NAME=FILE");
  if (options.printTokens)
    return makeError("--print-tokens belongs to the first form (kv-run "
                     "--model M --text STRING --print-tokens)");
  std::string error;
  exec::InputOptions inputs;
  if (!readInputFiles(o.request, inputs, error))
    return makeError(error);
  exec::TextOptions text;
  if (!readTextOptions(o.runner, o.request, /*onePrompt=*/false, text, error))
    return makeError(error);
  std::unique_ptr<Runner> made = makeRunner(o.runner, error);
  if (!made)
    return makeError(error);
  Runner &runner = *made;
  if (!runner.encodeInputs(text, inputs, error))
    return makeError(error);

  mlir::DialectRegistry registry;
  compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
  // A diagnostic names its location; the whole module after it is noise.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  // Failures below were reported as diagnostics.
  auto failed = [] { return makeError("the program did not run"); };
  // --attribute: an auxiliary entry returning the edit's operands, derived
  // before planning removes the edit.
  std::optional<compiler::AttributionEntry> attribution;
  auto addAttribution = [&](mlir::ModuleOp module) -> mlir::LogicalResult {
    mlir::FailureOr<compiler::AttributionEntry> entry =
        compiler::addAttributionEntry(module, entryName);
    if (mlir::failed(entry))
      return mlir::failure();
    attribution = std::move(*entry);
    return mlir::success();
  };
  // --retarget-model: the program (and so its exact reference) retyped to
  // the model file's shape before anything else reads its types.
  context.loadDialect<mlir::kv::KVDialect>();
  mlir::kv::ModelType fileModel =
      mlir::kv::ModelType::get(&context, runner.config());
  auto retarget = [&](mlir::ModuleOp module) -> mlir::LogicalResult {
    mlir::FailureOr<mlir::kv::RetargetSummary> summary =
        mlir::kv::retargetModel(module, fileModel);
    if (mlir::failed(summary) || mlir::failed(mlir::verify(module)))
      return mlir::failure();
    if (summary->from && summary->from != fileModel)
      llvm::WithColor::note(llvm::errs(), "kv-run")
          << "--retarget-model: the program's " << summary->from
          << " is now the model file's " << fileModel << " ("
          << "retyped " << summary->models << " !kv.model, " << summary->caches
          << " !kv.cache and " << summary->logits << " logits values)\n";
    return mlir::success();
  };
  // With the comparison, a program with erratum edits is also planned with
  // them exact: its answer's context is the edited context, the reference.
  mlir::OwningOpRef<mlir::ModuleOp> reference;
  mlir::OwningOpRef<mlir::ModuleOp> planned = compiler::loadProgram(
      context, sourceMgr, options.program,
      options.attribute
          ? llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)>(
                addAttribution)
          : nullptr,
      o.request.compareFull ? &reference : nullptr,
      options.retarget
          ? llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)>(retarget)
          : nullptr);
  if (!planned)
    return failed();
  mlir::FailureOr<mlir::func::FuncOp> entry =
      compiler::lookupEntry(*planned, entryName);
  if (mlir::failed(entry))
    return failed();
  mlir::FailureOr<kvrt_kv_dtype> programDtype =
      compiler::programKvDtype(*planned);
  if (mlir::failed(programDtype))
    return failed();
  if (!runner.preparePool(*programDtype, /*fromProgram=*/true, error))
    return makeError(error);
  mlir::FailureOr<exec::EntryManifest> manifest =
      compiler::describeEntry(*entry);
  if (mlir::failed(manifest))
    return failed();
  Report report;
  std::vector<exec::Value> args;
  if (!runner.bind(*manifest, inputs, args, report, error)) {
    mlir::InFlightDiagnostic diag = mlir::emitError(entry->getLoc()) << error;
    if (!options.retarget &&
        llvm::any_of(entry->getArgumentTypes(), [&](mlir::Type type) {
          auto model = llvm::dyn_cast<mlir::kv::ModelType>(type);
          return model && model != fileModel;
        }))
      diag.attachNote() << "the program was written for another model: "
                           "kv-run --retarget-model retypes it to the --model "
                           "file's (docs/kv-run.md)";
    return failed();
  }
  compiler::LowerOptions lowering;
  lowering.target = target(o.runner);
  lowering.format = "isa";
  lowering.exportModel = runner.config();
  lowering.exportDtype = runner.pageType();
  lowering.exportFormats = modelWeightFormats(runner.model());
  lowering.cpuQuantDot = options.quantDot;
  mlir::FailureOr<compiler::CompiledProgram> program =
      compiler::compileProgram(std::move(planned), entryName, lowering);
  if (mlir::failed(program))
    return failed();
  Entry compiled{program->entry, &program->manifest, program->forward,
                 options.program};
  exec::RunOutcome outcome = runner.run(compiled, args);
  warnBeyondTraining(runner, outcome.contextTokens);
  // Block store faults the policy let the run go on after, and a failure,
  // at the op.
  auto atSite = [&](int32_t site, bool isError, const std::string &message) {
    mlir::Location loc = site >= 0 && size_t(site) < program->sites.size()
                             ? program->sites[site]
                             : mlir::Location(entry->getLoc());
    if (isError)
      mlir::emitError(loc) << message;
    else
      mlir::emitWarning(loc) << message;
  };
  if (!Runner::reportProblems(outcome, atSite))
    return failed();

  std::optional<exec::RunOutcome> exactRun;
  if (reference && needsExactReference(outcome)) {
    llvm::Expected<exec::RunOutcome> run = runExactReference(
        std::move(reference), entryName, lowering, runner, args);
    if (!run)
      return run.takeError();
    exactRun = std::move(*run);
  }
  if (!runner.complete(report, compiled, outcome, o.request,
                       exactRun ? &*exactRun : nullptr, error))
    return makeError(error);
  if (attribution) {
    mlir::Location loc = attribution->editLoc
                             ? mlir::Location(attribution->editLoc)
                             : mlir::Location(entry->getLoc());
    if (!runAttribution(*attribution, *program, runner, args, report, loc))
      return failed();
  }
  printReport(report, o.request.json);
  return llvm::Error::success();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  KvRunOptions options;
  ParsedCommandLine parsed = parseKvRunCommandLine(argc, argv, options);
  if (!parsed.run)
    return parsed.status;
  std::string problem;
  // Without a cache the run compiles everything, as --no-cache does.
  if (!options.cache.disabled &&
      !compiler::installDefaultCompileCache(uint64_t(options.cache.maxMb) << 20,
                                            problem))
    printWarning("compile cache off: " + problem);
  auto runTokens = [&]() -> llvm::Error {
    std::string message;
    if (!runTokenList(options, jitForward(options), message))
      return makeError(message);
    return llvm::Error::success();
  };
  llvm::Error error =
      options.program.empty() ? runTokens() : runProgram(options);
  if (options.cache.stats) {
    std::shared_ptr<compiler::CompileCache> cache = compiler::compileCache();
    llvm::errs() << (cache ? compiler::describeCacheStats(*cache)
                           : std::string("compile cache: off"))
                 << "\n";
  }
  // The report went to stdout: a full disk or a closed pipe is a failure.
  if (!error && (std::fflush(stdout) != 0 || std::ferror(stdout)))
    error = makeError(llvm::Twine("cannot write the report to stdout: ") +
                      std::strerror(errno));
  if (error) {
    printError(llvm::toString(std::move(error)));
    return 1;
  }
  return 0;
}
