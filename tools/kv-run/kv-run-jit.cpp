//===- kv-run.cpp - Run kv programs, report cost and fidelity ---*- C++ -*-===//
//
// Two forms:
//   kv-run PROGRAM.mlir [--model FILE] [--input NAME=FILE]...
//          [--text NAME=STRING]... [--compare-full-prefill] [--attribute]
//     plans the program with kv-optimize, lowers it to one module
//     (kv-lower-to-cpu, or kv-lower-to-nvvm with --backend cuda), JIT-compiles
//     it, runs its entry over the backend and prints its results and, on
//     request, the cost and fidelity of the plan against a full prefill of the
//     same final context, and the attribution of an edited answer to the
//     segments before it;
//   kv-run --model FILE (--tokens "1 2 3" | --tokens-file F | --text STRING)
//          [--greedy N] [--json] [--dump-logits OUT]
//     prefills a token list from position 0, then generates N tokens
//     greedily, timing the prefill and the decode steps.
// --model takes a llama2.c checkpoint or a GGUF file. Without --model, a
// built-in synthetic model of stories260K's shape is used. Text goes through
// the tokenizer inside a GGUF model, the one beside the model
// (tok<vocab>.bin) or --tokenizer, and continuations are decoded.
//
// The options, the run and the report are the runner's (driver/runner),
// shared with kv-aot-run; what is here needs LLVM: compiling the program
// just in time, its exact reference and --attribute.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Attribution.h"
#include "driver/compiler/CompileCache.h"
#include "driver/compiler/Compiler.h"
#include "driver/runner/Runner.h"
#include "driver/version/Version.h"
#include "passes/Transforms/RetargetModel.h"
#include "runtime/core/ForwardCall.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
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

const char *kUsage =
    "kv-run: run kv programs (or a token list) on a model; report logits, "
    "cost and\nfidelity (docs/kv-run.md)\n"
    "\n"
    "usage: kv-run PROGRAM.mlir [options]\n"
    "       kv-run [options] (--tokens IDS | --tokens-file FILE | --text "
    "STRING\n"
    "                        | --text-file FILE)\n"
    "\n"
    "  kv-run examples/agent-edit.mlir --synthesize-inputs "
    "--compare-full-prefill\n"
    "  kv-run PROGRAM.mlir --model M.bin --input city=city.txt ...\n"
    "  kv-run examples/story-edit.mlir --model M.bin\n"
    "      --text hero=\"girl named Lily.\" ... --attribute\n"
    "  kv-run --model M.bin --tokens \"1 2 3\" --dump-logits out.f32\n"
    "  kv-run --model M.bin --text \"Once upon a time\" --bos prompt\n"
    "  kv-run --model M.bin --tokens 1 --greedy 64 --json\n"
    "\n"
    "With PROGRAM, kv-run plans it with kv-optimize, JIT-compiles it and runs "
    "its\nentry. Without, it prefills a token list from position 0: --text "
    "and --text-file\ntake the prompt itself (--bos prompt puts BOS in "
    "front), --dump-logits writes\nthe logits of every position, --greedy N "
    "generates N tokens from the prompt\n(prefill and decode timed apart).\n";

/// kv-run's command line: the runners' options and its own.
struct Options {
  RunOptions run;
  CacheOptions cache;
  std::string program;
  std::string tokens, tokensFile;
  bool tokensGiven = false, tokensFileGiven = false;
  bool attribute = false;
  bool printTokens = false;
  bool retarget = false;
  /// `--quant-dot`: kv-lower-to-cpu's quant-dot.
  std::string quantDot = "auto";
};

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Turns the runtime's last error into an llvm::Error.
llvm::Error runtimeError(llvm::StringRef what) {
  return makeError(what + ": " + kvrt_last_error());
}

/// Warns when the run went beyond the context the model was trained on.
void warnBeyondTraining(const Runner &runner, int64_t tokens) {
  std::string warning = runner.contextWarning(tokens);
  if (!warning.empty())
    llvm::WithColor::warning(llvm::errs(), "kv-run") << warning << "\n";
}

/// The runner the options ask for; without --backend, the cpu one.
llvm::Expected<std::unique_ptr<Runner>> makeRunner(const RunnerOptions &given) {
  RunnerOptions options = given;
  if (!options.backendGiven)
    options.backend = "cpu";
  std::string error;
  std::unique_ptr<Runner> runner = Runner::create(options, error);
  if (!runner)
    return makeError(error);
  return runner;
}

/// Where the generated code of --backend runs.
compiler::Target target(const RunnerOptions &options) {
  return options.backendGiven && options.backend == "cuda"
             ? compiler::Target::Gpu
             : compiler::Target::Cpu;
}

/// Reads the token list from --tokens, --tokens-file or the text of --text
/// or --text-file (exactly one), encoding text with `tokenizer`.
llvm::Expected<std::vector<int32_t>>
readTokens(const Options &options, const exec::TextOptions &prompt,
           const kvrt_tokenizer *tokenizer) {
  if (options.tokensGiven + options.tokensFileGiven + prompt.texts.size() != 1)
    return makeError("give exactly one of --tokens and --tokens-file, or one "
                     "--text or --text-file");
  std::string error;
  if (!prompt.texts.empty()) {
    exec::InputOptions encoded;
    if (!exec::encodeTextInputs(prompt, tokenizer, encoded, error))
      return makeError(error);
    std::vector<int32_t> tokens = encoded.givenTokens["prompt"].tokens;
    if (tokens.empty())
      return makeError("the text encodes to no tokens: the first form needs "
                       "at least one");
    return tokens;
  }
  std::string text = options.tokens, source = "--tokens";
  if (options.tokensFileGiven) {
    source = "'" + options.tokensFile + "'";
    if (!exec::readFile(options.tokensFile, text, error, "token file"))
      return makeError(error);
  }
  std::vector<int32_t> tokens;
  if (!exec::parseTokenList(text, source, tokens, error))
    return makeError(error);
  return tokens;
}

/// `bytes` as a quoted C-like literal: printable ASCII and whole UTF-8
/// characters as they are, quotes and backslashes escaped, other bytes
/// (controls, a character's bytes split across tokens) as \n, \t or \xHH.
std::string quoted(llvm::StringRef bytes) {
  std::string out = "'";
  for (size_t i = 0; i < bytes.size();) {
    unsigned char c = bytes[i];
    // A whole UTF-8 sequence: its lead byte's length, continuation bytes.
    size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool whole = n > 0 && c < 0xF5 && i + n <= bytes.size();
    for (size_t k = 1; whole && k < n; ++k)
      whole = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    if (whole) {
      out += bytes.substr(i, n).str();
      i += n;
      continue;
    }
    if (c == '\'' || c == '\\')
      out += std::string("\\") + char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c >= 0x20 && c < 0x7F)
      out += char(c);
    else
      out += llvm::formatv("\\x{0:X-2}", unsigned(c)).str();
    ++i;
  }
  return out + "'";
}

/// --print-tokens: each token's id, its piece as the vocabulary spells it,
/// and the text it decodes to alone (special tokens included).
llvm::Error printTokens(const kvrt_tokenizer *tokenizer,
                        const std::vector<int32_t> &tokens) {
  std::printf("tokens: %zu\n", tokens.size());
  for (int32_t id : tokens) {
    const char *piece = nullptr, *text = nullptr;
    size_t pieceLength = 0, textLength = 0;
    if (kvrt_tokenizer_get_piece(tokenizer, id, &piece, &pieceLength,
                                 nullptr) ||
        kvrt_tokenizer_decode_token_ex(tokenizer, -1, id, KVRT_DECODE_SPECIAL,
                                       &text, &textLength))
      return runtimeError("cannot print token " + std::to_string(id));
    // Padded to 24 characters (UTF-8 lead bytes), not bytes.
    std::string shown = quoted(llvm::StringRef(piece, pieceLength));
    size_t width = 0;
    for (char c : shown)
      width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    shown.append(width < 24 ? 24 - width : 0, ' ');
    std::printf("%8d  %s %s\n", id, shown.c_str(),
                quoted(llvm::StringRef(text, textLength)).c_str());
  }
  return llvm::Error::success();
}

/// The forward of `model` (its config, its weights' formats) for the first
/// form (no program).
llvm::Expected<Forward> forwardFor(const ComputeBackend &backend,
                                   const kvrt_model *model,
                                   const kvrt_model_config &config,
                                   compiler::Target target, kvrt_kv_dtype dtype,
                                   const std::string &quantDot) {
  Forward forward;
  if (!backend.runsGeneratedCode())
    return forward;
  if (compiler::compileForward(config, target, &forward, dtype,
                               /*cpuVectorBits=*/0, modelWeightFormats(model),
                               quantDot))
    return runtimeError("cannot compile the forward of the model");
  return forward;
}

/// The first form: prefill a token list from position 0.
llvm::Error runTokens(const Options &options) {
  const RunOptions &o = options.run;
  if (!options.tokensGiven && !options.tokensFileGiven &&
      o.request.texts.empty())
    return makeError(
        "nothing to run: give a program (kv-run PROGRAM.mlir, e.g. kv-run "
        "examples/agent-edit.mlir --synthesize-inputs) or a token list "
        "(--tokens, --tokens-file, --text or --text-file); kv-run --help "
        "lists the options");
  if (options.attribute)
    return makeError("--attribute belongs to the program form (kv-run "
                     "PROGRAM.mlir --attribute)");
  if (options.retarget)
    return makeError("--retarget-model belongs to the program form: a token "
                     "list runs on any model as it is");
  if (options.printTokens && o.request.texts.empty())
    return makeError("--print-tokens shows what a text became: give --text "
                     "or --text-file");
  if (o.runner.storeGiven)
    return makeError("--kv-store belongs to the program form: blocks are "
                     "loaded and stored by kv.load_block and kv.store_block");
  std::string error;
  exec::TextOptions text;
  if (!readTextOptions(o.runner, o.request, /*onePrompt=*/true, text, error))
    return makeError(error);
  if (text.texts.empty() && !text.bos.empty())
    return makeError("--bos " + *text.bos.begin() +
                     " names no text: the first form takes --bos prompt with "
                     "--text or --text-file (token ids are taken verbatim)");
  // Token ids are checked before anything loads; text needs the tokenizer.
  llvm::Expected<std::vector<int32_t>> tokens =
      text.texts.empty()
          ? readTokens(options, text, nullptr)
          : llvm::Expected<std::vector<int32_t>>(std::vector<int32_t>());
  if (!tokens)
    return tokens.takeError();
  llvm::Expected<std::unique_ptr<Runner>> runner = makeRunner(o.runner);
  if (!runner)
    return runner.takeError();
  Runner &r = **runner;
  if (!text.texts.empty()) {
    llvm::Expected<std::vector<int32_t>> encoded =
        readTokens(options, text, r.tokenizer());
    if (!encoded)
      return encoded.takeError();
    *tokens = std::move(*encoded);
    if (options.printTokens)
      return printTokens(r.tokenizer(), *tokens);
  }
  if (!r.checkTokenList(*tokens, o.request.greedyTokens(), error))
    return makeError(error);
  warnBeyondTraining(r, int64_t(tokens->size()) +
                            std::max<int64_t>(o.request.greedyTokens() - 1, 0));
  if (!r.preparePool(KVRT_KV_F32, /*fromProgram=*/false, error))
    return makeError(error);
  llvm::Expected<Forward> forward =
      forwardFor(r.backend(), r.model(), r.config(), target(o.runner),
                 r.pageType(), options.quantDot);
  if (!forward)
    return forward.takeError();
  TokenListRun run;
  run.tokens = std::move(*tokens);
  run.allRows = o.request.dumpLogitsGiven;
  run.greedy = o.request.greedyTokens();
  if (!text.texts.empty()) {
    run.fromText = true;
    run.text = text.texts.front().text;
    run.bos = text.bos.count("prompt") > 0;
  }
  if (!r.prefillTokenList(*forward, run, error) ||
      !r.printTokenList(run, o.request.dumpLogits, o.request.json, error))
    return makeError(error);
  if (std::string note = r.hugePageNote(); !note.empty())
    llvm::WithColor::note(llvm::errs(), "kv-run") << note << "\n";
  return llvm::Error::success();
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
llvm::Error runProgram(const Options &options) {
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
  llvm::Expected<std::unique_ptr<Runner>> made = makeRunner(o.runner);
  if (!made)
    return made.takeError();
  Runner &runner = **made;
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

/// Declares kv-run's options: the runners' and its own.
void declareOptions(OptionParser &parser, Options &options) {
  addRunOptions(parser, options.run);
  addCacheOptions(parser, options.cache);
  parser.section("kv-run's own");
  parser.text("tokens", "IDS",
              "without a program: whitespace-separated token ids, e.g. "
              "\"1 2 3\" (taken verbatim: no BOS is added)",
              options.tokens, &options.tokensGiven);
  parser.text("tokens-file", "FILE",
              "without a program: a file of whitespace-separated token ids",
              options.tokensFile, &options.tokensFileGiven);
  parser.flag("attribute",
              "attribute the change of the answer made by a kv.edit to the "
              "segments before it, by patching each segment's K/V with its "
              "value in the edited context (docs/kv-run.md)",
              options.attribute);
  parser.flag("retarget-model",
              "run a program written for another model's shape: retype its "
              "!kv.model, its !kv.cache shapes and its logits' vocabulary "
              "to the model's (the kv-retarget-model pass; a note says what "
              "changed, a program it cannot retype is an error at the op); "
              "without it a program must name the model's exact type",
              options.retarget);
  parser.flag("print-tokens",
              "without a program: print the ids and pieces of the text of "
              "--text or --text-file (each piece as the vocabulary spells it, "
              "then the text it decodes to) instead of running it",
              options.printTokens);
  parser.text("quant-dot", "auto|f32|int8|amx|avx2",
              "how the generated CPU code multiplies quantised weights: f32 "
              "widens them exactly (the oracle's weights), int8 takes integer "
              "dot products on Q8_0, Q4_0, Q4_K and Q6_K blocks (Q5_K's "
              "in decode steps) "
              "against activations quantised per "
              "block (AVX-512 VNNI; docs/cpu-backend.md), amx the same with "
              "a Q8_0 or Q4_K prefill on AMX tiles, avx2 int8's decode steps "
              "by AVX2's instructions (a prefill widens), auto (default) amx "
              "where the host has AMX, else int8 where it has VNNI, else avx2",
              options.quantDot);
}

/// Prints `message` as kv-run's error; the exit status.
int fail(const std::string &message) {
  llvm::WithColor::error(llvm::errs(), "kv-run") << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  Options options;
  OptionParser parser("kv-run");
  declareOptions(parser, options);
  std::vector<std::string> positionals;
  std::string problem;
  if (!parser.parse(argc, argv, 1, positionals, problem))
    return fail(problem);
  if (parser.helpRequested()) {
    parser.printHelp(stdout, kUsage);
    return 0;
  }
  if (parser.versionRequested()) {
    std::fputs(versionText("kv-run").c_str(), stdout);
    return 0;
  }
  if (positionals.size() > 1)
    return fail("one program at a time, got '" + positionals[0] + "' and '" +
                positionals[1] + "'");
  if (!positionals.empty())
    options.program = positionals[0];
  if (options.quantDot != "auto" && options.quantDot != "f32" &&
      options.quantDot != "int8" && options.quantDot != "amx" &&
      options.quantDot != "avx2")
    return fail("unknown --quant-dot '" + options.quantDot +
                "' (available: auto, f32, int8, amx, avx2)");
  // A forward that widens Q8_0 or takes AVX2's dots never reads the rows
  // repacked for VNNI: none are made.
  if (options.quantDot == "f32" || options.quantDot == "avx2")
    options.run.runner.noRepack = true;
  if (!applyThreads(options.run.runner.threads, problem) ||
      !checkRunOptions(options.run, problem) ||
      !checkCacheOptions(options.cache, problem))
    return fail(problem);
  // Without a cache the run compiles everything, as --no-cache does.
  if (!options.cache.disabled &&
      !compiler::installDefaultCompileCache(uint64_t(options.cache.maxMb) << 20,
                                            problem))
    llvm::WithColor::warning(llvm::errs(), "kv-run")
        << "compile cache off: " << problem << "\n";
  llvm::Error error =
      options.program.empty() ? runTokens(options) : runProgram(options);
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
  if (error)
    return fail(llvm::toString(std::move(error)));
  return 0;
}
