//===- ProgramTest.cpp - Compiled kv programs vs the oracle -----*- C++ -*-===//
//
// Compiles the examples the way kv-run does (kv-optimize, kv-lower-to-cpu,
// the JIT), runs their entry over the reference backend and checks the
// answers against the same computation done by hand with kvrt view ops and
// the oracle; and runs them on the generated CPU forward against that.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Attribution.h"
#include "driver/compiler/Compiler.h"

#include "runtime/core/Quant.h"
#include "runtime/core/WeightFormat.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/exec/Session.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

using namespace kvir::test;
using namespace kvir::exec;

using Inputs = std::map<std::string, std::vector<int32_t>>;

namespace {

std::string readSource(const std::string &relative) {
  std::ifstream in(std::string(KVIR_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> tokensOf(uint64_t seed, int64_t n) {
  std::vector<int32_t> t(n);
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t[i] = int32_t((s >> 33) % 512);
  }
  return t;
}

/// A model of the examples' shape: stories260K when present, else the
/// built-in synthetic one.
ModelPtr examplesModel() {
  if (haveTestModel())
    return loadModel(testModelPath());
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  return syntheticModel(c, 1);
}

struct Harness {
  ModelPtr model = examplesModel();
  kvrt_model_config config = configOf(model.get());
  PoolPtr pool = poolFor(model.get(), 4096, 16);
  std::unique_ptr<kvir::ComputeBackend> backend =
      kvir::createReferenceBackend();
  mlir::MLIRContext context;
  std::string diagnostics;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;
  RunOutcome outcome;

  Harness() : context(registry()) {
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
  }
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    kvir::compiler::registerDialects(r);
    return r;
  }
  static kvrt_model_config configOf(const kvrt_model *m) {
    kvrt_model_config c;
    kvrt_model_get_config(m, &c);
    return c;
  }

  /// Compiles `text`'s @main; nothing on a diagnostic.
  mlir::FailureOr<kvir::compiler::CompiledProgram>
  compile(const std::string &text) {
    mlir::OwningOpRef<mlir::ModuleOp> planned =
        kvir::compiler::parseProgram(context, text);
    if (!planned)
      return mlir::failure();
    kvir::compiler::LowerOptions options;
    options.exportModel = config;
    return kvir::compiler::compileProgram(std::move(planned), "main", options);
  }

  /// Runs `text`'s @main with `inputs` (by name) on `on` (the reference
  /// backend by default); returns the results.
  std::vector<Value> run(const std::string &text, const Inputs &inputs,
                         kvir::ComputeBackend *on = nullptr) {
    return execute(compile(text), inputs, on);
  }

  /// Runs the @main of the planned module `planned` the same way.
  std::vector<Value> runPlanned(mlir::OwningOpRef<mlir::ModuleOp> planned,
                                const Inputs &inputs) {
    kvir::compiler::LowerOptions options;
    options.exportModel = config;
    return execute(
        kvir::compiler::compileProgram(std::move(planned), "main", options),
        inputs, nullptr);
  }

  std::vector<Value>
  execute(mlir::FailureOr<kvir::compiler::CompiledProgram> program,
          const Inputs &inputs, kvir::ComputeBackend *on) {
    EXPECT_TRUE(mlir::succeeded(program)) << diagnostics;
    if (mlir::failed(program))
      return {};
    InputOptions options;
    for (const auto &[name, tokens] : inputs) {
      std::string text;
      for (int32_t t : tokens)
        text += std::to_string(t) + " ";
      options.given[name] = {text, name};
    }
    std::vector<Value> args;
    std::string error;
    EXPECT_TRUE(
        bindArguments(program->manifest, config, options, args, nullptr, error))
        << error;
    outcome = runEntry(program->entry, program->manifest, on ? *on : *backend,
                       model.get(), pool.get(), args);
    EXPECT_FALSE(outcome.failed) << outcome.message;
    return outcome.results;
  }

  ViewPtr prefill(const kvrt_view *view, const std::vector<int32_t> &tokens,
                  int64_t pos, std::vector<float> *logits = nullptr) {
    std::vector<float> scratch;
    kvrt_view *out = nullptr;
    EXPECT_EQ(kvir::reference::prefill(model.get(), view, tokens.data(),
                                       tokens.size(), pos, nullptr,
                                       logits ? logits : &scratch, &out),
              KVRT_OK)
        << kvrt_last_error();
    return ViewPtr(out);
  }
  ViewPtr concat(const kvrt_view *a, const kvrt_view *b) {
    kvrt_view *out = nullptr;
    EXPECT_EQ(kvrt_view_concat(a, b, &out), KVRT_OK);
    return ViewPtr(out);
  }
  ViewPtr shift(const kvrt_view *v, int64_t delta) {
    kvrt_view *out = nullptr;
    EXPECT_EQ(kvrt_view_shift(v, delta, &out), KVRT_OK);
    return ViewPtr(out);
  }
};

/// The agent-edit inputs: the segment sizes of the example, a 12-token city
/// replaced by a 16-token one (so @tools moves by 4).
Inputs agentInputs() {
  Inputs in;
  in["system"] = tokensOf(1, 48);
  in["history"] = tokensOf(2, 200);
  in["city"] = tokensOf(3, 12);
  in["tools"] = tokensOf(4, 120);
  in["think1"] = tokensOf(5, 32);
  in["think2"] = tokensOf(6, 32);
  in["answer"] = tokensOf(7, 8);
  in["arg8"] = tokensOf(8, 16);
  return in;
}

std::string withStrategy(std::string text, const std::string &strategy) {
  const std::string from = "strategy <cot_slice>";
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, from.size(), "strategy <" + strategy + ">");
}

// `exact` recomputes @city and everything after it: the answer equals a full
// prefill of the edited context. Tolerance 1e-5: same kernels and positions;
// only the grouping of runs in the online-softmax merge differs (double
// accumulation, so the float results differ by at most an ulp or two).
TEST(ProgramTest, ExactEditEqualsFullPrefill) {
  Harness h;
  auto inputs = agentInputs();
  auto results = h.run(
      withStrategy(readSource("examples/agent-edit.mlir"), "exact"), inputs);
  ASSERT_EQ(results.size(), 1u);
  const kvir::exec::Logits &answer = *results[0].logits;
  ASSERT_EQ(answer.rows, 8);

  std::vector<int32_t> final;
  for (const char *name :
       {"system", "history", "arg8", "tools", "think1", "think2", "answer"})
    final.insert(final.end(), inputs[name].begin(), inputs[name].end());
  ASSERT_EQ(viewTokens(answer.context.get()).size() + 8, final.size());
  std::vector<float> full;
  h.prefill(emptyView(h.pool.get()).get(), final, 0, &full);
  const float *tail = full.data() + (final.size() - 8) * 512;
  EXPECT_LT(maxAbsDiff(answer.data.data(), tail, 8 * 512), 1e-5);
  // Plan: new @city, @tools, @think1, @think2, @answer.
  EXPECT_EQ(h.outcome.plan.prefillTokens, 16 + 120 + 32 + 32 + 8);
  EXPECT_EQ(h.outcome.setup.prefillTokens, 452);
}

// cot_slice equals the plan done by hand: keep @system/@history, prefill the
// new city, reuse @tools shifted by +4, recompute the thoughts and answer.
TEST(ProgramTest, CotSliceEqualsHandPlan) {
  Harness h;
  auto in = agentInputs();
  auto results = h.run(readSource("examples/agent-edit.mlir"), in);
  ASSERT_EQ(results.size(), 1u);
  const kvir::exec::Logits &answer = *results[0].logits;

  ViewPtr empty = emptyView(h.pool.get());
  ViewPtr prefix = h.prefill(empty.get(), in["system"], 0);
  prefix = h.prefill(prefix.get(), in["history"], 48);
  // The original @tools was prefilled after the 12-token city, at 260.
  ViewPtr old = h.prefill(prefix.get(), in["city"], 248);
  ViewPtr withTools = h.prefill(old.get(), in["tools"], 260);
  kvrt_view *toolsRaw = nullptr;
  ASSERT_EQ(kvrt_view_slice(withTools.get(), 260, 380, &toolsRaw), KVRT_OK);
  ViewPtr tools(toolsRaw);
  ViewPtr view = h.prefill(prefix.get(), in["arg8"], 248);
  view = h.concat(view.get(), h.shift(tools.get(), 4).get());
  view = h.prefill(view.get(), in["think1"], 384);
  view = h.prefill(view.get(), in["think2"], 416);
  std::vector<float> expected;
  h.prefill(view.get(), in["answer"], 448, &expected);
  ASSERT_EQ(answer.data.size(), expected.size());
  EXPECT_LT(maxAbsDiff(answer.data.data(), expected.data(), expected.size()),
            1e-4);
  EXPECT_EQ(h.outcome.plan.prefillTokens, 16 + 32 + 32 + 8);
}

// compose equals the plan by hand: blocks prefilled at 0, appended shifted
// after the system prompt, the question prefilled over all of it.
TEST(ProgramTest, ComposeEqualsHandPlan) {
  Harness h;
  Inputs in;
  in["system"] = tokensOf(11, 64);
  in["search"] = tokensOf(12, 40);
  in["calendar"] = tokensOf(13, 33);
  in["email"] = tokensOf(14, 50);
  in["question"] = tokensOf(15, 24);
  auto results = h.run(readSource("examples/compose-skills.mlir"), in);
  ASSERT_EQ(results.size(), 1u);
  const kvir::exec::Logits &answer = *results[0].logits;
  ASSERT_EQ(answer.rows, 24);

  ViewPtr empty = emptyView(h.pool.get());
  ViewPtr view = h.prefill(empty.get(), in["system"], 0);
  int64_t at = 64;
  for (const char *skill : {"search", "calendar", "email"}) {
    ViewPtr block = h.prefill(empty.get(), in[skill], 0);
    view = h.concat(view.get(), h.shift(block.get(), at).get());
    at += in[skill].size();
  }
  std::vector<float> expected;
  h.prefill(view.get(), in["question"], at, &expected);
  ASSERT_EQ(answer.data.size(), expected.size());
  EXPECT_LT(maxAbsDiff(answer.data.data(), expected.data(), expected.size()),
            1e-4);
  EXPECT_EQ(h.outcome.plan.prefillTokens, 24);
  EXPECT_EQ(h.outcome.setup.prefillTokens, 64 + 40 + 33 + 50);
}

// A fraction repair runs the selective recompute on the reused @tools.
TEST(ProgramTest, FractionRepairRecomputesItsShare) {
  Harness h;
  auto results = h.run(withStrategy(readSource("examples/agent-edit.mlir"),
                                    "cot_slice, fraction = 0.15"),
                       agentInputs());
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(h.outcome.repairs.size(), 1u);
  EXPECT_EQ(h.outcome.repairs[0].mode, KVRT_EXEC_REPAIR_FRACTION);
  EXPECT_EQ(h.outcome.repairs[0].amount, 0.15);
  EXPECT_EQ(h.outcome.repairs[0].candidates, 120);
  EXPECT_EQ(h.outcome.repairs[0].chosen, 18);
  EXPECT_EQ(h.outcome.plan.prefillTokens, 16 + 18 + 32 + 32 + 8);
  EXPECT_EQ(h.outcome.plan.scanTokens, 120);
}

/// The entry `entry` of test/Integration/CPU/Inputs/strategies.mlir as @main.
std::string strategiesProgram(const std::string &entry) {
  std::string text = readSource("test/Integration/CPU/Inputs/strategies.mlir");
  std::string from = "func.func @" + entry + "(";
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, from.size(), "func.func @main(");
}

/// agentInputs() by the names strategies.mlir gives them, with a 10-token
/// correction.
Inputs strategyInputs() {
  Inputs in = agentInputs();
  in["new_city"] = in["arg8"];
  in.erase("arg8");
  in["correction"] = tokensOf(9, 10);
  return in;
}

// erratum equals the plan by hand: the original context up to @answer as it
// is (the old 12-token city), the correction prefilled after @think2 at 444,
// the answer after it at 454. The new city is not used.
TEST(ProgramTest, ErratumEqualsHandPlan) {
  Harness h;
  Inputs in = strategyInputs();
  auto results = h.run(strategiesProgram("erratum"), in);
  ASSERT_EQ(results.size(), 1u);
  const kvir::exec::Logits &answer = *results[0].logits;
  ASSERT_EQ(answer.rows, 8);

  ViewPtr view = emptyView(h.pool.get());
  int64_t at = 0;
  for (const char *name :
       {"system", "history", "city", "tools", "think1", "think2"}) {
    view = h.prefill(view.get(), in[name], at);
    at += in[name].size();
  }
  ASSERT_EQ(at, 444);
  view = h.prefill(view.get(), in["correction"], 444);
  std::vector<float> expected;
  h.prefill(view.get(), in["answer"], 454, &expected);
  ASSERT_EQ(answer.data.size(), expected.size());
  EXPECT_LT(maxAbsDiff(answer.data.data(), expected.data(), expected.size()),
            1e-5);
  EXPECT_EQ(answer.position, 454);
  // Plan: the correction and the answer only.
  EXPECT_EQ(h.outcome.plan.prefillTokens, 10 + 8);
  EXPECT_EQ(h.outcome.setup.prefillTokens, 452);

  // The answer attended the old context and the correction, labelled.
  std::vector<std::string> labels;
  std::vector<int64_t> sizes;
  for (int64_t r = 0; r < kvrt_view_num_runs(answer.context.get()); ++r) {
    kvrt_run run;
    ASSERT_EQ(kvrt_view_get_run(answer.context.get(), r, &run), KVRT_OK);
    labels.push_back(run.label ? run.label : "");
    sizes.push_back(run.n_tokens);
  }
  EXPECT_EQ(labels,
            (std::vector<std::string>{"system", "history", "city", "tools",
                                      "think1", "think2", "city.erratum"}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{48, 200, 12, 120, 32, 32, 10}));
}

// The exact reference of an erratum program is the same program with the
// erratum planned exact: its answer is computed in the edited context (456
// tokens, the new city in place of the old), equal to the exact strategy's.
TEST(ProgramTest, ErratumReferenceIsTheEditedContext) {
  Harness h;
  Inputs in = strategyInputs();
  mlir::OwningOpRef<mlir::ModuleOp> parsed =
      mlir::parseSourceString<mlir::ModuleOp>(strategiesProgram("erratum"),
                                              &h.context);
  ASSERT_TRUE(parsed) << h.diagnostics;
  mlir::OwningOpRef<mlir::ModuleOp> reference =
      kvir::compiler::exactReferenceOf(*parsed);
  ASSERT_TRUE(reference);
  ASSERT_TRUE(mlir::succeeded(kvir::compiler::planProgram(*reference)))
      << h.diagnostics;
  auto results = h.runPlanned(std::move(reference), in);
  ASSERT_EQ(results.size(), 1u);
  const kvir::exec::Logits &answer = *results[0].logits;

  std::vector<int32_t> edited;
  for (const char *name :
       {"system", "history", "new_city", "tools", "think1", "think2"})
    edited.insert(edited.end(), in[name].begin(), in[name].end());
  EXPECT_EQ(viewTokens(answer.context.get()), edited);
  EXPECT_EQ(answer.tokens, in["answer"]);

  // The same as writing the edit exact by hand.
  std::string exact = strategiesProgram("erratum");
  for (auto [from, to] :
       {std::pair<std::string, std::string>{
            "strategy <erratum> correction(%fix)", "strategy <exact>"},
        {": !model, !cache, tensor<?xi32>, tensor<?xi32>",
         ": !model, !cache, tensor<?xi32>"}}) {
    size_t at = exact.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    exact.replace(at, from.size(), to);
  }
  auto byHand = h.run(exact, in);
  ASSERT_EQ(byHand.size(), 1u);
  EXPECT_EQ(byHand[0].logits->data, answer.data);

  // A program without an erratum has no exact reference.
  mlir::OwningOpRef<mlir::ModuleOp> plain =
      mlir::parseSourceString<mlir::ModuleOp>(
          readSource("examples/agent-edit.mlir"), &h.context);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(kvir::compiler::exactReferenceOf(*plain));
}

// A deviation repair of the reused @tools: the record says what it did, and
// the plan prefills the chosen tokens on top of cot_slice's 88. A threshold
// above every deviation chooses none and gives cot_slice's answer.
TEST(ProgramTest, DeviationRepairRecordsItsSelection) {
  Harness h;
  Inputs in = strategyInputs();
  in.erase("correction");
  auto results = h.run(strategiesProgram("deviation"), in);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(h.outcome.repairs.size(), 1u);
  kvrt_exec_repair repair = h.outcome.repairs[0];
  EXPECT_EQ(repair.mode, KVRT_EXEC_REPAIR_DEVIATION);
  EXPECT_EQ(repair.amount, 0.05);
  EXPECT_EQ(repair.candidates, 120);
  EXPECT_EQ(repair.scanned, 120);
  EXPECT_GT(repair.max_relative_deviation, 0.0);
  EXPECT_GE(repair.max_relative_deviation, repair.mean_relative_deviation);
  EXPECT_EQ(h.outcome.plan.prefillTokens, 88 + repair.chosen);
  EXPECT_EQ(h.outcome.plan.scanTokens, 120);

  std::string none = strategiesProgram("deviation");
  const std::string from = "deviation = 0.05";
  size_t at = none.find(from);
  ASSERT_NE(at, std::string::npos);
  none.replace(at, from.size(), "deviation = 1.0e+30");
  auto unrepaired = h.run(none, in);
  ASSERT_EQ(unrepaired.size(), 1u);
  ASSERT_EQ(h.outcome.repairs.size(), 1u);
  EXPECT_EQ(h.outcome.repairs[0].chosen, 0);
  EXPECT_EQ(h.outcome.repairs[0].scanned, 120);
  EXPECT_EQ(h.outcome.plan.prefillTokens, 88);

  Inputs agent = agentInputs();
  auto cotSlice = h.run(readSource("examples/agent-edit.mlir"), agent);
  ASSERT_EQ(cotSlice.size(), 1u);
  EXPECT_EQ(cotSlice[0].logits->data, unrepaired[0].logits->data);
}

// The generated CPU forward gives the oracle's answer for the same plan.
TEST(ProgramTest, GeneratedForwardMatchesTheOracle) {
  Harness h;
  std::string text = readSource("examples/agent-edit.mlir");
  auto reference = h.run(text, agentInputs());
  std::unique_ptr<kvir::ComputeBackend> cpu = kvir::cpu::createCpuBackend();
  auto generated = h.run(text, agentInputs(), cpu.get());
  ASSERT_EQ(reference.size(), 1u);
  ASSERT_EQ(generated.size(), 1u);
  const kvir::exec::Logits &a = *reference[0].logits, &b = *generated[0].logits;
  ASSERT_EQ(a.data.size(), b.data.size());
  EXPECT_LT(maxAbsDiff(a.data.data(), b.data.data(), a.data.size()), 1e-4);
}

// Bad inputs and entries are diagnostics naming the problem.
TEST(ProgramTest, DiagnosticsNameTheProblem) {
  Harness h;
  auto program = h.compile(readSource("examples/agent-edit.mlir"));
  ASSERT_TRUE(mlir::succeeded(program)) << h.diagnostics;
  Inputs in = agentInputs();
  in["arg8"] = {600};
  InputOptions options;
  for (const auto &[name, tokens] : in) {
    std::string text;
    for (int32_t t : tokens)
      text += std::to_string(t) + " ";
    options.given[name] = {text, name};
  }
  std::vector<Value> args;
  std::string error;
  EXPECT_FALSE(bindArguments(program->manifest, h.config, options, args,
                             nullptr, error));
  EXPECT_NE(error.find("token 600 at index 0"), std::string::npos) << error;
  mlir::OwningOpRef<mlir::ModuleOp> planned = kvir::compiler::parseProgram(
      h.context, readSource("examples/agent-edit.mlir"));
  ASSERT_TRUE(planned);
  EXPECT_TRUE(mlir::failed(kvir::compiler::lookupEntry(*planned, "nope")));
  EXPECT_NE(h.diagnostics.find("no public function @nope"), std::string::npos)
      << h.diagnostics;
}

// The manifest round-trips through its text form.
TEST(ProgramTest, ManifestRoundTrips) {
  Harness h;
  auto program = h.compile(readSource("examples/agent-edit.mlir"));
  ASSERT_TRUE(mlir::succeeded(program)) << h.diagnostics;
  EntryManifest parsed;
  std::string error;
  ASSERT_TRUE(
      EntryManifest::parse(program->manifest.serialize(), parsed, error))
      << error;
  EXPECT_EQ(parsed.serialize(), program->manifest.serialize());
  EXPECT_EQ(parsed.args.size(), 9u);
  EXPECT_EQ(parsed.args[0].kind, ValueKind::Model);
  EXPECT_EQ(parsed.args[3].name, "city");
  EXPECT_FALSE(parsed.sites.empty());
  std::string truncated = program->manifest.serialize();
  truncated.resize(truncated.size() / 2);
  EXPECT_FALSE(EntryManifest::parse(truncated, parsed, error));
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

// A model argument's RoPE variants and Q/K/V biases round-trip, each word
// where present.
TEST(ProgramTest, ManifestModelVariantsRoundTrip) {
  for (int variant = 0; variant < 4; ++variant) {
    EntryManifest m;
    m.entry = "main";
    ArgSpec a;
    a.kind = ValueKind::Model;
    a.name = "arg0";
    kvrt_model_config &c = a.model;
    kvrt_model_config_init(&c);
    c.seq_len = 0;
    c.rope_layout = KVRT_ROPE_HALF;
    c.qkv_bias = variant & 1;
    if (variant & 2) {
      c.rope_dim = 4;
      c.n_rope_freq_factors = 2;
      c.rope_freq_factors[0] = 1.0f;
      c.rope_freq_factors[1] = 8.0f;
    }
    m.args.push_back(a);
    EntryManifest parsed;
    std::string error;
    ASSERT_TRUE(EntryManifest::parse(m.serialize(), parsed, error)) << error;
    EXPECT_EQ(parsed.serialize(), m.serialize());
    EXPECT_EQ(parsed.args[0].model.qkv_bias, c.qkv_bias) << variant;
    EXPECT_EQ(parsed.args[0].model.n_rope_freq_factors, c.n_rope_freq_factors);
    EXPECT_EQ(m.serialize().find("qkv-bias") != std::string::npos,
              c.qkv_bias == 1);
  }
}

// --attribute's auxiliary entry returns the operands of the story's edit
// (the old cache, labelled by segment, and the new tokens), and the
// attribution over them agrees with the program: cot_slice's answer is z_S
// of the edited segment (the new hero, the notes reused shifted, the answer
// recomputed), so its distance to a full prefill is that row's.
TEST(ProgramTest, AttributionEntryReturnsTheEditsOperands) {
  Harness h;
  std::optional<kvir::compiler::AttributionEntry> spec;
  mlir::OwningOpRef<mlir::ModuleOp> planned = kvir::compiler::parseProgram(
      h.context, readSource("examples/story-edit.mlir"),
      [&](mlir::ModuleOp module) {
        auto entry = kvir::compiler::addAttributionEntry(module, "main");
        if (mlir::failed(entry))
          return mlir::failure();
        spec = *entry;
        return mlir::success();
      });
  ASSERT_TRUE(planned) << h.diagnostics;
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->entry, "__kv_attribution_main");
  EXPECT_EQ(spec->edited, "hero");
  EXPECT_EQ(spec->answer, "answer");
  EXPECT_EQ(spec->answerResult, 0u);
  ASSERT_EQ(spec->segments.size(), 4u);
  EXPECT_EQ(spec->segments[1].name, "hero");
  EXPECT_EQ(spec->segments[1].kind, "fact");
  kvir::compiler::LowerOptions options;
  options.exportModel = h.config;
  auto program =
      kvir::compiler::compileProgram(std::move(planned), "main", options);
  ASSERT_TRUE(mlir::succeeded(program)) << h.diagnostics;
  auto aux = kvir::compiler::lookupEntry(*program->planned, spec->entry);
  ASSERT_TRUE(mlir::succeeded(aux));
  auto manifest = kvir::compiler::describeEntry(*aux);
  ASSERT_TRUE(mlir::succeeded(manifest));
  EXPECT_EQ(manifest->results,
            (std::vector<ValueKind>{ValueKind::Cache, ValueKind::Tokens}));

  Inputs in = {{"opening", tokensOf(11, 10)},
               {"hero", tokensOf(12, 6)},
               {"notes", tokensOf(13, 16)},
               {"answer", tokensOf(14, 3)},
               {"new_hero", tokensOf(15, 9)}};
  InputOptions inputs;
  for (const auto &[name, tokens] : in)
    inputs.givenTokens[name] = {tokens, "--text", name, "", false};
  std::vector<Value> args;
  std::string error;
  ASSERT_TRUE(
      bindArguments(program->manifest, h.config, inputs, args, nullptr, error))
      << error;
  RunOutcome main = runEntry(program->entry, program->manifest, *h.backend,
                             h.model.get(), h.pool.get(), args);
  ASSERT_FALSE(main.failed) << main.message;
  RunOutcome operands = runEntry(program->jit->entry(spec->entry), *manifest,
                                 *h.backend, h.model.get(), h.pool.get(), args);
  ASSERT_FALSE(operands.failed) << operands.message;
  ASSERT_EQ(operands.results.size(), 2u);
  EXPECT_EQ(operands.results[1].tokens, in["new_hero"]);
  const kvrt_view *old = operands.results[0].cache.get();
  int64_t begin = 0, end = 0;
  ASSERT_EQ(kvrt_view_segment_bounds(old, "hero", &begin, &end), KVRT_OK);
  EXPECT_EQ(begin, 10);
  EXPECT_EQ(end, 16);
  EXPECT_EQ(kvrt_view_num_tokens(old), 35);

  AttributionRequest request;
  request.oldCache = operands.results[0].cache;
  request.newTokens = operands.results[1].tokens;
  request.edited = spec->edited;
  request.answer = spec->answer;
  request.segments = spec->segments;
  Attribution a;
  ASSERT_TRUE(attribute(*h.backend, program->forward, h.model.get(),
                        h.pool.get(), request, a, error))
      << error;
  ASSERT_EQ(a.segments.size(), 3u);
  EXPECT_EQ(a.segments[1].segment, "hero");
  EXPECT_EQ(a.segments[1].tokens, 9);
  EXPECT_EQ(a.segments[2].kind, "history");
  EXPECT_NEAR(a.segments[0].recovered, 0.0, 1e-6);

  const Logits &plan = *main.results[0].logits;
  std::vector<int32_t> final;
  for (const char *name : {"opening", "new_hero", "notes", "answer"})
    final.insert(final.end(), in[name].begin(), in[name].end());
  Logits full;
  WorkStats work;
  ASSERT_TRUE(fullPrefill(*h.backend, program->forward, h.model.get(),
                          h.pool.get(), final, 3, full, work, error));
  double planDistance =
      l2Distance(plan.data.data(), full.data.data(), full.data.size());
  EXPECT_NEAR(a.segments[1].distance, planDistance, 1e-5 * (1 + planDistance));
}

// An answer that no kv.edit feeds is a diagnostic naming what it is.
TEST(ProgramTest, AttributionNeedsAnEditedAnswer) {
  Harness h;
  mlir::OwningOpRef<mlir::ModuleOp> planned = kvir::compiler::parseProgram(
      h.context, readSource("examples/compose-skills.mlir"),
      [&](mlir::ModuleOp module) {
        return mlir::failure(
            mlir::failed(kvir::compiler::addAttributionEntry(module, "main")));
      });
  EXPECT_FALSE(planned);
  EXPECT_NE(h.diagnostics.find("must be kv.logits of a segment of a kv.edit's "
                               "result; it is defined by 'kv.prefill'"),
            std::string::npos)
      << h.diagnostics;
}

TEST(ProgramTest, FidelityMetrics) {
  std::vector<float> a = {1, 2, 3, 0, 0, 1}, b = {1, 2, 3, 0, 1, 0};
  Fidelity f = compareLogits(a.data(), b.data(), 2, 3);
  EXPECT_EQ(f.rows, 2);
  EXPECT_EQ(f.top1Agree, 1);
  EXPECT_NEAR(f.cosineMin, 0.0, 1e-12);
  EXPECT_NEAR(f.cosineMean, 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(f.maxAbsDiff, 1.0);
  EXPECT_EQ(f.klMax, f.klMean * 2);
  EXPECT_GT(f.klMax, 0.0);
  EXPECT_EQ(topK(a.data(), 3, 2), (std::vector<int32_t>{2, 1}));
}

// The matmul the benchmarks time against BLAS is the forward's: its product
// equals a naive one in double precision, on the dot-product path (fewer than
// 4 tokens) and the packed one, for a shape that is not a whole number of
// register tiles.
TEST(ProgramTest, CompiledMatmulEqualsANaiveProduct) {
  const int64_t m = 40, k = 72;
  kvir::compiler::MatmulFn fn = nullptr;
  ASSERT_EQ(kvir::compiler::compileMatmul(m, k, &fn), KVRT_OK)
      << kvrt_last_error();
  for (int64_t n : {1, 3, 37}) {
    std::vector<float> a(n * k), b(m * k), c(n * m, -1.0f);
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = float(int(i * 7 % 13) - 6) * 0.05f;
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = float(int(i * 5 % 11) - 5) * 0.03f;
    kvrt_memref_f32 ma = kvir::memrefF32(a.data(), int64_t(a.size()));
    kvrt_memref_f32 mc = kvir::memrefF32(c.data(), int64_t(c.size()));
    kvrt_memref_weight mb = {
        b.data(), b.data(), 0, {int64_t(b.size() * sizeof(float))}, {1}};
    fn(&ma, &mb, &mc, n);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < m; ++o) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i)
          want += double(a[t * k + i]) * double(b[o * k + i]);
        // f32 sums of 72 products of size <= 0.009: well within 1e-5.
        ASSERT_NEAR(c[t * m + o], want, 1e-5)
            << "n " << n << " [" << t << "][" << o << "]";
      }
  }
}

// The quantised matmul the benchmarks set beside hand-written tiles is the
// forward's: over the file's rows and over the rows repacked for decode (a
// table entry of -1 and of their offset), a decode step (1 token) and a
// prefill (37) each stay within the error the activations' quantisation
// allows (half a step per element: at most max|x| over its 256 / 254, for
// Q8_K's blocks of 256 and Q8_0's of 32 alike) of the product
// with the dequantised weights, and a prefill over the repacked rows (its
// panels copied from them) equals the file rows' bit for bit. 40 rows: two
// whole groups of 16 and a partial one.
TEST(ProgramTest, CompiledQuantMatmulReadsTheFileAndTheDecodeRows) {
  const int64_t m = 40, k = 512;
  // Rows that are not whole blocks, and f32 weights, are refused by name.
  kvir::compiler::QuantMatmulFn refused = nullptr;
  EXPECT_EQ(
      kvir::compiler::compileQuantMatmul(KVRT_WEIGHT_Q4_K, m, 100, &refused),
      KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("not whole q4_k blocks"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(kvir::compiler::compileQuantMatmul(KVRT_WEIGHT_F32, m, k, &refused),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(refused, nullptr);
  for (kvrt_weight_format format : {KVRT_WEIGHT_Q8_0, KVRT_WEIGHT_Q4_K}) {
    SCOPED_TRACE(kvrt::weightFormatName(format));
    kvir::compiler::QuantMatmulFn fn = nullptr;
    ASSERT_EQ(kvir::compiler::compileQuantMatmul(format, m, k, &fn), KVRT_OK)
        << kvrt_last_error();
    int64_t rowBytes = kvrt::weightRowBytes(format, k);
    int64_t rowsAt = (m * rowBytes + 63) / 64 * 64;
    std::vector<uint8_t> bytes(
        size_t(rowsAt + kvrt::decodeRowsBytes(format, m, k)));
    std::vector<float> w(size_t(m * k));
    for (int64_t row = 0; row < m; ++row) {
      float *dst = w.data() + row * k;
      for (int64_t i = 0; i < k; ++i)
        dst[i] = float(int((row * 131 + i * 7) % 23) - 11) * 0.01f;
      kvrt::quantizeRow(format, dst, bytes.data() + row * rowBytes, k);
      kvrt::dequantizeRow(format, bytes.data() + row * rowBytes, dst, k);
    }
    kvrt::repackDecodeRows(format, bytes.data(), m, k, bytes.data() + rowsAt, 0,
                           (m + kvrt::kQ8Rows16 - 1) / kvrt::kQ8Rows16);
    kvrt_memref_weight mb = {
        bytes.data(), bytes.data(), 0, {int64_t(bytes.size())}, {1}};
    for (int64_t n : {1, 37}) {
      std::vector<float> a(size_t(n * k));
      for (size_t i = 0; i < a.size(); ++i)
        a[i] = float(int(i * 13 % 29) - 14) * 0.07f;
      std::vector<std::vector<float>> outs;
      for (int64_t at : {int64_t(-1), rowsAt}) {
        std::vector<float> c(size_t(n * m), -1.0f);
        kvrt_memref_f32 ma = kvir::memrefF32(a.data(), int64_t(a.size()));
        kvrt_memref_f32 mc = kvir::memrefF32(c.data(), int64_t(c.size()));
        kvrt_memref_i64 offset = {&at, &at, 0, {1}, {1}};
        fn(&ma, &mb, &mc, n, &offset);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t o = 0; o < m; ++o) {
            double want = 0, bound = 1e-4;
            for (int64_t b = 0; b < k; b += 256) {
              double maxAbs = 0;
              for (int64_t i = b; i < b + 256; ++i)
                maxAbs = std::max(maxAbs, double(std::abs(a[t * k + i])));
              for (int64_t i = b; i < b + 256; ++i) {
                want += double(a[t * k + i]) * double(w[o * k + i]);
                bound += std::abs(double(w[o * k + i])) * maxAbs / 254 * 1.01;
              }
            }
            ASSERT_NEAR(c[t * m + o], want, bound)
                << "n " << n << " rows at " << at << " [" << t << "][" << o
                << "]";
          }
        outs.push_back(c);
      }
      if (n > 1)
        EXPECT_EQ(outs[0], outs[1]) << "a prefill over the repacked rows";
    }
  }
}

} // namespace
