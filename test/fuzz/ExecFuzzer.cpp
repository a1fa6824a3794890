//===- ExecFuzzer.cpp - Runs generated kv programs on a tiny model --------===//
//
// An input is a sequence of choices (FuzzSupport.h's Choices) from which a
// small, well-formed kv program is generated: a context of 2 to 6 segments
// of 1 to 12 tokens (one of them a fact of run-time length) with random
// dependencies, then an edit of the fact (exact, cot_slice with or without
// a repair budget, erratum with a correction), or blocks prefilled apart and
// composed (with or without repair) before a question. The program is
// planned, lowered and JIT-compiled like kv-run does, and run twice on a
// tiny seeded synthetic model: on the generated CPU code and on the oracle
// (the reference backend, f64). Properties: both runs succeed or fail alike;
// their logits agree within kLogitTolerance; no crash or leak. The generated
// program is printed when a property fails (always with KVIR_FUZZ_VERBOSE).
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Compiler.h"
#include "runtime/exec/Session.h"
#include "runtime/reference/Reference.h"
#include "test/fuzz/FuzzSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace kvir;
using kvir::fuzz::Choices;

namespace {

/// Largest |cpu - oracle| accepted on a logit, relative to 1 + the largest
/// |logit| of the row: the generated code computes in f32 what the oracle
/// computes in f64, over at most 60 positions of a 2-layer model (measured
/// differences are below 1e-5; see docs/testing.md).
constexpr double kLogitTolerance = 1e-4;

constexpr int32_t kVocab = 64;

kvrt_model_config tinyConfig(kvrt_rope_layout layout) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = kVocab;
  c.seq_len = 128;
  c.rope_layout = layout;
  return c;
}

struct Model {
  kvrt_model_config config;
  kvrt_model *model = nullptr;
};

Model models[2];

/// `value` as an MLIR float literal (always with a decimal point).
std::string real(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

[[noreturn]] void failWith(const std::string &what,
                           const std::string &program) {
  kvir::fuzz::fail(what + "\n--- program ---\n" + program);
}

/// The text of the program `choices` describe.
std::string generate(Choices &choices, const kvrt_model_config &config) {
  std::ostringstream p;
  p << "!model = !kv.model<dim = 32, hidden = 64, layers = 2, heads = 4, "
       "kv_heads = 2, vocab = 64, rope = "
    << (config.rope_layout == KVRT_ROPE_HALF ? "half" : "interleaved")
    << ", theta = 10000.0, eps = 1.0e-05>\n";
  bool compose = choices.range(0, 3) == 0;
  if (compose) {
    // Blocks prefilled over nothing, composed after a main context.
    int blocks = static_cast<int>(choices.range(1, 3));
    p << "!cache = !kv.cache<2x2x8xf32>\n"
         "func.func @main(%m: !model, %sys: tensor<?xi32> {kv.name = \"sys\", "
         "kv.sample_length = "
      << choices.range(1, 12) << " : i64}";
    for (int b = 0; b < blocks; ++b)
      p << ", %b" << b << "t: tensor<?xi32> {kv.name = \"b" << b
        << "\", kv.sample_length = " << choices.range(1, 12) << " : i64}";
    p << ", %q: tensor<?xi32> {kv.name = \"q\", kv.sample_length = "
      << choices.range(1, 6) << " : i64}) -> tensor<?x64xf32> {\n"
      << "  %e = kv.empty : !cache\n"
         "  %c0, %l0 = kv.prefill %m, %e, %sys last : !model, (!cache), "
         "tensor<?xi32> -> !cache, tensor<1x64xf32>\n";
    for (int b = 0; b < blocks; ++b) {
      p << "  %b" << b << ", %lb" << b << " = kv.prefill %m, %e, %b" << b
        << "t last : !model, (!cache), tensor<?xi32> -> !cache, "
           "tensor<1x64xf32>\n";
      p << "  %c" << b + 1 << " = kv.compose %c" << b << ", %b" << b;
      switch (choices.range(0, 3)) {
      case 0:
        p << " : !cache, !cache\n";
        continue;
      case 1:
        p << " repair <first_k = " << choices.range(0, 6) << ">";
        break;
      case 2:
        p << " repair <fraction = " << real(0.25 * choices.range(0, 4)) << ">";
        break;
      default:
        p << " repair <deviation = " << real(0.01 * choices.range(1, 20))
          << ">";
      }
      p << " using %m : !cache, !cache, !model\n";
    }
    p << "  %f, %logits = kv.prefill %m, %c" << blocks
      << ", %q : !model, (!cache), tensor<?xi32> -> !cache, "
         "tensor<?x64xf32>\n"
         "  return %logits : tensor<?x64xf32>\n}\n";
    return p.str();
  }

  // A context with a fact, edited.
  int segments = static_cast<int>(choices.range(2, 6));
  int fact = static_cast<int>(choices.range(0, segments - 2));
  std::vector<int64_t> sizes(segments);
  p << "!cache = !kv.cache<2x2x8xf32, @ctx>\nkv.context @ctx {\n";
  for (int s = 0; s < segments; ++s) {
    sizes[s] = s == fact ? -1 : choices.range(1, 12);
    const char *kind = s == fact           ? "fact"
                       : s == segments - 1 ? "answer"
                       : s > fact          ? "thought"
                                           : "history";
    p << "  kv.segment @s" << s << " kind(" << kind << ") tokens("
      << (sizes[s] < 0 ? std::string("?") : std::to_string(sizes[s])) << ")";
    std::vector<int> deps;
    for (int d = 0; d < s; ++d)
      if (choices.range(0, 2) == 0)
        deps.push_back(d);
    if (!deps.empty()) {
      p << " deps(";
      for (size_t i = 0; i < deps.size(); ++i)
        p << (i ? ", " : "") << "@s" << deps[i];
      p << ")";
    }
    p << "\n";
  }
  p << "}\n";
  auto tensorType = [&](int s) {
    return sizes[s] < 0 ? std::string("tensor<?xi32>")
                        : "tensor<" + std::to_string(sizes[s]) + "xi32>";
  };
  int strategy = static_cast<int>(choices.range(0, 5));
  p << "func.func @main(%m: !model";
  for (int s = 0; s < segments; ++s) {
    p << ", %t" << s << ": " << tensorType(s) << " {kv.name = \"s" << s << "\"";
    if (sizes[s] < 0)
      p << ", kv.sample_length = " << choices.range(1, 12) << " : i64";
    p << "}";
  }
  p << ", %new: tensor<?xi32> {kv.name = \"new\", kv.sample_length = "
    << choices.range(1, 12) << " : i64}";
  if (strategy == 5)
    p << ", %fix: tensor<?xi32> {kv.name = \"fix\", kv.sample_length = "
      << choices.range(1, 6) << " : i64}";
  p << ") -> tensor<?x64xf32> {\n  %c0 = kv.empty : !cache\n";
  for (int s = 0; s < segments; ++s)
    p << "  %c" << s + 1 << ", %l" << s << " = kv.prefill %m, %c" << s << ", %t"
      << s << " segment @s" << s << " last : !model, (!cache), "
      << tensorType(s) << " -> !cache, tensor<1x64xf32>\n";
  p << "  %edited = kv.edit %m, %c" << segments << "[@s" << fact
    << "] = %new strategy ";
  switch (strategy) {
  case 0:
    p << "<exact>";
    break;
  case 1:
    p << "<cot_slice>";
    break;
  case 2:
    p << "<cot_slice, first_k = " << choices.range(0, 6) << ">";
    break;
  case 3:
    p << "<cot_slice, fraction = " << real(0.25 * choices.range(0, 4)) << ">";
    break;
  case 4:
    p << "<cot_slice, deviation = " << real(0.01 * choices.range(1, 20)) << ">";
    break;
  default:
    p << "<erratum> correction(%fix)";
  }
  p << " : !model, !cache, tensor<?xi32>"
    << (strategy == 5 ? ", tensor<?xi32>" : "") << "\n"
    << "  %logits = kv.logits %m, %edited[@s" << segments - 1
    << "] : !model, !cache -> tensor<?x64xf32>\n"
       "  return %logits : tensor<?x64xf32>\n}\n";
  return p.str();
}

/// Runs the compiled entry on `backend` over a fresh pool.
exec::RunOutcome run(const compiler::CompiledProgram &program,
                     ComputeBackend &backend, const Model &model,
                     const std::vector<exec::Value> &args) {
  kvrt_pool_config poolConfig;
  kvrt_pool_config_for_model(model.model, &poolConfig);
  poolConfig.capacity_pages = 256;
  poolConfig.page_tokens = 4;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&poolConfig, &pool) != KVRT_OK)
    kvir::fuzz::fail(std::string("pool: ") + kvrt_last_error());
  exec::RunOutcome outcome = exec::runEntry(program.entry, program.manifest,
                                            backend, model.model, pool, args);
  kvrt_pool_release(pool);
  return outcome;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  kvrt_rope_layout layouts[2] = {KVRT_ROPE_INTERLEAVED, KVRT_ROPE_HALF};
  for (int i = 0; i < 2; ++i) {
    models[i].config = tinyConfig(layouts[i]);
    if (kvrt_model_synthetic(&models[i].config, 7 + i, &models[i].model) !=
        KVRT_OK)
      kvir::fuzz::fail(std::string("synthetic model: ") + kvrt_last_error());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Choices choices(data, size);
  const Model &model = models[choices.flip()];
  uint64_t seed = choices.byte();
  std::string program = generate(choices, model.config);
  if (std::getenv("KVIR_FUZZ_VERBOSE"))
    std::fprintf(stderr, "%s\n", program.c_str());

  mlir::DialectRegistry registry;
  compiler::registerDialects(registry);
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> planned =
      compiler::parseProgram(context, program);
  if (!planned)
    failWith("a generated program was rejected:\n" + diagnostics, program);
  compiler::LowerOptions options;
  auto compiled = compiler::compileProgram(std::move(planned), "main", options);
  if (mlir::failed(compiled))
    failWith("a generated program did not compile:\n" + diagnostics, program);

  exec::InputOptions inputs;
  inputs.synthesize = true;
  inputs.seed = seed + 1;
  std::vector<exec::Value> args;
  std::string error;
  if (!exec::bindArguments(compiled->manifest, model.config, inputs, args,
                           nullptr, error))
    failWith("binding failed: " + error, program);

  std::unique_ptr<ComputeBackend> cpu =
      exec::createBackend("cpu", model.model, error);
  std::unique_ptr<ComputeBackend> oracle =
      exec::createBackend("reference", model.model, error);
  if (!cpu || !oracle)
    failWith("backend: " + error, program);
  exec::RunOutcome a = run(*compiled, *cpu, model, args);
  exec::RunOutcome b = run(*compiled, *oracle, model, args);
  if (a.failed != b.failed)
    failWith("one backend failed: cpu '" + a.message + "', oracle '" +
                 b.message + "'",
             program);
  if (a.failed)
    return 0;
  const exec::Logits &x = *a.results.at(0).logits;
  const exec::Logits &y = *b.results.at(0).logits;
  if (x.rows != y.rows || x.vocab != y.vocab)
    failWith("the backends' logits differ in shape", program);
  for (int64_t r = 0; r < x.rows; ++r) {
    double scale = 0, worst = 0;
    for (int64_t v = 0; v < x.vocab; ++v) {
      double ref = y.data[r * x.vocab + v];
      scale = std::max(scale, std::fabs(ref));
      worst = std::max(worst, std::fabs(x.data[r * x.vocab + v] - ref));
    }
    if (!(worst <= kLogitTolerance * (1 + scale)))
      failWith("row " + std::to_string(r) + ": cpu and oracle differ by " +
                   std::to_string(worst),
               program);
  }
  return 0;
}
