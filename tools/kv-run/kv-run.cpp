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
//          [--dump-logits OUT]
//     prefills a token list from position 0.
// --model takes a llama2.c checkpoint or a GGUF file. Without --model, a
// built-in synthetic model of stories260K's shape is used. Text goes through
// the tokenizer inside a GGUF model, the one beside the model
// (tok<vocab>.bin) or --tokenizer, and continuations are decoded.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Attribution.h"
#include "driver/compiler/Compiler.h"
#include "driver/compiler/ThreadsOption.h"
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
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
              cl::desc("model to run: a llama2.c checkpoint or a GGUF v3 "
                       "llama file (F32, F16, BF16 or Q8_0; told by its "
                       "magic; see docs/models.md) (default: the built-in "
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
cl::opt<std::string> tokenizerPath(
    "tokenizer",
    cl::desc("tokenizer for text in and out, a llama2.c tokenizer.bin or a "
             "GGUF file (default: the tokenizer inside a GGUF --model, else "
             "tok<vocab>.bin beside the --model file when present; none for "
             "synthetic models)"),
    cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<bool> noTokenizer(
    "no-tokenizer",
    cl::desc("run without a tokenizer, even where one lies beside the model"),
    cl::init(false), cl::cat(kvRunCategory));
cl::list<std::string> texts(
    "text",
    cl::desc("binds a token argument (argN, or its kv.name) to the encoding "
             "of STRING (a dummy space in front, no BOS unless --bos NAME); "
             "first form: --text STRING is the prompt"),
    cl::value_desc("NAME=STRING"), cl::cat(kvRunCategory));
cl::list<std::string> textFiles(
    "text-file",
    cl::desc("binds a token argument to the encoding of the text in FILE "
             "(as --text); first form: --text-file FILE"),
    cl::value_desc("NAME=FILE"), cl::cat(kvRunCategory));
cl::list<std::string>
    bosNames("bos",
             cl::desc("put BOS in front of the encoding of the text argument "
                      "NAME (first form: --bos prompt)"),
             cl::value_desc("NAME"), cl::cat(kvRunCategory));
cl::opt<bool> attribute(
    "attribute",
    cl::desc("attribute the change of the answer made by a kv.edit to the "
             "segments before it, by patching each segment's K/V with its "
             "value in the edited context (docs/kv-run.md)"),
    cl::init(false), cl::cat(kvRunCategory));
cl::opt<std::string> backendName(
    "backend",
    cl::desc("where the math runs: cpu (the program's generated CPU code, "
             "the default), cuda (its generated GPU code, PTX loaded by the "
             "driver; needs a GPU) or reference (the C++ oracle, for "
             "comparison)"),
    cl::value_desc("name"), cl::init("cpu"), cl::cat(kvRunCategory));
cl::opt<int64_t> maxContextOption(
    "max-context",
    cl::desc("refuse to compute a token at position N or beyond (default: 8 "
             "times the context the model was trained on; 0: no limit); a "
             "context beyond the trained one gets a warning"),
    cl::value_desc("N"), cl::init(-1), cl::cat(kvRunCategory));
cl::opt<int> pageTokens("page-tokens",
                        cl::desc("token slots per KV page (default 16)"),
                        cl::value_desc("n"), cl::init(16),
                        cl::cat(kvRunCategory));
cl::opt<std::string> kvDtypeOption(
    "kv-dtype",
    cl::desc("element type of the KV pages: f32, f16 or bf16 (default: the "
             "element type of the program's !kv.cache values; f32 for a token "
             "list). With a program it must agree with the program's caches: "
             "the program names the pages its forward reads"),
    cl::value_desc("type"), cl::cat(kvRunCategory));
cl::opt<int64_t> poolPages("pool-pages",
                           cl::desc("capacity of the KV pool in pages "
                                    "(reserved lazily; default 8192)"),
                           cl::value_desc("n"), cl::init(8192),
                           cl::cat(kvRunCategory));

cl::opt<std::string> kvStore(
    "kv-store",
    cl::desc("block store of kv.load_block and kv.store_block: memory (this "
             "process) or redis://HOST[:PORT][/DB] (shared by every process "
             "pointed at it; docs/block-store.md)"),
    cl::value_desc("url"), cl::cat(kvRunCategory));
cl::opt<std::string>
    kvStorePrefix("kv-store-prefix",
                  cl::desc("prefix of the block store's keys (default kvir:)"),
                  cl::value_desc("prefix"), cl::init("kvir:"),
                  cl::cat(kvRunCategory));
cl::opt<int64_t>
    kvStoreTtl("kv-store-ttl",
               cl::desc("expiry of stored blocks in seconds (default 0: none)"),
               cl::value_desc("seconds"), cl::init(0), cl::cat(kvRunCategory));
cl::opt<int64_t> kvStoreTimeout(
    "kv-store-timeout-ms",
    cl::desc("timeout of connecting to the block store and of each command "
             "(default 2000)"),
    cl::value_desc("ms"), cl::init(2000), cl::cat(kvRunCategory));
cl::opt<std::string> kvStorePolicy(
    "kv-store-policy",
    cl::desc("on a block store fault (unreachable, timeout, evicted, a "
             "rejected blob): fallback (prefill locally, the default) or fail "
             "(an error)"),
    cl::value_desc("fallback|fail"), cl::init("fallback"),
    cl::cat(kvRunCategory));

/// The block store options of the command line.
exec::StoreOptions storeOptions() {
  exec::StoreOptions options;
  options.url = kvStore;
  options.prefix = kvStorePrefix;
  options.ttlSeconds = kvStoreTtl;
  options.timeoutMs = kvStoreTimeout;
  options.policy = kvStorePolicy;
  options.prefixGiven = kvStorePrefix.getNumOccurrences() > 0;
  options.ttlGiven = kvStoreTtl.getNumOccurrences() > 0;
  options.timeoutGiven = kvStoreTimeout.getNumOccurrences() > 0;
  options.policyGiven = kvStorePolicy.getNumOccurrences() > 0;
  return options;
}

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Rejects option values that make no sense, before anything is loaded.
llvm::Error checkOptions() {
  if (greedyTokens.getNumOccurrences() && greedyTokens < 0)
    return makeError("--greedy must not be negative, got " +
                     llvm::Twine(int64_t(greedyTokens)));
  if (maxContextOption.getNumOccurrences() && maxContextOption < 0)
    return makeError("--max-context must not be negative, got " +
                     llvm::Twine(int64_t(maxContextOption)));
  if (dumpLogits.getNumOccurrences() && dumpLogits.empty())
    return makeError("--dump-logits: an empty output file name");
  return llvm::Error::success();
}

/// The context limit of the run (0: none): --max-context, else 8 times the
/// model's trained context.
int64_t maxContext(const kvrt_model_config &config) {
  return maxContextOption >= 0 ? int64_t(maxContextOption)
                               : exec::defaultMaxContext(config);
}

/// Warns when the run went beyond the context the model was trained on.
void warnBeyondTraining(const kvrt_model_config &config, int64_t tokens) {
  if (tokens > config.seq_len)
    llvm::WithColor::warning(llvm::errs(), "kv-run")
        << "the context reached " << tokens << " tokens, beyond the "
        << config.seq_len
        << " the model was trained on: positions past them were never "
           "seen in training\n";
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

/// The text options of the command line. The program form takes
/// NAME=STRING and NAME=FILE; the first form one prompt, named `prompt`.
llvm::Expected<exec::TextOptions> readTextOptions(bool firstForm) {
  exec::TextOptions options;
  options.tokenizer = tokenizerPath;
  options.noTokenizer = noTokenizer;
  if (tokenizerPath.getNumOccurrences() && tokenizerPath.empty())
    return makeError("--tokenizer: an empty file name");
  std::string error;
  for (const std::string &spec : texts) {
    exec::TextOptions::Item item{"prompt", spec, "--text", "--text"};
    if (!firstForm &&
        !exec::splitNameValue(spec, "--text", item.name, item.text, error))
      return makeError(error);
    options.texts.push_back(item);
  }
  for (const std::string &spec : textFiles) {
    exec::TextOptions::Item item{"prompt", "", "--text-file", ""};
    std::string file = spec;
    if (!firstForm &&
        !exec::splitNameValue(spec, "--text-file", item.name, file, error))
      return makeError(error);
    if (file.empty())
      return makeError("--text-file " + item.name + ": an empty file name");
    item.source = "'" + file + "'";
    if (!exec::readFile(file, item.text, error, "text file"))
      return makeError(error);
    options.texts.push_back(item);
  }
  options.bos.insert(bosNames.begin(), bosNames.end());
  return options;
}

/// The tokenizer the options ask for, checked against `model`'s vocabulary
/// (null when there is none); `path` says which file.
llvm::Expected<exec::TokenizerRef>
findTokenizer(const exec::TextOptions &options, const kvrt_model *model,
              std::string &path) {
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  exec::TokenizerRef tokenizer;
  std::string error;
  if (!exec::findTokenizer(options, modelPath, config.vocab_size, tokenizer,
                           path, error))
    return makeError(error);
  return tokenizer;
}

/// Reads the token list from --tokens, --tokens-file or the text of --text
/// or --text-file (exactly one), encoding text with `tokenizer`.
llvm::Expected<std::vector<int32_t>>
readTokens(const exec::TextOptions &prompt, const kvrt_tokenizer *tokenizer) {
  bool inline_ = tokensArg.getNumOccurrences() > 0;
  bool file = tokensFile.getNumOccurrences() > 0;
  if (inline_ + file + prompt.texts.size() != 1)
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
  std::string text = tokensArg, source = "--tokens";
  if (file) {
    source = "'" + tokensFile + "'";
    if (!exec::readFile(tokensFile, text, error, "token file"))
      return makeError(error);
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

/// The K/V element type of --kv-dtype; `program` is the program's (f32 for a
/// token list), which the option must agree with.
llvm::Expected<kvrt_kv_dtype> kvDtype(kvrt_kv_dtype program, bool fromProgram) {
  if (!kvDtypeOption.getNumOccurrences())
    return program;
  std::optional<kvrt_kv_dtype> dtype = kvir::parseKvDtype(kvDtypeOption);
  if (!dtype)
    return makeError("--kv-dtype must be f32, f16 or bf16, got '" +
                     kvDtypeOption + "'");
  if (fromProgram && *dtype != program)
    return makeError(llvm::Twine("--kv-dtype ") + kvDtypeOption +
                     " disagrees with the program, whose !kv.cache values "
                     "hold " +
                     kvir::kvDtypeName(program) +
                     " pages (change the element type of its caches, or drop "
                     "the option)");
  return *dtype;
}

llvm::Expected<PoolPtr> makePool(const kvrt_model *model, kvrt_kv_dtype dtype) {
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
  poolConfig.dtype = dtype;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&poolConfig, &pool))
    return runtimeError("cannot create the kv pool");
  return PoolPtr(pool, kvrt_pool_release);
}

/// The forward of `config` for the first form (no program).
llvm::Expected<Forward> forwardFor(const ComputeBackend &backend,
                                   const kvrt_model_config &config,
                                   kvrt_kv_dtype dtype) {
  Forward forward;
  if (!backend.runsGeneratedCode())
    return forward;
  if (compiler::compileForward(config, target(), &forward, dtype))
    return runtimeError("cannot compile the forward of the model");
  return forward;
}

/// The first form: prefill a token list from position 0.
llvm::Error runTokens() {
  if (attribute)
    return makeError("--attribute belongs to the program form (kv-run "
                     "PROGRAM.mlir --attribute)");
  if (kvStore.getNumOccurrences())
    return makeError("--kv-store belongs to the program form: blocks are "
                     "loaded and stored by kv.load_block and kv.store_block");
  llvm::Expected<exec::TextOptions> text = readTextOptions(/*firstForm=*/true);
  if (!text)
    return text.takeError();
  if (text->texts.empty() && !text->bos.empty())
    return makeError("--bos " + *text->bos.begin() +
                     " names no text: the first form takes --bos prompt with "
                     "--text or --text-file (token ids are taken verbatim)");
  // Token ids are checked before anything loads; text needs the tokenizer.
  llvm::Expected<std::vector<int32_t>> tokens =
      text->texts.empty()
          ? readTokens(*text, nullptr)
          : llvm::Expected<std::vector<int32_t>>(std::vector<int32_t>());
  if (!tokens)
    return tokens.takeError();
  if (llvm::Error error = checkBackendName())
    return error;
  std::string description;
  llvm::Expected<ModelPtr> model = loadModel(description);
  if (!model)
    return model.takeError();
  std::string tokenizerFile;
  llvm::Expected<exec::TokenizerRef> tokenizer =
      findTokenizer(*text, model->get(), tokenizerFile);
  if (!tokenizer)
    return tokenizer.takeError();
  if (!text->texts.empty()) {
    llvm::Expected<std::vector<int32_t>> encoded =
        readTokens(*text, tokenizer->get());
    if (!encoded)
      return encoded.takeError();
    *tokens = std::move(*encoded);
  }
  llvm::Expected<std::unique_ptr<ComputeBackend>> backend =
      makeBackend(model->get());
  if (!backend)
    return backend.takeError();
  kvrt_model_config config;
  kvrt_model_get_config(model->get(), &config);
  if (int64_t limit = maxContext(config);
      limit > 0 && int64_t(tokens->size()) > limit)
    return makeError(llvm::Twine(tokens->size()) +
                     " tokens are more than the context limit of " +
                     llvm::Twine(limit) +
                     " (--max-context; the model was "
                     "trained on " +
                     llvm::Twine(config.seq_len) + ")");
  warnBeyondTraining(config, int64_t(tokens->size()));
  for (size_t i = 0; i < tokens->size(); ++i)
    if ((*tokens)[i] >= config.vocab_size)
      return makeError("token " + llvm::Twine((*tokens)[i]) + " at index " +
                       llvm::Twine(i) + " is outside the vocabulary [0, " +
                       llvm::Twine(config.vocab_size) + ")");
  llvm::Expected<kvrt_kv_dtype> dtype = kvDtype(KVRT_KV_F32, false);
  if (!dtype)
    return dtype.takeError();
  llvm::Expected<PoolPtr> pool = makePool(model->get(), *dtype);
  if (!pool)
    return pool.takeError();
  llvm::Expected<Forward> forward = forwardFor(**backend, config, *dtype);
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
  if (*tokenizer)
    std::printf("tokenizer: %s\n", tokenizerFile.c_str());
  std::printf("tokens: %zu (positions 0..%zu)\n", n, n - 1);
  std::string error;
  if (!text->texts.empty()) {
    // What the model reads, decoded back: the round trip of the encoding.
    std::string decoded;
    if (!exec::decodeTokens(tokenizer->get(), -1, *tokens, decoded, error))
      return makeError(error);
    std::printf("text (%s): %s\n",
                text->bos.count("prompt") ? "BOS first" : "no BOS",
                exec::quoteText(text->texts.front().text).c_str());
    std::printf("token ids:");
    for (int32_t t : *tokens)
      std::printf(" %d", t);
    std::printf("\ndecoded: %s\n", exec::quoteText(decoded).c_str());
  }
  std::printf("argmax at last position: %zu (logit %.6f)\n", argmax,
              last[argmax]);
  if (*tokenizer) {
    std::string piece;
    if (!exec::decodeTokens(tokenizer->get(), tokens->back(), {int32_t(argmax)},
                            piece, error))
      return makeError(error);
    std::printf("argmax text: %s\n", exec::quoteText(piece).c_str());
  }
  std::printf("time: %.3f ms (%.1f tokens/s)\n", seconds * 1e3, n / seconds);
  if (dumpLogits.getNumOccurrences()) {
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
    if (!exec::readFile(file.str(), text, error, "input file"))
      return makeError(error);
    options.given[name.str()] = {std::move(text), "'" + file.str() + "'"};
  }
  return options;
}

/// Runs the auxiliary entry of `spec` for the edit's operands and
/// attributes the answer's change to the segments (report.attribution).
/// False after a diagnostic at `loc`.
bool runAttribution(const compiler::AttributionEntry &spec,
                    compiler::CompiledProgram &program, ComputeBackend &backend,
                    const kvrt_model *model, kvrt_pool *pool,
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
  exec::RunOutcome outcome =
      exec::runEntry(fn, *manifest, backend, model, pool, args);
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
  if (!exec::attribute(backend, program.forward, model, pool, request,
                       report.attribution, error)) {
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
                  const compiler::LowerOptions &lowering,
                  ComputeBackend &backend, const kvrt_model *model,
                  kvrt_pool *pool, const std::vector<exec::Value> &args) {
  mlir::FailureOr<compiler::CompiledProgram> program =
      compiler::compileProgram(std::move(reference), entryName, lowering);
  if (mlir::failed(program))
    return makeError("cannot compile the exact reference of the program");
  exec::RunOutcome outcome = exec::runEntry(program->entry, program->manifest,
                                            backend, model, pool, args);
  if (outcome.failed)
    return makeError("the exact reference of the program failed: " +
                     outcome.message);
  return outcome;
}

/// The program form.
llvm::Error runProgram() {
  if (tokensArg.getNumOccurrences() || tokensFile.getNumOccurrences())
    return makeError("--tokens/--tokens-file belong to the first form; a "
                     "program takes --input NAME=FILE");
  llvm::Expected<exec::InputOptions> options = readInputs();
  if (!options)
    return options.takeError();
  llvm::Expected<exec::TextOptions> text = readTextOptions(/*firstForm=*/false);
  if (!text)
    return text.takeError();
  if (llvm::Error error = checkBackendName())
    return error;
  // The store's options are checked before anything loads; nothing is
  // connected until the first block op.
  exec::BlockStoreRef store(nullptr, kvrt_block_store_release);
  exec::BlockStoreBinding storeBinding;
  {
    std::string error;
    if (!exec::openBlockStore(storeOptions(), store, storeBinding, error))
      return makeError(error);
  }
  Report report;
  llvm::Expected<ModelPtr> model = loadModel(report.model);
  if (!model)
    return model.takeError();
  llvm::Expected<exec::TokenizerRef> tokenizer =
      findTokenizer(*text, model->get(), report.tokenizer);
  if (!tokenizer)
    return tokenizer.takeError();
  std::string error;
  if (!exec::encodeTextInputs(*text, tokenizer->get(), *options, error))
    return makeError(error);
  // The backend first: the cuda one checks the driver before any generated
  // code loads its kernels.
  llvm::Expected<std::unique_ptr<ComputeBackend>> backend =
      makeBackend(model->get());
  if (!backend)
    return backend.takeError();
  kvrt_model_config config;
  kvrt_model_get_config(model->get(), &config);
  // Synthesized inputs are bounded by what the run may compute and the
  // pool may hold, before they are allocated.
  int64_t limit = maxContext(config);
  options->maxSynthesized = int64_t(poolPages) * pageTokens;
  if (limit > 0)
    options->maxSynthesized = std::min(options->maxSynthesized, limit);

  mlir::DialectRegistry registry;
  compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
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
  // With the comparison, a program with erratum edits is also planned with
  // them exact: its answer's context is the edited context, the reference.
  mlir::OwningOpRef<mlir::ModuleOp> reference;
  mlir::OwningOpRef<mlir::ModuleOp> planned = compiler::loadProgram(
      context, sourceMgr, programPath,
      attribute ? llvm::function_ref<mlir::LogicalResult(mlir::ModuleOp)>(
                      addAttribution)
                : nullptr,
      compareFull ? &reference : nullptr);
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
  llvm::Expected<kvrt_kv_dtype> dtype = kvDtype(*programDtype, true);
  if (!dtype)
    return dtype.takeError();
  llvm::Expected<PoolPtr> pool = makePool(model->get(), *dtype);
  if (!pool)
    return pool.takeError();
  mlir::FailureOr<exec::EntryManifest> manifest =
      compiler::describeEntry(*entry);
  if (mlir::failed(manifest))
    return failed();
  std::vector<exec::Value> args;
  if (!exec::bindArguments(*manifest, config, *options, args, &report.inputs,
                           error)) {
    mlir::emitError(entry->getLoc()) << error;
    return failed();
  }
  compiler::LowerOptions lowering;
  lowering.target = target();
  lowering.format = "isa";
  lowering.exportModel = config;
  lowering.exportDtype = *dtype;
  mlir::FailureOr<compiler::CompiledProgram> program =
      compiler::compileProgram(std::move(planned), entryName, lowering);
  if (mlir::failed(program))
    return failed();
  exec::RunOutcome outcome =
      exec::runEntry(program->entry, program->manifest, **backend, model->get(),
                     pool->get(), args, limit, &storeBinding);
  warnBeyondTraining(config, outcome.contextTokens);
  // Faults the policy let the run go on after: a warning at the op.
  for (const exec::BlockEvent &e : outcome.blockEvents)
    if (e.event.outcome == KVRT_EXEC_BLOCK_FAULT) {
      mlir::Location loc =
          e.event.site >= 0 && size_t(e.event.site) < program->sites.size()
              ? program->sites[e.event.site]
              : mlir::Location(entry->getLoc());
      if (e.event.fell_back)
        mlir::emitWarning(loc) << exec::describeBlockEvent(e);
    }
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
  measure.tokenizer = tokenizer->get();
  measure.maxContext = limit;
  std::optional<exec::RunOutcome> exactRun;
  if (reference && needsExactReference(outcome)) {
    llvm::Expected<exec::RunOutcome> run =
        runExactReference(std::move(reference), lowering, **backend,
                          model->get(), pool->get(), args);
    if (!run)
      return run.takeError();
    exactRun = std::move(*run);
    measure.reference = &*exactRun;
  }
  if (!completeReport(report, outcome, program->manifest.hasPlanOps, **backend,
                      program->forward, model->get(), pool->get(), measure,
                      error))
    return makeError(error);
  addBlockStore(report, store.get(), storeBinding.policy, outcome);
  if (attribution) {
    mlir::Location loc = attribution->editLoc
                             ? mlir::Location(attribution->editLoc)
                             : mlir::Location(entry->getLoc());
    if (!runAttribution(*attribution, *program, **backend, model->get(),
                        pool->get(), args, report, loc))
      return failed();
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
  cl::opt<int> &threads = compiler::registerThreadsOption(kvRunCategory);
  cl::HideUnrelatedOptions(kvRunCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kv-run: run kv programs (or a token list) on a model; report logits, "
      "cost and fidelity\n\n"
      "  kv-run examples/agent-edit.mlir --synthesize-inputs "
      "--compare-full-prefill\n"
      "  kv-run PROGRAM.mlir --model M.bin --input city=city.txt ...\n"
      "  kv-run examples/story-edit.mlir --model M.bin --text "
      "hero=\"girl named Lily.\" ... --attribute\n"
      "  kv-run --model M.bin --tokens \"1 2 3\" --dump-logits out.f32\n"
      "  kv-run --model M.bin --text \"Once upon a time\" --bos prompt\n");
  if (!compiler::applyThreadsOption(threads, "kv-run"))
    return 1;
  llvm::Error error = checkOptions();
  if (!error)
    error = programPath.empty() ? runTokens() : runProgram();
  // The report went to stdout: a full disk or a closed pipe is a failure.
  if (!error && (std::fflush(stdout) != 0 || std::ferror(stdout)))
    error = makeError(llvm::Twine("cannot write the report to stdout: ") +
                      std::strerror(errno));
  if (error) {
    llvm::WithColor::error(llvm::errs(), "kv-run")
        << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  return 0;
}
