//===- CpuJit.cpp - JIT compilation of the generated CPU kernels -*- C++
//-*-===//

#include "runtime/cpu/jit/CpuJit.h"
#include "passes/Conversion/KVToCPU/ForwardBuilder.h"
#include "passes/Passes.h"
#include "runtime/core/Support.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

using namespace kvir;
using namespace kvir::cpu;
using kvrt::fail;
using kvrt::str;

namespace {

constexpr const char *kPrefix = "kv";

uint64_t bitsOf(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// What the kernels are specialised for (seq_len and the classifier sharing
/// are not part of it).
using ConfigKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t,
                             int32_t, int32_t, uint64_t, uint64_t>;

ConfigKey keyOf(const kvrt_model_config &c) {
  return {c.dim,         c.hidden_dim,         c.n_layers,
          c.n_heads,     c.n_kv_heads,         c.vocab_size,
          c.rope_layout, bitsOf(c.rope_theta), bitsOf(c.rms_eps)};
}

/// A context with the dialects of the forward and its lowering.
std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  mlir::kv::registerForwardDialects(registry);
  registry.insert<mlir::LLVM::LLVMDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry);
  ctx->loadAllAvailableDialects();
  return ctx;
}

/// Builds the forward module of `config`, lowered to the LLVM dialect when
/// `lower`; diagnostics are collected into `errors`.
mlir::OwningOpRef<mlir::ModuleOp> buildModule(mlir::MLIRContext &ctx,
                                              const kvrt_model_config &config,
                                              bool lower, std::string &errors) {
  llvm::raw_string_ostream os(errors);
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &diag) {
    os << diag.str() << "\n";
    return mlir::success();
  });
  mlir::Location loc = mlir::UnknownLoc::get(&ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  if (failed(mlir::kv::buildForwardFunctions(
          *module, mlir::kv::ForwardConfig::fromRuntimeConfig(config), kPrefix,
          loc)))
    return nullptr;
  if (!lower)
    return module;
  mlir::PassManager pm(&ctx);
  mlir::kv::buildLowerToCPUPipeline(pm, mlir::kv::LowerToCPUPipelineOptions());
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

kvrt_status compile(const kvrt_model_config &config,
                    std::shared_ptr<const CpuKernels> *out) {
  std::string problem = mlir::kv::checkForwardConfig(
      mlir::kv::ForwardConfig::fromRuntimeConfig(config));
  if (!problem.empty())
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cpu backend: unsupported model config: ", problem));
  static std::once_flag targetOnce;
  std::call_once(targetOnce, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });

  auto ctx = makeContext();
  std::string errors;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      buildModule(*ctx, config, /*lower=*/true, errors);
  if (!module)
    return fail(KVRT_ERR_INTERNAL,
                str("cpu backend: lowering the forward failed: ", errors));

  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return fail(KVRT_ERR_INTERNAL, str("cpu backend: no host target: ",
                                       llvm::toString(builder.takeError())));
  // One target machine for the optimiser (kept alive here: the transformer
  // holds it by pointer), one that the engine takes for code generation.
  auto optTM = builder->createTargetMachine();
  auto tm = builder->createTargetMachine();
  if (!optTM || !tm) {
    llvm::Error error = optTM ? tm.takeError() : optTM.takeError();
    return fail(KVRT_ERR_INTERNAL, str("cpu backend: no host target machine: ",
                                       llvm::toString(std::move(error))));
  }
  // The transformer is a function_ref: it must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer =
      mlir::makeOptimizingTransformer(3, 0, optTM->get());
  mlir::ExecutionEngineOptions options;
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  auto engine = mlir::ExecutionEngine::create(*module, options, std::move(*tm));
  if (!engine)
    return fail(KVRT_ERR_INTERNAL, str("cpu backend: JIT compilation failed: ",
                                       llvm::toString(engine.takeError())));
  (*engine)->initialize();

  auto kernels = std::make_shared<CpuKernels>();
  std::string prefix = str("_mlir_ciface_", kPrefix, "_");
  auto lookup = [&](const char *name, void *&fn) -> kvrt_status {
    auto symbol = (*engine)->lookup(prefix + name);
    if (!symbol)
      return fail(KVRT_ERR_INTERNAL,
                  str("cpu backend: kernel ", prefix, name,
                      " not found: ", llvm::toString(symbol.takeError())));
    fn = *symbol;
    return KVRT_OK;
  };
  void *prefill = nullptr, *attention = nullptr, *materialize = nullptr;
  if (kvrt_status s = lookup("prefill", prefill))
    return s;
  if (kvrt_status s = lookup("attention", attention))
    return s;
  if (kvrt_status s = lookup("materialize", materialize))
    return s;
  kernels->prefill = reinterpret_cast<PrefillFn>(prefill);
  kernels->attention = reinterpret_cast<AttentionFn>(attention);
  kernels->materialize = reinterpret_cast<MaterializeFn>(materialize);
  kernels->owner = std::shared_ptr<mlir::ExecutionEngine>(std::move(*engine));
  *out = std::move(kernels);
  return KVRT_OK;
}

} // namespace

kvrt_status
kvir::cpu::compileCpuKernels(const kvrt_model_config &config,
                             std::shared_ptr<const CpuKernels> *out) {
  if (!out)
    return kvrt::nullArgument(__func__);
  // Compiled kernels live as long as the process. The cache is deliberately
  // never destroyed: an ExecutionEngine destroyed by an exit handler runs
  // the JIT's deinitializers after LLVM's own statics are gone.
  static std::mutex mutex;
  static auto &cache =
      *new std::map<ConfigKey, std::shared_ptr<const CpuKernels>>();
  std::lock_guard<std::mutex> lock(mutex);
  ConfigKey key = keyOf(config);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *out = it->second;
    return KVRT_OK;
  }
  std::shared_ptr<const CpuKernels> kernels;
  if (kvrt_status s = compile(config, &kernels))
    return s;
  cache.emplace(key, kernels);
  *out = std::move(kernels);
  return KVRT_OK;
}

kvrt_status kvir::cpu::getCpuKernelsSource(const kvrt_model_config &config,
                                           bool lowered, std::string *out) {
  if (!out)
    return kvrt::nullArgument(__func__);
  std::string problem = mlir::kv::checkForwardConfig(
      mlir::kv::ForwardConfig::fromRuntimeConfig(config));
  if (!problem.empty())
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cpu backend: unsupported model config: ", problem));
  auto ctx = makeContext();
  std::string errors;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      buildModule(*ctx, config, lowered, errors);
  if (!module)
    return fail(KVRT_ERR_INTERNAL,
                str("cpu backend: building the forward failed: ", errors));
  out->clear();
  llvm::raw_string_ostream os(*out);
  module->print(os);
  return KVRT_OK;
}
