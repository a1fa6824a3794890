//===- ProgramRunnerTest.cpp - kv programs vs the oracle --------*- C++ -*-===//
//
// Executes the examples through ProgramRunner (kv-optimize, then the
// interpreter over the reference backend) and checks the answers against
// the same computation done by hand with kvrt view ops and the oracle.
//
//===----------------------------------------------------------------------===//

#include "tools/kv-run/ProgramRunner.h"

#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <fstream>
#include <sstream>

using namespace kvir::test;
using namespace kvir::run;

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
  PoolPtr pool = poolFor(model.get(), 4096, 16);
  std::unique_ptr<kvir::ComputeBackend> backend =
      kvir::createReferenceBackend();
  mlir::MLIRContext context;
  std::string diagnostics;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler;

  Harness() : context(registry()) {
    context.loadAllAvailableDialects();
    handler = std::make_unique<mlir::ScopedDiagnosticHandler>(
        &context, [this](mlir::Diagnostic &d) {
          diagnostics += d.str() + "\n";
          return mlir::success();
        });
  }
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    ProgramRunner::registerDialects(r);
    return r;
  }

  /// Runs `text`'s @main with `inputs` (by name); returns the results.
  std::vector<RuntimeValue>
  run(ProgramRunner &runner, const std::string &text,
      const llvm::StringMap<std::vector<int32_t>> &inputs) {
    EXPECT_TRUE(mlir::succeeded(runner.loadString(text))) << diagnostics;
    auto entry = runner.lookupEntry("main");
    EXPECT_TRUE(mlir::succeeded(entry)) << diagnostics;
    InputOptions options;
    options.given = inputs;
    auto args = runner.bindArguments(*entry, options);
    EXPECT_TRUE(mlir::succeeded(args)) << diagnostics;
    auto results = runner.run(*entry, *args);
    EXPECT_TRUE(mlir::succeeded(results)) << diagnostics;
    return succeeded(results) ? *results : std::vector<RuntimeValue>{};
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
llvm::StringMap<std::vector<int32_t>> agentInputs() {
  llvm::StringMap<std::vector<int32_t>> in;
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
TEST(ProgramRunnerTest, ExactEditEqualsFullPrefill) {
  Harness h;
  ProgramRunner runner(h.context, *h.backend, h.model.get(), h.pool.get());
  auto inputs = agentInputs();
  auto results = h.run(
      runner, withStrategy(readSource("examples/agent-edit.mlir"), "exact"),
      inputs);
  ASSERT_EQ(results.size(), 1u);
  const Logits &answer = *results[0].logits;
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
  EXPECT_EQ(runner.planStats().prefillTokens, 16 + 120 + 32 + 32 + 8);
  EXPECT_EQ(runner.setupStats().prefillTokens, 452);
}

// cot_slice equals the plan done by hand: keep @system/@history, prefill the
// new city, reuse @tools shifted by +4, recompute the thoughts and answer.
TEST(ProgramRunnerTest, CotSliceEqualsHandPlan) {
  Harness h;
  ProgramRunner runner(h.context, *h.backend, h.model.get(), h.pool.get());
  auto in = agentInputs();
  auto results = h.run(runner, readSource("examples/agent-edit.mlir"), in);
  ASSERT_EQ(results.size(), 1u);
  const Logits &answer = *results[0].logits;

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
  EXPECT_EQ(runner.planStats().prefillTokens, 16 + 32 + 32 + 8);
}

// compose equals the plan by hand: blocks prefilled at 0, appended shifted
// after the system prompt, the question prefilled over all of it.
TEST(ProgramRunnerTest, ComposeEqualsHandPlan) {
  Harness h;
  ProgramRunner runner(h.context, *h.backend, h.model.get(), h.pool.get());
  llvm::StringMap<std::vector<int32_t>> in;
  in["system"] = tokensOf(11, 64);
  in["search"] = tokensOf(12, 40);
  in["calendar"] = tokensOf(13, 33);
  in["email"] = tokensOf(14, 50);
  in["question"] = tokensOf(15, 24);
  auto results = h.run(runner, readSource("examples/compose-skills.mlir"), in);
  ASSERT_EQ(results.size(), 1u);
  const Logits &answer = *results[0].logits;
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
  EXPECT_EQ(runner.planStats().prefillTokens, 24);
  EXPECT_EQ(runner.setupStats().prefillTokens, 64 + 40 + 33 + 50);
}

// A fraction repair runs the selective recompute on the reused @tools.
TEST(ProgramRunnerTest, FractionRepairRecomputesItsShare) {
  Harness h;
  ProgramRunner runner(h.context, *h.backend, h.model.get(), h.pool.get());
  auto results = h.run(runner,
                       withStrategy(readSource("examples/agent-edit.mlir"),
                                    "cot_slice, fraction = 0.15"),
                       agentInputs());
  ASSERT_EQ(results.size(), 1u);
  ASSERT_EQ(runner.repairs().size(), 1u);
  EXPECT_EQ(runner.repairs()[0], std::make_pair(int64_t(120), int64_t(18)));
  EXPECT_EQ(runner.planStats().prefillTokens, 16 + 18 + 32 + 32 + 8);
  EXPECT_EQ(runner.planStats().scanTokens, 120);
}

// A failing step reports the op and leaves the runner usable.
TEST(ProgramRunnerTest, DiagnosticsNameTheOp) {
  Harness h;
  ProgramRunner runner(h.context, *h.backend, h.model.get(), h.pool.get());
  auto in = agentInputs();
  in["arg8"] = {600};
  ASSERT_TRUE(mlir::succeeded(
      runner.loadString(readSource("examples/agent-edit.mlir"))));
  auto entry = runner.lookupEntry("main");
  ASSERT_TRUE(mlir::succeeded(entry));
  InputOptions options;
  options.given = in;
  EXPECT_TRUE(mlir::failed(runner.bindArguments(*entry, options)));
  EXPECT_NE(h.diagnostics.find("token 600 at index 0"), std::string::npos)
      << h.diagnostics;
  EXPECT_TRUE(mlir::failed(runner.lookupEntry("nope")));
  EXPECT_NE(h.diagnostics.find("no function @nope"), std::string::npos);
}

TEST(ProgramRunnerTest, FidelityMetrics) {
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

} // namespace
