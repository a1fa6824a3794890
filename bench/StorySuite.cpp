//===- StorySuite.cpp - The story-edit fidelity suite -----------*- C++ -*-===//

#include "bench/StorySuite.h"
#include "bench/BenchProgram.h"

#include "driver/compiler/Compiler.h"
#include "runtime/core/ComputeBackend.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/exec/Attribution.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/Text.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <sstream>

using namespace kvir;
using namespace kvir::exec;
using namespace kvir::stories;

const char *const kvir::stories::kSegmentNames[5] = {"intro", "fact", "world",
                                                     "thought", "answer"};

//===----------------------------------------------------------------------===//
// Stories and strategies
//===----------------------------------------------------------------------===//

bool kvir::stories::parseStories(const std::string &text,
                                 std::vector<Story> &out, std::string &error) {
  out.clear();
  std::istringstream in(text);
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    if (line.empty() || line[0] == '#')
      continue;
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t bar; (bar = line.find('|', start)) != std::string::npos;
         start = bar + 1)
      fields.push_back(line.substr(start, bar - start));
    fields.push_back(line.substr(start));
    auto bad = [&](const std::string &why) {
      error = "line " + std::to_string(lineNo) + ": " + why;
      return false;
    };
    if (fields.size() != 9)
      return bad("expected 9 fields separated by '|' (name, intro, fact, "
                 "world, thought, answer, new fact, new entity, correction), "
                 "got " +
                 std::to_string(fields.size()));
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i].empty())
        return bad("field " + std::to_string(i + 1) + " is empty");
    Story s;
    s.name = fields[0];
    for (int i = 0; i < 5; ++i)
      s.segments[i] = fields[1 + i];
    s.newFact = fields[6];
    s.newEntity = fields[7];
    s.correction = fields[8];
    if (s.newFact == s.segments[1])
      return bad("the new fact equals the old one");
    out.push_back(std::move(s));
  }
  if (out.empty()) {
    error = "no stories";
    return false;
  }
  return true;
}

std::string StrategySpec::label() const {
  if (compose)
    return strategy.empty() ? "compose" : "compose, " + strategy;
  return strategy + (misdeclared ? " [thought's dep dropped]" : "");
}

StrategySpec kvir::stories::parseStrategySpec(const std::string &text) {
  StrategySpec spec;
  spec.strategy = text;
  if (text.rfind("compose", 0) == 0) {
    spec.compose = true;
    size_t comma = text.find(',');
    spec.strategy = comma == std::string::npos ? "" : text.substr(comma + 1);
    size_t first = spec.strategy.find_first_not_of(' ');
    spec.strategy =
        first == std::string::npos ? "" : spec.strategy.substr(first);
  } else if (!text.empty() && text[0] == '!') {
    spec.misdeclared = true;
    spec.strategy = text.substr(1);
  }
  return spec;
}

std::vector<StrategySpec> kvir::stories::defaultStrategies() {
  std::vector<StrategySpec> list;
  for (const char *spec :
       {"exact", "cot_slice", "cot_slice, first_k = 4",
        "cot_slice, fraction = 0.25", "cot_slice, deviation = 0.01",
        "!cot_slice", "!cot_slice, fraction = 0.25",
        "!cot_slice, deviation = 0.01", "erratum", "compose",
        "compose, first_k = 4", "compose, fraction = 0.25",
        "compose, deviation = 0.05"})
    list.push_back(parseStrategySpec(spec));
  return list;
}

std::vector<StrategySpec> kvir::stories::calibrationStrategies() {
  // The deviation threshold against what it recomputes and what it keeps:
  // for edits whose thought's dependency was left out (the guard's purpose),
  // next to the correctly declared plan, and for composed bodies.
  std::vector<StrategySpec> list = {parseStrategySpec("cot_slice"),
                                    parseStrategySpec("!cot_slice")};
  for (const char *t : {"0.2", "0.1", "0.05", "0.02", "0.01", "0.005"})
    list.push_back(
        parseStrategySpec(std::string("!cot_slice, deviation = ") + t));
  list.push_back(parseStrategySpec("compose"));
  for (const char *t : {"0.5", "0.2", "0.1", "0.05", "0.02"})
    list.push_back(parseStrategySpec(std::string("compose, deviation = ") + t));
  return list;
}

using kvir::bench::cacheType;
using kvir::bench::modelType;

std::string kvir::stories::storyProgram(const kvrt_model_config &c,
                                        const StrategySpec &strategy) {
  std::string vocab = std::to_string(c.vocab_size);
  std::string model = modelType(c), cache = cacheType(c, "story");
  const char *kinds[5] = {"system", "fact", "history", "thought", "answer"};
  const char *deps[5] = {"", "", "", strategy.misdeclared ? "" : " deps(@fact)",
                         " deps(@thought, @world)"};
  std::string s = "kv.context @story {\n";
  for (int i = 0; i < 5; ++i)
    s += std::string("  kv.segment @") + kSegmentNames[i] + " kind(" +
         kinds[i] + ") tokens(?)" + deps[i] + "\n";
  s += "}\nfunc.func @main(%m: " + model;
  for (const char *name : kSegmentNames)
    s += std::string(", %") + name + ": tensor<?xi32> {kv.name = \"" + name +
         "\"}";
  bool erratum = strategy.strategy.rfind("erratum", 0) == 0;
  if (erratum)
    s += ", %fix: tensor<?xi32> {kv.name = \"fix\"}";
  s += ", %new: tensor<?xi32> {kv.name = \"new\"}) -> tensor<?x" + vocab +
       "xf32> {\n  %c = kv.empty : " + cache + "\n";
  std::string prev = "%c";
  for (const char *name : kSegmentNames) {
    std::string next = std::string("%c_") + name;
    s += "  " + next + ", %l_" + name + " = kv.prefill %m, " + prev + ", %" +
         name + " segment @" + name + " last : " + model + ", (" + cache +
         "), tensor<?xi32> -> " + cache + ", tensor<1x" + vocab + "xf32>\n";
    prev = next;
  }
  s += "  %e = kv.edit %m, " + prev + "[@fact] = %new strategy <" +
       strategy.strategy + ">" + (erratum ? " correction(%fix)" : "") + " : " +
       model + ", " + cache + ", tensor<?xi32>" +
       (erratum ? ", tensor<?xi32>" : "") + "\n";
  s += "  %l = kv.logits %m, %e[@answer] : " + model + ", " + cache +
       " -> tensor<?x" + vocab + "xf32>\n  return %l : tensor<?x" + vocab +
       "xf32>\n}\n";
  return s;
}

std::string kvir::stories::composeProgram(const kvrt_model_config &c,
                                          const StrategySpec &strategy) {
  std::string vocab = std::to_string(c.vocab_size);
  std::string model = modelType(c), cache = cacheType(c, "");
  std::string tokens = "tensor<?xi32>";
  std::string s = "func.func private @prefill_alone(%m: " + model +
                  ", %t: " + tokens + ") -> " + cache +
                  " {\n  %e = kv.empty : " + cache +
                  "\n  %c, %l = kv.prefill %m, %e, %t last : " + model + ", (" +
                  cache + "), " + tokens + " -> " + cache + ", tensor<1x" +
                  vocab + "xf32>\n  return %c : " + cache + "\n}\n";
  s += "func.func @main(%m: " + model;
  for (const char *name : {"intro", "body", "answer"})
    s += std::string(", %") + name + ": " + tokens + " {kv.name = \"" + name +
         "\"}";
  s += ") -> tensor<?x" + vocab + "xf32> {\n  %e = kv.empty : " + cache +
       "\n  %c, %l0 = kv.prefill %m, %e, %intro last : " + model + ", (" +
       cache + "), " + tokens + " -> " + cache + ", tensor<1x" + vocab +
       "xf32>\n";
  s += "  %b = func.call @prefill_alone(%m, %body) : (" + model + ", " +
       tokens + ") -> " + cache + "\n";
  s += "  %w = kv.compose %c, %b" +
       (strategy.strategy.empty()
            ? std::string()
            : " repair <" + strategy.strategy + "> using %m") +
       " : " + cache + ", " + cache +
       (strategy.strategy.empty() ? std::string() : ", " + model) + "\n";
  s += "  %f, %l = kv.prefill %m, %w, %answer : " + model + ", (" + cache +
       "), " + tokens + " -> " + cache + ", tensor<?x" + vocab +
       "xf32>\n  return %l : tensor<?x" + vocab + "xf32>\n}\n";
  return s;
}

bool kvir::stories::namesEntity(const std::string &text,
                                const std::string &entity) {
  if (entity.empty())
    return false;
  auto isWord = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0;
  };
  for (size_t at = text.find(entity); at != std::string::npos;
       at = text.find(entity, at + 1)) {
    if (at > 0 && isWord(text[at - 1]))
      continue;
    size_t end = at + entity.size();
    for (const char *suffix : {"", "s", "es"}) {
      std::string tail(suffix);
      if (text.compare(end, tail.size(), tail) != 0)
        continue;
      size_t after = end + tail.size();
      if (after >= text.size() || !isWord(text[after]))
        return true;
    }
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

namespace {

using ModelPtr = std::unique_ptr<kvrt_model, void (*)(kvrt_model *)>;
using PoolPtr = std::unique_ptr<kvrt_pool, void (*)(kvrt_pool *)>;

std::string idsText(const std::vector<int32_t> &ids) {
  std::string s;
  for (int32_t id : ids)
    s += std::to_string(id) + " ";
  return s;
}

/// The tokens of one story: its segments, the new fact.
struct StoryTokens {
  std::vector<int32_t> segments[5], newFact, correction;

  std::vector<int32_t> context(bool edited) const {
    std::vector<int32_t> all;
    for (int i = 0; i < 5; ++i) {
      const std::vector<int32_t> &part =
          i == 1 && edited ? newFact : segments[i];
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }
};

bool encodeStory(const kvrt_tokenizer *tokenizer, const Story &story,
                 StoryTokens &out, std::string &error) {
  // BOS before the intro; every segment with the tokenizer's leading space.
  for (int i = 0; i < 5; ++i)
    if (kvir::encode(tokenizer, story.segments[i], /*bos=*/i == 0,
                     /*eos=*/false, out.segments[i])) {
      error = "story " + story.name + ": " + kvrt_last_error();
      return false;
    }
  if (kvir::encode(tokenizer, story.newFact, false, false, out.newFact) ||
      kvir::encode(tokenizer, story.correction, false, false, out.correction)) {
    error = "story " + story.name + ": " + kvrt_last_error();
    return false;
  }
  return true;
}

/// A full prefill of `tokens` and its greedy continuation; the answer rows
/// are the last `rows`.
struct FullRun {
  Logits logits;
  std::vector<int32_t> continuation;
};

bool runFull(ComputeBackend &backend, const Forward &forward,
             const kvrt_model *model, kvrt_pool *pool,
             const std::vector<int32_t> &tokens, int64_t rows, int64_t greedy,
             FullRun &out, std::string &error) {
  WorkStats work;
  if (!fullPrefill(backend, forward, model, pool, tokens, rows, out.logits,
                   work, error))
    return false;
  return greedyContinue(backend, forward, model, out.logits, out.logits.result,
                        greedy, out.continuation, error);
}

/// Attribution by KV patching of the story's edit (docs/kv-run.md): the old
/// context prefilled segment by segment with its labels, then
/// exec::attribute. recovered(S) for intro, fact, world and thought, or the
/// reason in `why`.
bool attributeStory(ComputeBackend &backend, const Forward &forward,
                    const kvrt_model *model, kvrt_pool *pool,
                    const StoryTokens &t, std::vector<double> &recovered,
                    std::string &why) {
  kvrt_view *empty = nullptr;
  if (kvrt_view_create(pool, &empty)) {
    why = kvrt_last_error();
    return false;
  }
  ViewRef cache = adoptView(empty);
  int64_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    kvrt_view *next = nullptr;
    std::vector<float> logits;
    if (backend.prefill(forward, model, cache.get(), t.segments[i].data(),
                        int64_t(t.segments[i].size()), pos, kSegmentNames[i],
                        kvir::LogitRows::last(), &logits, &next)) {
      why = kvrt_last_error();
      return false;
    }
    cache = adoptView(next);
    pos += int64_t(t.segments[i].size());
  }
  AttributionRequest request;
  request.oldCache = cache;
  request.edited = "fact";
  request.newTokens = t.newFact;
  request.answer = "answer";
  Attribution attribution;
  if (!attribute(backend, forward, model, pool, request, attribution, why))
    return false;
  recovered.clear();
  for (const SegmentAttribution &row : attribution.segments)
    recovered.push_back(row.recovered);
  return true;
}

std::string decoded(const kvrt_tokenizer *tokenizer,
                    const std::vector<int32_t> &tokens) {
  std::string text;
  if (kvir::decode(tokenizer, tokens, text))
    return "<" + std::string(kvrt_last_error()) + ">";
  return text;
}

} // namespace

bool kvir::stories::runSuite(const SuiteOptions &options, SuiteResult &out,
                             std::string &error) {
  std::string text;
  if (!readFile(options.storiesPath, text, error, "story file"))
    return false;
  if (!parseStories(text, out.stories, error)) {
    error = options.storiesPath + ": " + error;
    return false;
  }
  out.strategies = options.strategies;
  out.greedy = options.greedy;
  if (options.greedy <= 0) {
    error = "--greedy must be positive";
    return false;
  }

  kvrt_model *rawModel = nullptr;
  if (kvrt_model_load(options.modelPath.c_str(), &rawModel)) {
    error = kvrt_last_error();
    return false;
  }
  ModelPtr model(rawModel, kvrt_model_release);
  kvrt_model_config config;
  kvrt_model_get_config(model.get(), &config);
  out.model = options.modelPath;
  // --tokenizer, else tok<vocab>.bin beside the model, as kv-run does.
  TextOptions textOptions;
  textOptions.tokenizer = options.tokenizerPath;
  TokenizerRef tokenizer;
  std::string tokenizerPath;
  if (!findTokenizer(textOptions, options.modelPath, config.vocab_size,
                     tokenizer, tokenizerPath, error))
    return false;
  if (!tokenizer) {
    error = "no tokenizer: give --tokenizer FILE (none lies beside " +
            options.modelPath + ")";
    return false;
  }
  std::unique_ptr<ComputeBackend> backend =
      createBackend(options.backend, model.get(), error);
  if (!backend)
    return false;
  out.backend = backend->name();
  kvrt_pool_config poolConfig;
  kvrt_pool_config_for_model(model.get(), &poolConfig);
  poolConfig.capacity_pages = 4096;
  kvrt_pool *rawPool = nullptr;
  if (kvrt_pool_create(&poolConfig, &rawPool)) {
    error = kvrt_last_error();
    return false;
  }
  PoolPtr pool(rawPool, kvrt_pool_release);

  std::vector<StoryTokens> tokens(out.stories.size());
  for (size_t i = 0; i < out.stories.size(); ++i)
    if (!encodeStory(tokenizer.get(), out.stories[i], tokens[i], error))
      return false;

  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  bench::ProgramContext context(diagnosticStream);
  compiler::LowerOptions lower = bench::lowerOptions(
      config, options.backend == "cuda" ? compiler::Target::Gpu
                                        : compiler::Target::Cpu);

  // The references: full prefills of the old and the edited contexts, with
  // the forward of the first strategy's module.
  out.rows.assign(out.strategies.size(), {});
  std::vector<FullRun> edited(out.stories.size());
  for (size_t k = 0; k < out.strategies.size(); ++k) {
    const StrategySpec &strategy = out.strategies[k];
    mlir::OwningOpRef<mlir::ModuleOp> planned = compiler::parseProgram(
        context.get(), strategy.compose ? composeProgram(config, strategy)
                                        : storyProgram(config, strategy));
    if (!planned) {
      error = "the program of strategy '" + strategy.label() +
              "' does not compile:\n" + diagnostics;
      return false;
    }
    auto compiled = compiler::compileProgram(std::move(planned), "main", lower);
    if (mlir::failed(compiled)) {
      error = "the program of strategy '" + strategy.label() +
              "' does not compile:\n" + diagnostics;
      return false;
    }
    for (size_t i = 0; i < out.stories.size(); ++i) {
      const Story &story = out.stories[i];
      const StoryTokens &t = tokens[i];
      int64_t answerRows = int64_t(t.segments[4].size());
      if (k == 0) {
        FullRun old;
        if (!runFull(*backend, compiled->forward, model.get(), pool.get(),
                     t.context(false), answerRows, options.greedy, old,
                     error) ||
            !runFull(*backend, compiled->forward, model.get(), pool.get(),
                     t.context(true), answerRows, options.greedy, edited[i],
                     error))
          return false;
        out.oldContinuation.push_back(
            decoded(tokenizer.get(), old.continuation));
        out.newContinuation.push_back(
            decoded(tokenizer.get(), edited[i].continuation));
        out.oldNamesNew.push_back(
            namesEntity(out.oldContinuation.back(), story.newEntity));
        out.newNamesNew.push_back(
            namesEntity(out.newContinuation.back(), story.newEntity));
        std::vector<double> recovered;
        std::string why;
        if (!attributeStory(*backend, compiled->forward, model.get(),
                            pool.get(), t, recovered, why))
          recovered.clear();
        out.recovered.push_back(recovered);
        out.attributionError.push_back(why);
      }
      InputOptions inputs;
      if (strategy.compose) {
        // The body never saw the intro: no BOS, prefilled from position 0.
        std::vector<int32_t> body = t.newFact;
        body.insert(body.end(), t.segments[2].begin(), t.segments[2].end());
        body.insert(body.end(), t.segments[3].begin(), t.segments[3].end());
        inputs.given["intro"] = {idsText(t.segments[0]), story.name + " intro"};
        inputs.given["body"] = {idsText(body), story.name + " body"};
        inputs.given["answer"] = {idsText(t.segments[4]),
                                  story.name + " answer"};
      } else {
        for (int s = 0; s < 5; ++s)
          inputs.given[kSegmentNames[s]] = {
              idsText(t.segments[s]), story.name + " @" + kSegmentNames[s]};
        inputs.given["new"] = {idsText(t.newFact), story.name + " new fact"};
        if (compiled->manifest.args.size() == 8)
          inputs.given["fix"] = {idsText(t.correction),
                                 story.name + " correction"};
      }
      std::vector<Value> args;
      if (!bindArguments(compiled->manifest, config, inputs, args, nullptr,
                         error))
        return false;
      RunOutcome outcome = runEntry(compiled->entry, compiled->manifest,
                                    *backend, model.get(), pool.get(), args);
      if (outcome.failed) {
        error = "story " + story.name + ", strategy '" + strategy.label() +
                "': " + outcome.message;
        return false;
      }
      const Logits &answer = *outcome.results[0].logits;
      StoryRow row;
      row.story = story.name;
      row.strategy = strategy.label();
      row.recomputed = outcome.plan.prefillTokens;
      row.contextTokens = int64_t(t.context(true).size());
      if (answer.rows != answerRows) {
        error = "story " + story.name + ": the answer has " +
                std::to_string(answer.rows) + " rows, expected " +
                std::to_string(answerRows);
        return false;
      }
      row.klMean =
          compareLogits(answer.data.data(), edited[i].logits.data.data(),
                        answer.rows, answer.vocab)
              .klMean;
      std::vector<int32_t> continuation;
      if (!greedyContinue(*backend, compiled->forward, model.get(), answer,
                          answer.result, options.greedy, continuation, error))
        return false;
      while (row.greedyAgree < options.greedy &&
             continuation[row.greedyAgree] ==
                 edited[i].continuation[row.greedyAgree])
        ++row.greedyAgree;
      row.continuation = decoded(tokenizer.get(), continuation);
      row.namesNew = namesEntity(row.continuation, story.newEntity);
      out.rows[k].push_back(row);
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

namespace {

/// The text on one line: newlines and other controls escaped.
std::string oneLine(const std::string &text) {
  std::string s;
  for (char c : text) {
    if (c == '\n')
      s += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20)
      s += llvm::formatv("\\x{0:x2}", int(c)).str();
    else
      s += c;
  }
  return s;
}

} // namespace

void kvir::stories::printSuite(const SuiteResult &r, llvm::raw_ostream &os,
                               bool details) {
  size_t n = r.stories.size();
  int64_t differ = 0, newNamed = 0, oldNamed = 0;
  for (size_t i = 0; i < n; ++i) {
    differ += r.oldContinuation[i] != r.newContinuation[i];
    newNamed += r.newNamesNew[i];
    oldNamed += r.oldNamesNew[i];
  }
  os << "model: " << r.model << ", backend " << r.backend << ", " << n
     << " stories, greedy " << r.greedy << " tokens\n";
  os << "full prefill of the edited context: names the new entity in "
     << newNamed << "/" << n << "; continues differently from the old "
     << "context in " << differ << "/" << n << " (old context names it in "
     << oldNamed << "/" << n << ")\n\n";
  os << llvm::format("%-52s %10s %9s %10s %10s\n", "strategy", "recomputed",
                     "KL mean", "agree", "names new");
  for (size_t k = 0; k < r.strategies.size(); ++k) {
    const std::vector<StoryRow> &rows = r.rows[k];
    double recomputed = 0, context = 0, kl = 0, agree = 0;
    int64_t named = 0;
    for (const StoryRow &row : rows) {
      recomputed += double(row.recomputed);
      context += double(row.contextTokens);
      kl += row.klMean;
      agree += double(row.greedyAgree);
      named += row.namesNew;
    }
    double m = rows.empty() ? 1 : double(rows.size());
    os << llvm::format("%-52s %4.1f (%2.0f%%) %9.3g %5.1f/%-4lld %6lld/%lld\n",
                       r.strategies[k].label().c_str(), recomputed / m,
                       100 * recomputed / context, kl / m, agree / m,
                       (long long)r.greedy, (long long)named,
                       (long long)rows.size());
  }
  // The deviation guard's criterion (docs/fidelity.md): a plan whose
  // thought's dependency was left out, with deviation repair, reaches the
  // correctly declared cot_slice plan's greedy agreement within 2 tokens.
  auto meanAgree = [&](size_t k) {
    double sum = 0;
    for (const StoryRow &row : r.rows[k])
      sum += double(row.greedyAgree);
    return r.rows[k].empty() ? 0.0 : sum / double(r.rows[k].size());
  };
  for (size_t d = 0; d < r.strategies.size(); ++d) {
    if (r.strategies[d].strategy != "cot_slice" || r.strategies[d].misdeclared)
      continue;
    for (size_t k = 0; k < r.strategies.size(); ++k) {
      const StrategySpec &g = r.strategies[k];
      if (!g.misdeclared || g.strategy.find("deviation") == std::string::npos)
        continue;
      double gap = meanAgree(d) - meanAgree(k);
      os << llvm::format("guard: %-52s %4.1f tokens of agreement below the "
                         "declared plan: %s\n",
                         g.label().c_str(), gap,
                         gap <= 2.0 ? "within 2, met" : "not met");
    }
  }
  os << "\nrecomputed: tokens prefilled by the plan, mean per story (share "
        "of the edited context); KL mean: KL(full || plan) at the answer "
        "rows, mean over rows and stories; agree: greedy tokens equal to the "
        "full prefill's before the first divergence, mean; names new: "
        "stories whose continuation names the new entity.\n";
  // Attribution: per segment before the answer, the mean, min and max of
  // recovered(S) over the stories it could be computed for.
  os << "\nattribution by KV patching (recovered: 1 - |z_S - z_new| / "
        "|z_old - z_new|, docs/kv-run.md), over the stories:\n";
  os << llvm::format("  %-10s %8s %8s %8s\n", "segment", "mean", "min", "max");
  for (int s = 0; s < 4; ++s) {
    double sum = 0, lo = 1e300, hi = -1e300;
    int64_t count = 0;
    for (const std::vector<double> &row : r.recovered) {
      if (row.size() != 4)
        continue;
      sum += row[s];
      lo = std::min(lo, row[s]);
      hi = std::max(hi, row[s]);
      ++count;
    }
    if (count)
      os << llvm::format("  %-10s %8.3f %8.3f %8.3f\n", kSegmentNames[s],
                         sum / double(count), lo, hi);
  }
  for (size_t i = 0; i < n; ++i)
    if (!r.attributionError[i].empty())
      os << "  (" << r.stories[i].name
         << ": no attribution: " << r.attributionError[i] << ")\n";
  if (!details)
    return;
  for (size_t i = 0; i < n; ++i) {
    const Story &s = r.stories[i];
    os << "\n== " << s.name << ": '" << s.segments[1] << "' -> '" << s.newFact
       << "' (new entity '" << s.newEntity << "')\n";
    os << llvm::format("  %-42s \"%s\"\n", "old context, full prefill",
                       oneLine(r.oldContinuation[i]).c_str());
    os << llvm::format("  %-42s \"%s\"\n", "edited context, full prefill",
                       oneLine(r.newContinuation[i]).c_str());
    if (r.recovered[i].size() == 4)
      os << llvm::format("  %-42s intro %.3f, fact %.3f, world %.3f, "
                         "thought %.3f\n",
                         "attribution (recovered)", r.recovered[i][0],
                         r.recovered[i][1], r.recovered[i][2],
                         r.recovered[i][3]);
    for (size_t k = 0; k < r.strategies.size(); ++k) {
      const StoryRow &row = r.rows[k][i];
      os << llvm::format(
          "  %-42s \"%s\"  (%lld tokens, KL %.3g, agree %lld)\n",
          row.strategy.c_str(), oneLine(row.continuation).c_str(),
          (long long)row.recomputed, row.klMean, (long long)row.greedyAgree);
    }
  }
}
