//===- Runner.cpp - Running entries of compiled kv programs -----*- C++ -*-===//

#include "driver/runner/Runner.h"

#include "runtime/core/ForwardCall.h"
#include "runtime/core/GGUF.h"
#include "runtime/core/HugePages.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelCost.h"
#include "runtime/exec/Measure.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>

using namespace kvir;
using namespace kvir::run;

std::unique_ptr<Runner> Runner::create(const RunnerOptions &options,
                                       std::string &error) {
  // An unknown backend is refused before anything loads.
  if (!exec::checkBackendName(options.backend, error))
    return nullptr;
  std::unique_ptr<Runner> runner(new Runner());
  runner->options = options;
  if (!exec::openBlockStore(options.store, runner->store, runner->storeBinding,
                            error))
    return nullptr;
  runner->modelHandle.reset(
      exec::loadModel(options.model, options.synthetic, options.modelSeed,
                      options.loadFlags(), runner->description, error));
  if (!runner->modelHandle)
    return nullptr;
  kvrt_model_get_config(runner->model(), &runner->modelConfig);
  exec::TextOptions tokenizer;
  tokenizer.tokenizer = options.tokenizer;
  tokenizer.noTokenizer = options.noTokenizer;
  if (!exec::findTokenizer(tokenizer, options.model,
                           runner->modelConfig.vocab_size, runner->tokenizerRef,
                           runner->tokenizerFile, error))
    return nullptr;
  runner->computeBackend =
      exec::createBackend(options.backend, runner->model(), error);
  if (!runner->computeBackend)
    return nullptr;
  // The CPU forward's decode steps read the Q8_0 and Q4_K matrices repacked
  // (kvir::decodeRows): made here, and timed apart from the first call's.
  if (options.backend == "cpu") {
    auto start = std::chrono::steady_clock::now();
    if (kvir::decodeRows(*runner->model()))
      runner->repackSeconds = std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
  }
  runner->limit = options.maxContext >= 0
                      ? options.maxContext
                      : exec::defaultMaxContext(runner->modelConfig);
  return runner;
}

Runner::~Runner() = default;

std::string run::hugePageNote(uint64_t weightBytes, uint64_t hugeBytes,
                              bool mappedFile, bool hugePagesOff) {
  if (!mappedFile || hugePagesOff || weightBytes < kHugePageNoteLeastBytes ||
      hugeBytes >= weightBytes / 4 * 3)
    return "";
  char share[32];
  std::snprintf(share, sizeof(share), "%.0f%%",
                100.0 * double(hugeBytes) / double(weightBytes));
  return std::string(share) +
         " of the weights are on 2 MiB pages: the page cache holds the "
         "mapped file in smaller pieces (a file copied or written in small "
         "writes, or partly dropped since it was read), and decode reads "
         "them slower (up to 12% on one thread where measured); --no-mmap "
         "reads them into huge pages of the process's own (docs/models.md, "
         "\"Weights on 2 MiB pages\")";
}

uint64_t Runner::residentWeightBytes() const {
  return kvrt::weightBytes(*model()) + kvir::packedWeightBytes(*model()) -
         kvir::releasedWeightBytes(*model());
}

std::string Runner::hugePageNote() const {
  bool mapped = !options.noMmap && !options.model.empty() &&
                kvrt::gguf::fileHasMagic(options.model.c_str());
  uint64_t bytes = residentWeightBytes();
  // /proc/self/smaps is read only where a note can be due.
  if (!mapped || bytes < kHugePageNoteLeastBytes)
    return "";
  return run::hugePageNote(bytes, kvir::weightHugePageBytes(*model()), mapped,
                           kvrt::transparentHugePagesOff());
}

std::string Runner::contextWarning(int64_t tokens) const {
  if (tokens <= modelConfig.seq_len)
    return "";
  return "the context reached " + std::to_string(tokens) + " tokens, beyond " +
         "the " + std::to_string(modelConfig.seq_len) +
         " the model was trained on: positions past them were never seen in "
         "training";
}

bool Runner::preparePool(kvrt_kv_dtype programDtype, bool fromProgram,
                         std::string &error) {
  kvrt_kv_dtype dtype = programDtype;
  if (options.kvDtypeGiven) {
    std::optional<kvrt_kv_dtype> given = parseKvDtype(options.kvDtype);
    if (!given) {
      error =
          "--kv-dtype must be f32, f16 or bf16, got '" + options.kvDtype + "'";
      return false;
    }
    if (fromProgram && *given != programDtype) {
      error = "--kv-dtype " + options.kvDtype +
              " disagrees with the program, whose !kv.cache values hold " +
              kvDtypeName(programDtype) +
              " pages (change the element type of its caches, or drop the "
              "option)";
      return false;
    }
    dtype = *given;
  }
  if (poolHandle) {
    if (dtype == poolDtype)
      return true;
    error = std::string("the KV pool holds ") + kvDtypeName(poolDtype) +
            " pages, the program " + kvDtypeName(dtype) + " pages";
    return false;
  }
  if (options.pageTokens <= 0) {
    error = "--page-tokens must be positive, got " +
            std::to_string(options.pageTokens);
    return false;
  }
  if (options.pageTokens > INT32_MAX) {
    error = "--page-tokens must be at most " + std::to_string(INT32_MAX) +
            ", got " + std::to_string(options.pageTokens);
    return false;
  }
  if (options.poolPages <= 0) {
    error = "--pool-pages must be positive, got " +
            std::to_string(options.poolPages);
    return false;
  }
  kvrt_pool_config config;
  if (kvrt_pool_config_for_model(model(), &config)) {
    error = std::string("cannot size the kv pool: ") + kvrt_last_error();
    return false;
  }
  config.page_tokens = int32_t(options.pageTokens);
  config.capacity_pages = options.poolPages;
  config.dtype = dtype;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&config, &pool)) {
    error = std::string("cannot create the kv pool: ") + kvrt_last_error();
    return false;
  }
  poolHandle.reset(pool);
  poolDtype = dtype;
  return true;
}

bool Runner::encodeInputs(const exec::TextOptions &text,
                          exec::InputOptions &inputs,
                          std::string &error) const {
  if (!exec::encodeTextInputs(text, tokenizer(), inputs, error))
    return false;
  // A synthesized input is an allocation and then work: it is bounded by
  // what a run may compute and the pool may hold.
  inputs.maxSynthesized = options.poolPages * options.pageTokens;
  inputs.maxSynthesizedBy =
      "the KV pool holds (--pool-pages " + std::to_string(options.poolPages) +
      " x --page-tokens " + std::to_string(options.pageTokens) + ")";
  if (limit > 0 && limit < inputs.maxSynthesized) {
    inputs.maxSynthesized = limit;
    inputs.maxSynthesizedBy = "the run's context may hold (--max-context)";
  }
  return true;
}

bool Runner::bind(const exec::EntryManifest &manifest,
                  const exec::InputOptions &inputs,
                  std::vector<exec::Value> &args, Report &report,
                  std::string &error) const {
  return exec::bindArguments(manifest, modelConfig, inputs, args,
                             &report.inputs, error);
}

exec::RunOutcome Runner::run(const Entry &entry,
                             const std::vector<exec::Value> &args) {
  return exec::runEntry(entry.fn, *entry.manifest, backend(), model(), pool(),
                        args, limit, &storeBinding);
}

bool Runner::reportProblems(const exec::RunOutcome &outcome,
                            const SiteReporter &report) {
  for (const exec::BlockEvent &e : outcome.blockEvents)
    if (e.event.outcome == KVRT_EXEC_BLOCK_FAULT && e.event.fell_back)
      report(e.event.site, /*isError=*/false, exec::describeBlockEvent(e));
  if (!outcome.failed)
    return true;
  report(outcome.site, /*isError=*/true, outcome.message);
  return false;
}

bool Runner::complete(Report &report, const Entry &entry,
                      const exec::RunOutcome &outcome,
                      const RequestOptions &request,
                      const exec::RunOutcome *reference, std::string &error) {
  report.program = entry.program;
  report.entry = request.entry;
  report.model = description;
  report.backend = backend().name();
  report.config = describeConfig(modelConfig);
  report.tokenizer = tokenizerFile;
  MeasureOptions measure;
  measure.greedy = request.greedyTokens();
  measure.compareFull = request.compareFull;
  measure.dumpLogits = request.dumpLogits;
  measure.tokenizer = tokenizer();
  measure.maxContext = limit;
  measure.reference = reference;
  if (!completeReport(report, outcome, entry.manifest->hasPlanOps, backend(),
                      entry.forward, model(), pool(), measure, error))
    return false;
  addBlockStore(report, store.get(), storeBinding.policy, outcome);
  if (request.profile) {
    report.profiled = true;
    report.siteTimes = outcome.siteTimes;
    report.sites = entry.manifest->sites;
  }
  return true;
}

bool Runner::checkTokenList(const std::vector<int32_t> &tokens, int64_t greedy,
                            std::string &error) const {
  int64_t context = int64_t(tokens.size()) + std::max<int64_t>(greedy - 1, 0);
  if (limit > 0 && context > limit) {
    error = (greedy > 1 ? std::to_string(tokens.size()) + " tokens and " +
                              std::to_string(greedy - 1) +
                              " generated ones (--greedy " +
                              std::to_string(greedy) + ")"
                        : std::to_string(tokens.size()) + " tokens") +
            " are more than the context limit of " + std::to_string(limit) +
            " (--max-context; the model was trained " + "on " +
            std::to_string(modelConfig.seq_len) + ")";
    return false;
  }
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= modelConfig.vocab_size) {
      error = "token " + std::to_string(tokens[i]) + " at index " +
              std::to_string(i) + " is outside the vocabulary [0, " +
              std::to_string(modelConfig.vocab_size) + ")";
      return false;
    }
  return true;
}

bool Runner::prefillTokenList(const Forward &forward, TokenListRun &run,
                              std::string &error) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  kvrt_view *empty = nullptr, *filled = nullptr;
  auto start = Clock::now();
  kvrt_status status = kvrt_view_create(pool(), &empty);
  if (!status)
    status = backend().prefill(forward, model(), empty, run.tokens.data(),
                               int64_t(run.tokens.size()), /*pos=*/0,
                               /*label=*/nullptr,
                               run.allRows ? kvir::LogitRows::all()
                                           : kvir::LogitRows::last(),
                               &run.logits, &filled);
  run.seconds = since(start);
  kvrt_view_release(empty);
  exec::ViewRef cache = exec::adoptView(filled);
  if (status) {
    error =
        std::string(backend().name()) + " prefill failed: " + kvrt_last_error();
    return false;
  }
  run.generated.clear();
  run.decodeSeconds = 0;
  if (run.greedy == 0)
    return true;
  // The decode steps continue from the last row and the filled cache.
  exec::Logits last;
  last.rows = 1;
  last.vocab = modelConfig.vocab_size;
  last.data.assign(run.logits.end() - last.vocab, run.logits.end());
  start = Clock::now();
  bool ok = exec::greedyContinue(backend(), forward, model(), last, cache,
                                 run.greedy, run.generated, error);
  run.decodeSeconds = since(start);
  return ok;
}

namespace {

/// Bytes a decode step reads, on average over `steps` steps from position
/// `first`: every tensor the model keeps (all of the embedding table only
/// where it is the classifier too, else one row), and the K/V of `dtype`
/// its token attends.
double decodeStepBytes(const kvrt_model &model, kvrt_kv_dtype dtype,
                       int64_t first, int64_t steps) {
  double weights = double(kvrt::weightBytes(model));
  const kvrt_weight &embedding = model.weights.token_embedding;
  if (!model.config.shared_classifier && embedding.rows > 0) {
    // All rows but the one looked up are left unread.
    double table = 0;
    for (int64_t l = 0; l < embedding.n_slices; ++l)
      table += double(embedding.slices[l].bytes);
    weights -= table - table / double(embedding.rows);
  }
  double kv = double(ModelCost::of(model.config, dtype)
                         .kvRangeReadBytes(first, first + steps));
  return weights + kv / double(steps);
}

} // namespace

bool Runner::printTokenList(const TokenListRun &run,
                            const std::string &dumpLogits, bool json,
                            std::string &error) {
  TokenListReport r;
  r.model = description;
  r.config = describeConfig(modelConfig);
  r.backend = backend().name();
  if (tokenizer())
    r.tokenizer = tokenizerFile;
  r.tokens = run.tokens;
  r.vocab = modelConfig.vocab_size;
  const float *last = run.logits.data() + run.logits.size() - r.vocab;
  r.argmax = std::max_element(last, last + r.vocab) - last;
  r.argmaxLogit = last[r.argmax];
  // What the model reads, decoded back: the round trip of the encoding.
  r.fromText = run.fromText;
  r.bos = run.bos;
  r.text = run.text;
  if (run.fromText &&
      !exec::decodeTokens(tokenizer(), -1, run.tokens, r.decoded, error))
    return false;
  r.generated = run.generated;
  if (tokenizer() &&
      (!exec::decodeTokens(tokenizer(), run.tokens.back(), {int32_t(r.argmax)},
                           r.argmaxText, error) ||
       !exec::decodeTokens(tokenizer(), run.tokens.back(), run.generated,
                           r.generatedText, error)))
    return false;
  r.prefillSeconds = run.seconds;
  r.decodeSeconds = run.decodeSeconds;
  r.packedWeightBytes = kvir::packedWeightBytes(*model());
  r.repackSeconds = repackSeconds;
  r.weightBytes = residentWeightBytes();
  r.weightHugePageBytes = kvir::weightHugePageBytes(*model());
  if (run.generated.size() > 1) {
    kvrt_page_layout layout;
    kvrt_pool_get_layout(pool(), &layout);
    r.decodeStepBytes =
        decodeStepBytes(*model(), layout.dtype, int64_t(run.tokens.size()),
                        int64_t(run.generated.size()) - 1);
  }
  if (!dumpLogits.empty()) {
    if (!writeFloats(run.logits, dumpLogits, error))
      return false;
    r.logitsFile = dumpLogits;
    r.logitsRows = int64_t(run.logits.size()) / r.vocab;
  }
  printTokenListReport(r, json);
  return true;
}
