//===- ProgramCompiler.cpp - JIT-compiled kv programs -----------*- C++ -*-===//

#include "tools/kv-run/ProgramCompiler.h"

#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"
#include "passes/Passes.h"
#include "runtime/exec/ExecRuntime.h"
#include "runtime/reference/Reference.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <chrono>
#include <mutex>

using namespace mlir;
using namespace kvir;
using namespace kvir::run;

namespace {

/// The module attribute convert-kv-to-runtime records the sites in.
constexpr llvm::StringLiteral kSitesAttrName = "kv.exec_sites";

bool isTokens(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getRank() == 1 && t.getElementType().isInteger(32);
}
bool isLogits(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.getRank() == 2 && t.getElementType().isF32();
}

WorkStats toStats(const kvrt_exec_work &w) {
  WorkStats s;
  s.prefillCalls = w.prefill_calls;
  s.prefillTokens = w.prefill_tokens;
  s.logitsRows = w.logits_rows;
  s.scanTokens = w.scan_tokens;
  s.flops = w.flops;
  s.kvBytesWritten = w.kv_bytes_written;
  s.seconds = w.seconds;
  return s;
}

/// A new reference to a view the context owns.
ViewRef retained(kvrt_view *view) {
  if (!view)
    return nullptr;
  kvrt_exec_view_retain(view);
  return adoptView(view);
}

using ContextPtr =
    std::unique_ptr<kvrt_exec_context, void (*)(kvrt_exec_context *)>;

} // namespace

ProgramCompiler::ProgramCompiler(ProgramRunner &runner) : runner(runner) {}
ProgramCompiler::~ProgramCompiler() = default;

/// What the interpreter rejects, rejected here with its messages, before
/// anything is compiled.
LogicalResult ProgramCompiler::check(func::FuncOp entry) {
  ModuleOp module = runner.module();
  const kvrt_model_config &c = runner.config();
  int64_t headSize = c.dim / c.n_heads;
  auto checkCache = [&](Operation *op, Type type) -> LogicalResult {
    auto cache = dyn_cast<mlir::kv::CacheType>(type);
    if (cache &&
        (cache.getLayers() != c.n_layers ||
         cache.getKvHeads() != c.n_kv_heads ||
         cache.getHeadSize() != headSize || !cache.getElementType().isF32()))
      return emitError(op->getLoc())
             << "cache type " << type << " does not match the loaded model ("
             << c.n_layers << "x" << c.n_kv_heads << "x" << headSize << "xf32)";
    return success();
  };
  llvm::SetVector<Operation *> functions;
  functions.insert(entry);
  for (size_t i = 0; i < functions.size(); ++i) {
    auto func = cast<func::FuncOp>(functions[i]);
    if (func.isExternal())
      return emitError(func.getLoc())
             << "@" << func.getName() << " has no body to execute";
    if (!func.getBody().hasOneBlock())
      return emitError(func.getLoc())
             << "kv-run executes functions of one block; @" << func.getName()
             << " has " << func.getBody().getBlocks().size();
    for (Operation &op : func.getBody().front()) {
      Location loc = op.getLoc();
      if (isa<mlir::kv::ContextOp, func::ReturnOp>(op))
        continue;
      if (op.getNumRegions() != 0)
        return emitError(loc) << "kv-run cannot execute '" << op.getName()
                              << "': ops with regions are not supported";
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
        if (!callee)
          return emitError(loc)
                 << "no function @" << call.getCallee() << " to call";
        functions.insert(callee);
        continue;
      }
      if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
        Type type = constant.getType();
        if (type.isIntOrIndex() || isTokens(type))
          continue;
        return emitError(loc)
               << "kv-run cannot execute a constant of type " << type
               << " (it supports integers, index and 1-D i32 token tensors)";
      }
      if (isa<arith::ArithDialect>(op.getDialect())) {
        if (llvm::all_of(op.getResultTypes(),
                         [](Type t) { return t.isIntOrIndex(); }) ||
            isa<arith::SelectOp>(op))
          continue;
        return emitError(loc)
               << "kv-run cannot execute '" << op.getName() << "'";
      }
      if (auto empty = dyn_cast<tensor::EmptyOp>(op)) {
        if (!isTokens(empty.getType()))
          return emitError(loc)
                 << "kv-run supports tensor.empty of 1-D i32 tokens only, not "
                 << empty.getType();
        continue;
      }
      if (isa<tensor::DimOp, tensor::CastOp>(op))
        continue;
      if (isa<mlir::kv::EditOp, mlir::kv::ComposeOp, mlir::kv::LogitsOp,
              mlir::kv::AttentionOp>(op))
        return emitError(loc) << "kv-run cannot execute '" << op.getName()
                              << "' (kv-optimize should have planned it into "
                                 "primitives)";
      if (auto empty = dyn_cast<mlir::kv::EmptyOp>(op)) {
        if (failed(checkCache(&op, empty.getType())))
          return failure();
        continue;
      }
      if (auto prefill = dyn_cast<mlir::kv::PrefillOp>(op)) {
        if (failed(checkCache(&op, prefill.getResult().getType())))
          return failure();
        auto logits = cast<RankedTensorType>(prefill.getLogits().getType());
        if (!logits.isDynamicDim(1) && logits.getDimSize(1) != c.vocab_size)
          return emitError(loc) << "logits type " << logits
                                << " does not match the model's vocabulary of "
                                << c.vocab_size;
        continue;
      }
      if (isa<mlir::kv::KVDialect>(op.getDialect()))
        continue;
      return emitError(loc) << "kv-run cannot execute '" << op.getName() << "'";
    }
  }
  for (Type type : entry.getResultTypes())
    if (!isa<mlir::kv::CacheType, mlir::kv::ModelType>(type) &&
        !type.isIntOrIndex() && !isTokens(type) && !isLogits(type))
      return emitError(entry.getLoc())
             << "@" << entry.getName() << " returns a value of type " << type
             << ", which kv-run cannot report";
  return success();
}

LogicalResult ProgramCompiler::compile(func::FuncOp entryFunc) {
  entry = entryFunc;
  if (failed(check(entry)))
    return failure();
  MLIRContext &context = *runner.module()->getContext();
  DialectRegistry registry;
  registry.insert<LLVM::LLVMDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  OwningOpRef<ModuleOp> lowered(runner.module().clone());
  PassManager pm(&context);
  mlir::kv::buildLowerToCPUPipeline(pm, mlir::kv::LowerToCPUPipelineOptions());
  if (failed(pm.run(*lowered)))
    return emitError(lowered->getLoc())
           << "lowering the program to the LLVM dialect failed";
  sites.clear();
  if (auto attr = (*lowered)->getAttrOfType<ArrayAttr>(kSitesAttrName)) {
    for (Attribute site : attr)
      sites.push_back(cast<LocationAttr>(site));
    (*lowered)->removeAttr(kSitesAttrName);
  }

  static std::once_flag targetOnce;
  std::call_once(targetOnce, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return emitError(entry.getLoc())
           << "no host target: " << llvm::toString(builder.takeError());
  auto optTM = builder->createTargetMachine();
  if (!optTM)
    return emitError(entry.getLoc())
           << "no host target machine: " << llvm::toString(optTM.takeError());
  // The host program is a sequence of runtime calls: light optimisation.
  std::function<llvm::Error(llvm::Module *)> transformer =
      makeOptimizingTransformer(1, 0, optTM->get());
  ExecutionEngineOptions options;
  options.transformer = transformer;
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  auto created = ExecutionEngine::create(*lowered, options);
  if (!created)
    return emitError(entry.getLoc())
           << "JIT compilation failed: " << llvm::toString(created.takeError());
  engine = std::move(*created);
  engine->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap map;
    for (const kvrt_exec_symbol *s = kvrt_exec_symbols(); s->name; ++s)
      map[interner(s->name)] = {llvm::orc::ExecutorAddr::fromPtr(s->address),
                                llvm::JITSymbolFlags::Exported};
    return map;
  });
  engine->initialize();
  std::string name = ("_kvrt_entry_" + entry.getName()).str();
  auto symbol = engine->lookup(name);
  if (!symbol)
    return emitError(entry.getLoc())
           << "the compiled program has no " << name << ": "
           << llvm::toString(symbol.takeError());
  entryFn = reinterpret_cast<void (*)(void *, int64_t *, int64_t *)>(*symbol);
  return success();
}

FailureOr<std::vector<RuntimeValue>>
ProgramCompiler::run(ArrayRef<RuntimeValue> args) {
  plan = {};
  setup = {};
  repairStats.clear();
  if (!entryFn)
    return emitError(entry.getLoc()) << "the program is not compiled";
  ComputeBackend &backend = runner.computeBackend();
  ExecMaterializeFn materialize = nullptr;
  if (StringRef(backend.name()) == "reference")
    materialize = &kvir::reference::materialize;
  ContextPtr ctx(createExecContext(backend, runner.loadedModel(),
                                   runner.kvPool(), materialize),
                 kvrt_exec_context_destroy);
  if (!ctx)
    return emitError(entry.getLoc()) << "cannot create the execution context";

  std::vector<int64_t> slots;
  for (const RuntimeValue &arg : args) {
    switch (arg.kind) {
    case RuntimeValue::Kind::Model:
      slots.push_back(
          int64_t(reinterpret_cast<intptr_t>(runner.loadedModel())));
      break;
    case RuntimeValue::Kind::Tokens: {
      kvrt_exec_tokens *tokens = kvrt_exec_tokens_constant(
          ctx.get(), KVRT_EXEC_NO_SITE, arg.tokens->data(), arg.tokens->size());
      slots.push_back(int64_t(reinterpret_cast<intptr_t>(tokens)));
      break;
    }
    case RuntimeValue::Kind::Index:
      slots.push_back(arg.index);
      break;
    default:
      return emitError(entry.getLoc())
             << "kv-run binds models, token lists and integers only";
    }
  }
  std::vector<int64_t> results(entry.getNumResults() + 1, 0);
  // A program without edit, compose or logits ops is all plan.
  if (!runner.hasPlanOps())
    kvrt_exec_plan_begin(ctx.get());
  if (!kvrt_exec_failed(ctx.get()))
    entryFn(ctx.get(), slots.data(), results.data());

  kvrt_exec_work work;
  kvrt_exec_get_work(ctx.get(), 1, &work);
  plan = toStats(work);
  kvrt_exec_get_work(ctx.get(), 0, &work);
  setup = toStats(work);
  for (int64_t i = 0, e = kvrt_exec_num_repairs(ctx.get()); i < e; ++i) {
    int64_t candidates = 0, chosen = 0;
    kvrt_exec_get_repair(ctx.get(), i, &candidates, &chosen);
    repairStats.push_back({candidates, chosen});
  }
  if (kvrt_exec_failed(ctx.get())) {
    int32_t site = kvrt_exec_error_site(ctx.get());
    Location loc = site >= 0 && size_t(site) < sites.size()
                       ? sites[site]
                       : Location(entry.getLoc());
    return emitError(loc) << kvrt_exec_error_message(ctx.get());
  }

  std::vector<RuntimeValue> values;
  for (auto [i, type] : llvm::enumerate(entry.getResultTypes())) {
    int64_t slot = results[i];
    void *pointer = reinterpret_cast<void *>(intptr_t(slot));
    if (isa<mlir::kv::CacheType>(type)) {
      values.push_back(
          RuntimeValue::ofCache(retained(static_cast<kvrt_view *>(pointer))));
    } else if (isa<mlir::kv::ModelType>(type)) {
      values.push_back(RuntimeValue::ofModel());
    } else if (isTokens(type)) {
      auto *tokens = static_cast<kvrt_exec_tokens *>(pointer);
      const int32_t *data = kvrt_exec_tokens_data(tokens);
      values.push_back(RuntimeValue::ofTokens(std::vector<int32_t>(
          data, data + kvrt_exec_tokens_size(ctx.get(), tokens))));
    } else if (isLogits(type)) {
      auto *handle = static_cast<kvrt_exec_logits *>(pointer);
      auto logits = std::make_shared<Logits>();
      logits->rows = kvrt_exec_logits_rows(handle);
      logits->vocab = kvrt_exec_logits_vocab(handle);
      const float *data = kvrt_exec_logits_data(handle);
      logits->data.assign(data, data + logits->rows * logits->vocab);
      logits->context = retained(kvrt_exec_logits_context(handle));
      logits->result = retained(kvrt_exec_logits_result(handle));
      const kvrt_exec_tokens *tokens = kvrt_exec_logits_tokens(handle);
      const int32_t *ids = kvrt_exec_tokens_data(tokens);
      logits->tokens.assign(ids,
                            ids + kvrt_exec_tokens_size(ctx.get(), tokens));
      logits->position = kvrt_exec_logits_position(handle);
      logits->lastOnly = kvrt_exec_logits_last_only(handle);
      RuntimeValue value;
      value.kind = RuntimeValue::Kind::Logits;
      value.logits = std::move(logits);
      values.push_back(std::move(value));
    } else {
      values.push_back(RuntimeValue::ofIndex(slot));
    }
  }
  return values;
}
