//===- Compiler.cpp - kv programs from source to code -----------*- C++ -*-===//

#include "driver/compiler/Compiler.h"

#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"
#include "driver/compiler/CompileCache.h"
#include "driver/compiler/ParserGuard.h"
#include "passes/Conversion/Forward/BuildForward.h"
#include "passes/Conversion/KVToCPU/CpuTarget.h"
#include "passes/Conversion/KVToRuntime/ExecABI.h"
#include "passes/Passes.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/cuda/CudaRuntime.h"
#include "runtime/exec/ExecRuntime.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ExecutionEngine/JITEventListener.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/SectionMemoryManager.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <mutex>

#include <unistd.h>

using namespace mlir;
using namespace kvir;
using namespace kvir::compiler;
using kvrt::fail;
using kvrt::str;

namespace {

/// The entry points of a forward (JitProgram::forward looks them up).
constexpr kv::ForwardEntryPoint kForwardEntryPoints[] = {
    kv::ForwardEntryPoint::Prefill, kv::ForwardEntryPoint::Attention,
    kv::ForwardEntryPoint::Materialize};

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

/// Diagnostics of `context` collected into a string while alive.
class CollectDiagnostics {
public:
  explicit CollectDiagnostics(MLIRContext &context)
      : os(text), handler(&context, [this](Diagnostic &diag) {
          os << diag.str() << "\n";
          return success();
        }) {}
  std::string text;

private:
  llvm::raw_string_ostream os;
  ScopedDiagnosticHandler handler;
};

} // namespace

void kvir::compiler::registerDialects(DialectRegistry &registry) {
  registry.insert<kv::KVDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  registerAllGPUToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

//===----------------------------------------------------------------------===//
// Loading and planning
//===----------------------------------------------------------------------===//

LogicalResult kvir::compiler::planProgram(ModuleOp module) {
  MLIRContext *context = module.getContext();
  module.walk([&](Operation *op) {
    if (isa<kv::EditOp, kv::ComposeOp, kv::LogitsOp>(op))
      op->setLoc(FusedLoc::get(context, {op->getLoc()},
                               StringAttr::get(context, kv::kPlanLocationTag)));
  });
  PassManager pm(context);
  kv::buildOptimizePipeline(pm, kv::OptimizePipelineOptions());
  if (failed(pm.run(module)))
    return emitError(module.getLoc()) << "kv-optimize failed on the program";
  return success();
}

OwningOpRef<ModuleOp> kvir::compiler::exactReferenceOf(ModuleOp module) {
  auto isErratum = [](kv::EditOp edit) {
    return edit.getStrategy().getKind() == kv::StrategyKind::Erratum;
  };
  bool any = false;
  module.walk([&](kv::EditOp edit) { any |= isErratum(edit); });
  if (!any)
    return nullptr;
  OwningOpRef<ModuleOp> copy = module.clone();
  auto exact = kv::StrategyAttr::get(module.getContext(),
                                     kv::StrategyKind::Exact, kv::RepairAttr());
  copy->walk([&](kv::EditOp edit) {
    if (!isErratum(edit))
      return;
    edit.setStrategyAttr(exact);
    edit.getCorrectionMutable().clear();
  });
  return copy;
}

OwningOpRef<ModuleOp> kvir::compiler::loadProgram(
    MLIRContext &context, llvm::SourceMgr &sourceMgr, StringRef path,
    llvm::function_ref<LogicalResult(ModuleOp)> beforePlanning,
    OwningOpRef<ModuleOp> *exactReference,
    llvm::function_ref<LogicalResult(ModuleOp)> afterParsing) {
  // A file is read whole, and only a regular one of bounded size: a FIFO or
  // a device would block or never end (exec::readFile).
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  if (path == "-") {
    auto in = llvm::MemoryBuffer::getSTDIN();
    if (!in) {
      emitError(UnknownLoc::get(&context))
          << "cannot read the program from stdin: " << in.getError().message();
      return nullptr;
    }
    buffer = std::move(*in);
  } else {
    std::string text, error;
    if (!exec::readFile(path.str(), text, error, "program")) {
      emitError(FileLineColLoc::get(&context, path, 0, 0)) << error;
      return nullptr;
    }
    buffer = llvm::MemoryBuffer::getMemBufferCopy(text, path);
  }
  StringRef text = buffer->getBuffer();
  StringRef bufferName = buffer->getBufferIdentifier();
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  if (failed(compiler::checkParserHazards(text, bufferName, &context)))
    return nullptr;
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module || (afterParsing && failed(afterParsing(*module))))
    return nullptr;
  // The reference is copied before planning, and planned after the program
  // (whose diagnostics come first).
  OwningOpRef<ModuleOp> reference;
  if (exactReference)
    reference = exactReferenceOf(*module);
  if ((beforePlanning && failed(beforePlanning(*module))) ||
      failed(planProgram(*module)) ||
      (reference && failed(planProgram(*reference))))
    return nullptr;
  if (exactReference)
    *exactReference = std::move(reference);
  return module;
}

OwningOpRef<ModuleOp> kvir::compiler::parseProgram(
    MLIRContext &context, StringRef text,
    llvm::function_ref<LogicalResult(ModuleOp)> beforePlanning) {
  if (failed(compiler::checkParserHazards(text, /*bufferName=*/"", &context)))
    return nullptr;
  // MLIR's lexer reads past the end of a buffer that is not NUL-terminated
  // (an ASan report from the program fuzzer): parse a terminated copy.
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, /*BufferName=*/""),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module || (beforePlanning && failed(beforePlanning(*module))) ||
      failed(planProgram(*module)))
    return nullptr;
  return module;
}

FailureOr<kvrt_kv_dtype> kvir::compiler::programKvDtype(ModuleOp module) {
  std::optional<std::pair<Type, Location>> first;
  auto check = [&](Type type, Location loc) -> WalkResult {
    auto cache = dyn_cast<kv::CacheType>(type);
    if (!cache)
      return WalkResult::advance();
    if (!first) {
      first.emplace(cache.getElementType(), loc);
      return WalkResult::advance();
    }
    if (first->first == cache.getElementType())
      return WalkResult::advance();
    InFlightDiagnostic diag =
        emitError(loc) << "a !kv.cache of " << cache.getElementType()
                       << " pages in a program with caches of " << first->first
                       << " pages: one run keeps one element type";
    diag.attachNote(first->second) << "the first cache of " << first->first;
    return WalkResult::interrupt();
  };
  WalkResult result = module.walk([&](Operation *op) -> WalkResult {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          if (check(arg.getType(), arg.getLoc()).wasInterrupted())
            return WalkResult::interrupt();
    for (Type type : op->getResultTypes())
      if (check(type, op->getLoc()).wasInterrupted())
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();
  return first ? kv::kvDtypeOf(first->first) : KVRT_KV_F32;
}

FailureOr<func::FuncOp> kvir::compiler::lookupEntry(ModuleOp module,
                                                    StringRef name) {
  auto entry = module.lookupSymbol<func::FuncOp>(name);
  if (entry && !entry.isExternal() && entry.isPublic())
    return entry;
  std::string names;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && func.isPublic())
      names += (names.empty() ? "@" : ", @") + func.getName().str();
  return emitError(module.getLoc())
         << "no public function @" << name << " with a body in the program"
         << (names.empty() ? std::string(" (it has none)")
                           : " (functions: " + names + ")");
}

FailureOr<exec::EntryManifest>
kvir::compiler::describeEntry(func::FuncOp entry) {
  exec::EntryManifest manifest;
  manifest.entry = entry.getName().str();
  ModuleOp module = entry->getParentOfType<ModuleOp>();
  module.walk([&](Operation *op) {
    if (kv::isPlanLocation(op->getLoc()))
      manifest.hasPlanOps = true;
  });
  FailureOr<kvrt_kv_dtype> dtype = programKvDtype(module);
  if (failed(dtype))
    return failure();
  manifest.kvDtype = *dtype;
  for (unsigned i = 0, e = entry.getNumArguments(); i < e; ++i) {
    Type type = entry.getArgument(i).getType();
    exec::ArgSpec spec;
    spec.name = "arg" + std::to_string(i);
    if (auto attr = entry.getArgAttrOfType<StringAttr>(i, "kv.name"))
      spec.name = attr.getValue().str();
    if (Attribute hint = entry.getArgAttr(i, "kv.sample_length")) {
      auto length = dyn_cast<IntegerAttr>(hint);
      if (!length || length.getValue().getSignificantBits() > 64 ||
          length.getInt() <= 0)
        return emitError(entry.getLoc())
               << "argument " << spec.name << " of @" << manifest.entry
               << ": kv.sample_length must be a positive integer, got " << hint;
      spec.sampleLength = length.getInt();
    }
    if (auto model = dyn_cast<kv::ModelType>(type)) {
      spec.kind = exec::ValueKind::Model;
      spec.model = model.getConfig();
    } else if (isa<kv::CacheType>(type)) {
      // A cache the caller holds (a server's context): bound by the caller,
      // never from files (bindArguments says so).
      spec.kind = exec::ValueKind::Cache;
    } else if (kv::isTokensType(type) || kv::isQueryType(type)) {
      auto tensor = cast<RankedTensorType>(type);
      spec.kind = kv::isTokensType(type) ? exec::ValueKind::Tokens
                                         : exec::ValueKind::Tensor;
      for (int64_t d = 0; d < tensor.getRank(); ++d)
        spec.dims[d] = tensor.isDynamicDim(d) ? -1 : tensor.getDimSize(d);
    } else {
      return emitError(entry.getLoc())
             << "argument arg" << i << " of @" << entry.getName()
             << " has type " << type
             << ", which a runner cannot bind (it binds !kv.model, "
                "!kv.cache, tensor<?xi32> tokens and tensor<?xHxDxf32> "
                "queries)";
    }
    manifest.args.push_back(spec);
  }
  for (Type type : entry.getResultTypes()) {
    if (isa<kv::CacheType>(type))
      manifest.results.push_back(exec::ValueKind::Cache);
    else if (isa<kv::ModelType>(type))
      manifest.results.push_back(exec::ValueKind::Model);
    else if (kv::isTokensType(type))
      manifest.results.push_back(exec::ValueKind::Tokens);
    else if (kv::isLogitsType(type))
      manifest.results.push_back(exec::ValueKind::Logits);
    else if (kv::isQueryType(type))
      manifest.results.push_back(exec::ValueKind::Tensor);
    else if (type.isIntOrIndex())
      manifest.results.push_back(exec::ValueKind::Index);
    else
      return emitError(entry.getLoc())
             << "@" << entry.getName() << " returns a value of type " << type
             << ", which a runner cannot report";
  }
  return manifest;
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

std::string kvir::compiler::siteText(Location loc) {
  std::string text;
  loc->walk([&](Location inner) {
    if (auto file = dyn_cast<FileLineColLoc>(inner)) {
      text = (file.getFilename().getValue() + ":" + Twine(file.getLine()) +
              ":" + Twine(file.getColumn()))
                 .str();
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (text.empty()) {
    llvm::raw_string_ostream os(text);
    loc.print(os);
  }
  return text;
}

namespace {

/// What the lowering pipeline is given: a copy of `module` that also asks
/// for the exported forward.
OwningOpRef<ModuleOp> loweringInput(ModuleOp module,
                                    const LowerOptions &options) {
  MLIRContext *context = module.getContext();
  OwningOpRef<ModuleOp> input(module.clone());
  if (options.exportModel)
    (*input)->setAttr(kv::kExportForwardsAttrName,
                      ArrayAttr::get(context, {kv::exportForwardEntry(
                                                  context, *options.exportModel,
                                                  options.exportDtype)}));
  if (options.exportModel && !options.exportFormats.allF32())
    (*input)->setAttr(kv::kWeightFormatsAttrName,
                      ArrayAttr::get(context, {kv::weightFormatsEntry(
                                                  context, *options.exportModel,
                                                  options.exportFormats)}));
  return input;
}

/// Adds kv-lower-to-cpu or kv-lower-to-nvvm with the options of `options`
/// to `pm`; failure after a diagnostic at `loc` for GPU options the
/// pipeline refuses.
LogicalResult buildLowering(PassManager &pm, const LowerOptions &options,
                            Location loc) {
  if (options.target == Target::Cpu) {
    kv::LowerToCPUPipelineOptions cpu;
    cpu.vectorBits = options.cpuVectorBits;
    cpu.quantDot = options.cpuQuantDot;
    cpu.checkHost = options.cpuCheckHost;
    kv::buildLowerToCPUPipeline(pm, cpu);
    return success();
  }
  kv::LowerToNVVMPipelineOptions nvvm;
  nvvm.chip = options.chip;
  nvvm.features = options.features;
  nvvm.format = options.format;
  std::string problem = kv::checkLowerToNVVMPipelineOptions(nvvm);
  if (!problem.empty())
    return emitError(loc) << problem;
  kv::buildLowerToNVVMPipeline(pm, nvvm);
  return success();
}

/// Runs `pm` (buildLowering) on `input`, then moves the sites it recorded
/// (the module attribute kv.exec_sites) into `sites`.
LogicalResult runLowering(PassManager &pm, ModuleOp input,
                          const LowerOptions &options, Location loc,
                          std::vector<Location> &sites) {
  if (failed(pm.run(input)))
    return emitError(loc) << "lowering the program with "
                          << (options.target == Target::Cpu
                                  ? "kv-lower-to-cpu"
                                  : "kv-lower-to-nvvm")
                          << " failed";
  sites.clear();
  if (auto attr = input->getAttrOfType<ArrayAttr>(kv::kExecSitesAttrName)) {
    for (Attribute site : attr)
      sites.push_back(cast<LocationAttr>(site));
    input->removeAttr(kv::kExecSitesAttrName);
  }
  return success();
}

} // namespace

OwningOpRef<ModuleOp>
kvir::compiler::lowerProgram(ModuleOp module, const LowerOptions &options,
                             std::vector<Location> &sites) {
  OwningOpRef<ModuleOp> lowered = loweringInput(module, options);
  PassManager pm(module.getContext());
  if (failed(buildLowering(pm, options, module.getLoc())) ||
      failed(runLowering(pm, *lowered, options, module.getLoc(), sites)))
    return nullptr;
  return lowered;
}

//===----------------------------------------------------------------------===//
// JIT
//===----------------------------------------------------------------------===//

JitProgram::~JitProgram() = default;

namespace {

/// The exec ABI (and, for the GPU, the mgpu* functions), resolved against
/// this process.
llvm::orc::SymbolMap runtimeSymbols(Target target,
                                    llvm::orc::MangleAndInterner &interner) {
  llvm::orc::SymbolMap map;
  auto add = [&](const char *name, void *address) {
    map[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                           llvm::JITSymbolFlags::Exported};
  };
  for (const kvrt_exec_symbol *s = kvrt_exec_symbols(); s->name; ++s)
    add(s->name, s->address);
  if (target == Target::Gpu)
    for (const kvrt_cuda_symbol *s = kvrt_cuda_mgpu_symbols(); s->name; ++s)
      add(s->name, s->address);
  return map;
}

/// The object code `engine` compiled `lowered` to ("" when it cannot be had:
/// the run goes on without storing it). `engine` was created with
/// enableObjectDump.
std::string compiledObject(ExecutionEngine &engine, ModuleOp lowered) {
  // The engine compiles on the first lookup, the whole module at once: look
  // up one function it exports.
  for (auto func : lowered.getOps<LLVM::LLVMFuncOp>()) {
    if (func.isExternal() || func.getLinkage() != LLVM::Linkage::External)
      continue;
    auto address = engine.lookup(func.getSymName());
    if (!address) {
      llvm::consumeError(address.takeError());
      return "";
    }
    break;
  }
  // The engine writes its object to a file only.
  int fd;
  llvm::SmallString<128> path;
  if (llvm::sys::fs::createTemporaryFile("kvir-jit", "o", fd, path))
    return "";
  ::close(fd);
  engine.dumpToObjectFile(path);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  llvm::sys::fs::remove(path);
  return buffer ? (*buffer)->getBuffer().str() : "";
}

} // namespace

std::unique_ptr<JitProgram> JitProgram::create(ModuleOp lowered, Target target,
                                               Location loc,
                                               std::string *object) {
  initializeNativeTarget();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    emitError(loc) << "no host target: " << llvm::toString(builder.takeError());
    return nullptr;
  }
  // One target machine for the optimiser (kept alive here: the transformer
  // holds it by pointer), one that the engine takes for code generation.
  auto optTM = builder->createTargetMachine();
  auto tm = builder->createTargetMachine();
  if (!optTM || !tm) {
    llvm::Error error = optTM ? tm.takeError() : optTM.takeError();
    emitError(loc) << "no host target machine: "
                   << llvm::toString(std::move(error));
    return nullptr;
  }
  // The transformer is a function_ref: it must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer =
      makeOptimizingTransformer(3, 0, optTM->get());
  ExecutionEngineOptions options;
  options.transformer = transformer;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  options.enableGDBNotificationListener = false;
  // KVIR_PERF=1: the code registered with perf (docs/cpu-backend.md).
  options.enablePerfNotificationListener = std::getenv("KVIR_PERF") != nullptr;
  // The engine keeps a copy of the object it compiles (for the compile
  // cache): the code is the same either way.
  options.enableObjectDump = object != nullptr;
  auto engine = ExecutionEngine::create(lowered, options, std::move(*tm));
  if (!engine) {
    emitError(loc) << "JIT compilation failed: "
                   << llvm::toString(engine.takeError());
    return nullptr;
  }
  (*engine)->registerSymbols([target](llvm::orc::MangleAndInterner interner) {
    return runtimeSymbols(target, interner);
  });
  // Runs the module's constructors (for the GPU: its binary is loaded).
  (*engine)->initialize();
  if (object)
    *object = compiledObject(**engine, lowered);
  std::unique_ptr<JitProgram> program(new JitProgram());
  program->engine = std::move(*engine);
  return program;
}

std::unique_ptr<JitProgram> JitProgram::load(StringRef object,
                                             std::string &error) {
  initializeNativeTarget();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    error = "no host target: " + llvm::toString(builder.takeError());
    return nullptr;
  }
  // Linked as the ExecutionEngine links what it compiles (RuntimeDyld, its
  // memory manager), with no platform: CPU code has no constructors.
  llvm::JITEventListener *perf =
      std::getenv("KVIR_PERF")
          ? llvm::JITEventListener::createPerfJITEventListener()
          : nullptr;
  auto jit =
      llvm::orc::LLJITBuilder()
          .setJITTargetMachineBuilder(std::move(*builder))
          .setPlatformSetUp(llvm::orc::setUpInactivePlatform)
          .setObjectLinkingLayerCreator(
              [perf](llvm::orc::ExecutionSession &session) {
                auto layer =
                    std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
                        session, [](const llvm::MemoryBuffer &) {
                          return std::make_unique<llvm::SectionMemoryManager>();
                        });
                if (perf)
                  layer->registerJITEventListener(*perf);
                return std::unique_ptr<llvm::orc::ObjectLayer>(
                    std::move(layer));
              })
          .create();
  if (!jit) {
    error = "cannot create the JIT: " + llvm::toString(jit.takeError());
    return nullptr;
  }
  // A failed link is reported by the lookup that needs it, not on stderr.
  (*jit)->getExecutionSession().setErrorReporter(
      [](llvm::Error e) { llvm::consumeError(std::move(e)); });
  llvm::orc::JITDylib &main = (*jit)->getMainJITDylib();
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(),
                                        (*jit)->getDataLayout());
  llvm::Error added = main.define(
      llvm::orc::absoluteSymbols(runtimeSymbols(Target::Cpu, interner)));
  if (!added)
    added = (*jit)->addObjectFile(
        llvm::MemoryBuffer::getMemBufferCopy(object, "kvir-cached-object"));
  if (added) {
    error = "cannot add the object: " + llvm::toString(std::move(added));
    return nullptr;
  }
  std::unique_ptr<JitProgram> program(new JitProgram());
  program->loaded = std::move(*jit);
  return program;
}

void *JitProgram::lookup(StringRef symbol) {
  if (loaded) {
    auto address = loaded->lookup(symbol);
    if (!address) {
      llvm::consumeError(address.takeError());
      return nullptr;
    }
    return address->toPtr<void *>();
  }
  auto address = engine->lookup(symbol);
  if (!address) {
    llvm::consumeError(address.takeError());
    return nullptr;
  }
  return *address;
}

exec::EntryFn JitProgram::entry(StringRef name) {
  return reinterpret_cast<exec::EntryFn>(lookup(exec::entrySymbol(name.str())));
}

Forward JitProgram::forward(const kvrt_model_config &config,
                            kvrt_kv_dtype dtype,
                            const kvir::WeightFormats &formats) {
  Forward f;
  std::string key = forwardKey(config, dtype, formats);
  std::unique_ptr<std::string> &stored = keys[key];
  if (!stored)
    stored = std::make_unique<std::string>(key);
  f.key = stored->c_str();
  auto entry = [&](kv::ForwardEntryPoint point) {
    return lookup(kv::forwardEntryName(config, dtype, formats, point));
  };
  f.prefill =
      reinterpret_cast<kvrt_prefill_fn>(entry(kv::ForwardEntryPoint::Prefill));
  f.attention = reinterpret_cast<kvrt_attention_fn>(
      entry(kv::ForwardEntryPoint::Attention));
  f.materialize = reinterpret_cast<kvrt_materialize_fn>(
      entry(kv::ForwardEntryPoint::Materialize));
  return f;
}

namespace {

/// The key of the code `pm` and the JIT make of `input`: the module with its
/// locations (the sites an entry records come from them) and the pipeline
/// with every option. What else decides the code (KVIR's, LLVM's and the
/// CPU's identity) the cache mixes in itself.
CacheKey loweringKey(ModuleOp input, PassManager &pm) {
  std::string module, pipeline;
  llvm::raw_string_ostream moduleOS(module), pipelineOS(pipeline);
  input->print(moduleOS, OpPrintingFlags().enableDebugInfo(
                             /*enable=*/true, /*prettyForm=*/false));
  pm.printAsTextualPipeline(pipelineOS);
  return CacheKeyBuilder()
      .add("kind", "kv-jit-cpu")
      // How JitProgram::create compiles: bump it when that changes.
      .add("jit", "llvm O3, codegen aggressive, host cpu, v1")
      .add("pipeline", pipeline)
      .add("module", module)
      .finish();
}

/// The sites as the cache keeps them: one printed array of locations.
std::string printSites(ArrayRef<Location> sites, MLIRContext *context) {
  SmallVector<Attribute> attrs(sites.begin(), sites.end());
  std::string text;
  llvm::raw_string_ostream os(text);
  ArrayAttr::get(context, attrs).print(os);
  return text;
}

bool parseSites(StringRef text, MLIRContext *context,
                std::vector<Location> &sites) {
  auto attr = dyn_cast_or_null<ArrayAttr>(parseAttribute(text, context));
  if (!attr)
    return false;
  sites.clear();
  for (Attribute site : attr) {
    auto loc = dyn_cast<LocationAttr>(site);
    if (!loc)
      return false;
    sites.push_back(loc);
  }
  return true;
}

/// Warns once per process that the compile cache could not store an entry.
void warnStoreFailed(Location loc, const std::string &error) {
  static std::once_flag once;
  std::call_once(once, [&] {
    emitWarning(loc) << "compile cache: cannot store the compiled code: "
                     << error;
  });
}

/// Lowers `module` (lowerProgram) and JIT-compiles it, or, where the
/// process has a compile cache (CPU code only: GPU code loads its kernels in
/// constructors, which a cached object would need a platform runtime to
/// run), loads the code compiled before from the cache, with the sites.
/// `symbols` must resolve in the loaded code, else it is compiled afresh.
std::unique_ptr<JitProgram>
compileModule(ModuleOp module, const LowerOptions &options, Location loc,
              ArrayRef<std::string> symbols, std::vector<Location> &sites) {
  MLIRContext *context = module.getContext();
  OwningOpRef<ModuleOp> input = loweringInput(module, options);
  PassManager pm(context);
  if (failed(buildLowering(pm, options, module.getLoc())))
    return nullptr;
  std::shared_ptr<CompileCache> cache =
      options.target == Target::Cpu ? compileCache() : nullptr;
  CacheKey key;
  if (cache) {
    key = loweringKey(*input, pm);
    CacheEntry entry;
    if (cache->load(key, entry)) {
      std::string error;
      std::unique_ptr<JitProgram> jit = JitProgram::load(entry.object, error);
      bool usable = jit && parseSites(entry.metadata, context, sites);
      for (const std::string &symbol : symbols)
        usable = usable && jit->lookup(symbol);
      if (usable)
        return jit;
      cache->countUnusable();
    }
  }
  if (failed(runLowering(pm, *input, options, module.getLoc(), sites)))
    return nullptr;
  std::string object;
  std::unique_ptr<JitProgram> jit = JitProgram::create(
      *input, options.target, loc, cache ? &object : nullptr);
  if (jit && cache && !object.empty()) {
    std::string error;
    if (!cache->store(key, {object, printSites(sites, context)}, error))
      warnStoreFailed(loc, error);
  }
  return jit;
}

} // namespace

FailureOr<CompiledProgram>
kvir::compiler::compileProgram(OwningOpRef<ModuleOp> planned,
                               StringRef entryName,
                               const LowerOptions &options) {
  CompiledProgram program;
  program.planned = std::move(planned);
  FailureOr<func::FuncOp> entry = lookupEntry(*program.planned, entryName);
  if (failed(entry))
    return failure();
  FailureOr<exec::EntryManifest> manifest = describeEntry(*entry);
  if (failed(manifest))
    return failure();
  program.manifest = std::move(*manifest);
  program.manifest.target = options.target == Target::Gpu ? "gpu" : "cpu";
  std::vector<std::string> symbols = {exec::entrySymbol(entryName.str())};
  if (options.exportModel)
    for (kv::ForwardEntryPoint point : kForwardEntryPoints)
      symbols.push_back(kv::forwardEntryName(*options.exportModel,
                                             options.exportDtype,
                                             options.exportFormats, point));
  program.jit = compileModule(*program.planned, options, entry->getLoc(),
                              symbols, program.sites);
  if (!program.jit)
    return failure();
  for (Location site : program.sites)
    program.manifest.sites.push_back(siteText(site));
  program.entry = program.jit->entry(entryName);
  if (!program.entry)
    return emitError(entry->getLoc()) << "the compiled program has no "
                                      << exec::entrySymbol(entryName.str());
  if (options.exportModel)
    program.forward = program.jit->forward(
        *options.exportModel, options.exportDtype, options.exportFormats);
  return program;
}

//===----------------------------------------------------------------------===//
// Forwards alone
//===----------------------------------------------------------------------===//

namespace {

/// A context with every dialect a forward and its lowering use.
MLIRContext &forwardContext() {
  static MLIRContext *context = [] {
    DialectRegistry registry;
    registerDialects(registry);
    auto *ctx = new MLIRContext(registry, MLIRContext::Threading::DISABLED);
    ctx->loadDialect<kv::KVDialect>();
    return ctx;
  }();
  return *context;
}

/// A module asking for the forward of `config` with weights in `formats`.
OwningOpRef<ModuleOp> forwardModule(MLIRContext &ctx,
                                    const kvrt_model_config &config,
                                    kvrt_kv_dtype dtype,
                                    const kvir::WeightFormats &formats) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  (*module)->setAttr(
      kv::kExportForwardsAttrName,
      ArrayAttr::get(&ctx, {kv::exportForwardEntry(&ctx, config, dtype)}));
  if (!formats.allF32())
    (*module)->setAttr(
        kv::kWeightFormatsAttrName,
        ArrayAttr::get(&ctx, {kv::weightFormatsEntry(&ctx, config, formats)}));
  return module;
}

} // namespace

kvrt_status kvir::compiler::compileForward(const kvrt_model_config &config,
                                           Target target, Forward *out,
                                           kvrt_kv_dtype dtype,
                                           int64_t cpuVectorBits,
                                           const kvir::WeightFormats &formats,
                                           const std::string &cpuQuantDot) {
  if (!out)
    return kvrt::nullArgument(__func__);
  static std::mutex mutex;
  static auto &cache = *new std::map<std::string, Forward>();
  static auto &programs = *new std::vector<std::unique_ptr<JitProgram>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::string key =
      forwardKey(config, dtype, formats) +
      (target == Target::Gpu
           ? " gpu"
           : " cpu" + std::to_string(cpuVectorBits) + " " + cpuQuantDot);
  auto it = cache.find(key);
  if (it != cache.end()) {
    *out = it->second;
    return KVRT_OK;
  }
  std::string problem = describeArchitectureError(config);
  if (!problem.empty())
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("unsupported model config: ", problem));
  MLIRContext &ctx = forwardContext();
  CollectDiagnostics diagnostics(ctx);
  OwningOpRef<ModuleOp> module = forwardModule(ctx, config, dtype, formats);
  std::vector<Location> sites;
  LowerOptions options;
  options.target = target;
  options.format = "isa";
  options.cpuVectorBits = cpuVectorBits;
  options.cpuQuantDot = cpuQuantDot;
  std::vector<std::string> symbols;
  for (kv::ForwardEntryPoint point : kForwardEntryPoints)
    symbols.push_back(kv::forwardEntryName(config, dtype, formats, point));
  std::unique_ptr<JitProgram> jit =
      compileModule(*module, options, module->getLoc(), symbols, sites);
  if (!jit)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot compile the forward: ", diagnostics.text));
  Forward forward = jit->forward(config, dtype, formats);
  if (!forward.prefill || !forward.attention || !forward.materialize)
    return fail(KVRT_ERR_INTERNAL, "the compiled forward lacks entry points");
  programs.push_back(std::move(jit));
  cache.emplace(key, forward);
  *out = forward;
  return KVRT_OK;
}

LogicalResult kvir::compiler::emitForwardObject(
    MLIRContext &context, const kvrt_model_config &config, kvrt_kv_dtype dtype,
    const kvir::WeightFormats &formats, StringRef cpuQuantDot, StringRef path) {
  context.loadDialect<kv::KVDialect>();
  OwningOpRef<ModuleOp> module = forwardModule(context, config, dtype, formats);
  std::string problem = describeArchitectureError(config);
  if (!problem.empty())
    return emitError(module->getLoc())
           << "unsupported model config: " << problem;
  LowerOptions options;
  options.target = Target::Cpu;
  options.format = "isa";
  options.cpuQuantDot = cpuQuantDot.str();
  std::vector<Location> sites;
  OwningOpRef<ModuleOp> lowered = lowerProgram(*module, options, sites);
  if (!lowered)
    return failure();
  return emitObject(*lowered, {}, path, "native");
}

namespace {

/// The body of compileMatmul and compileQuantMatmul: `kv_matmul` (its C
/// wrapper's address in `*out`), the product of weights in `format` as the
/// forward's CPU target emits it. Past f32 it takes a fifth argument, the
/// table of the weight's offset among the rows repacked for decode
/// (WeightRef::decodeRowsOffsets, one entry), over the weights' own buffer.
kvrt_status compileProduct(const char *caller, int64_t m, int64_t k,
                           kvrt_weight_format format, void **out) {
  if (!out)
    return kvrt::nullArgument(caller);
  if (m <= 0 || k <= 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(caller, ": sizes ", m, " x ", k, " must be positive"));
  kvir::WeightFormats formats;
  if (format != KVRT_WEIGHT_F32) {
    // Only the query's weight is read; its format names the kernels.
    std::string error;
    std::optional<kvir::WeightFormats> parsed = kvir::WeightFormats::parse(
        str("wq:", kvrt::weightFormatName(format)), 1, error);
    if (!parsed)
      return fail(KVRT_ERR_INVALID_ARGUMENT, str(caller, ": ", error));
    formats = *parsed;
    int64_t block = kvrt::blockLayout(format).elements;
    if (k % block != 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str(caller, ": rows of ", k, " elements are not whole ",
                      kvrt::weightFormatName(format), " blocks of ", block));
  }
  static std::mutex mutex;
  static auto &programs = *new std::vector<std::unique_ptr<JitProgram>>();
  std::lock_guard<std::mutex> lock(mutex);
  MLIRContext &ctx = forwardContext();
  DialectRegistry forwardDialects;
  kv::registerForwardDialects(forwardDialects);
  ctx.appendDialectRegistry(forwardDialects);
  ctx.loadAllAvailableDialects();
  CollectDiagnostics diagnostics(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&ctx));
  // The stages of a forward whose sizes fit the product (dim k, hidden m):
  // only the matmul is called.
  kvrt_model_config config;
  kvrt_model_config_init(&config);
  config.dim = k;
  config.hidden_dim = m;
  config.n_layers = 1;
  config.n_heads = 1;
  config.n_kv_heads = 1;
  config.vocab_size = m;
  std::unique_ptr<kv::ForwardTarget> target = kv::createCpuTarget();
  kv::ForwardEmitter e(*module, config, "kv_matmul");
  e.formats = formats;
  target->emitKernels(e);
  Type buffer = e.buffer(e.f32());
  SmallVector<Type> arguments{buffer, e.buffer(e.byte()), buffer, e.index()};
  if (format != KVRT_WEIGHT_F32)
    arguments.push_back(e.buffer(e.i64()));
  func::FuncOp f = e.beginFunction("kv_matmul", arguments, /*isPublic=*/true);
  f->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(), UnitAttr::get(&ctx));
  Value zero = e.cIndex(0);
  kv::WeightRef weights;
  weights.bytes = f.getArgument(1);
  weights.offset = zero;
  weights.format = format;
  if (format != KVRT_WEIGHT_F32) {
    weights.decodeRows = f.getArgument(1);
    weights.decodeRowsOffsets = f.getArgument(4);
    weights.packedEntry = zero;
  }
  target->matmul(e, {f.getArgument(0), zero}, weights, {f.getArgument(2), zero},
                 f.getArgument(3), m, k,
                 /*accumulate=*/false);
  target->releaseTemporaries(e);
  e.finishFunction();
  PassManager pm(&ctx);
  kv::buildLowerToCPUPipeline(pm, kv::LowerToCPUPipelineOptions());
  if (failed(pm.run(*module)))
    return fail(KVRT_ERR_INTERNAL,
                str("cannot lower the matmul: ", diagnostics.text));
  std::unique_ptr<JitProgram> jit =
      JitProgram::create(*module, Target::Cpu, module->getLoc());
  if (!jit)
    return fail(KVRT_ERR_INTERNAL,
                str("cannot JIT-compile the matmul: ", diagnostics.text));
  *out = jit->lookup("_mlir_ciface_kv_matmul");
  programs.push_back(std::move(jit));
  return *out ? KVRT_OK
              : fail(KVRT_ERR_INTERNAL, "the compiled matmul has no entry");
}

} // namespace

kvrt_status kvir::compiler::compileMatmul(int64_t m, int64_t k, MatmulFn *out) {
  void *fn = nullptr;
  kvrt_status status =
      compileProduct(__func__, m, k, KVRT_WEIGHT_F32, out ? &fn : nullptr);
  if (out)
    *out = reinterpret_cast<MatmulFn>(fn);
  return status;
}

kvrt_status kvir::compiler::compileQuantMatmul(kvrt_weight_format format,
                                               int64_t m, int64_t k,
                                               QuantMatmulFn *out) {
  if (format == KVRT_WEIGHT_F32)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "compileQuantMatmul: f32 weights are compileMatmul's");
  void *fn = nullptr;
  kvrt_status status =
      compileProduct(__func__, m, k, format, out ? &fn : nullptr);
  if (out)
    *out = reinterpret_cast<QuantMatmulFn>(fn);
  return status;
}

kvrt_status kvir::compiler::getForwardSource(const kvrt_model_config &config,
                                             Target target, bool lowered,
                                             std::string *out) {
  if (!out)
    return kvrt::nullArgument(__func__);
  MLIRContext &ctx = forwardContext();
  CollectDiagnostics diagnostics(ctx);
  OwningOpRef<ModuleOp> module =
      forwardModule(ctx, config, KVRT_KV_F32, kvir::WeightFormats());
  PassManager pm(&ctx);
  if (!lowered)
    pm.addPass(target == Target::Cpu ? kv::createConvertKVToCPUPass()
                                     : kv::createConvertKVToGPUPass());
  else if (target == Target::Cpu)
    kv::buildLowerToCPUPipeline(pm, kv::LowerToCPUPipelineOptions());
  else
    kv::buildLowerToNVVMPipeline(pm, kv::LowerToNVVMPipelineOptions());
  if (failed(pm.run(*module)))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot build the forward: ", diagnostics.text));
  out->clear();
  llvm::raw_string_ostream os(*out);
  module->print(os);
  return KVRT_OK;
}

//===----------------------------------------------------------------------===//
// Ahead of time
//===----------------------------------------------------------------------===//

LogicalResult
kvir::compiler::emitObject(ModuleOp lowered,
                           ArrayRef<exec::EntryManifest> manifests,
                           StringRef path, StringRef cpu) {
  initializeNativeTarget();
  MLIRContext *context = lowered.getContext();
  // The manifests, so that a runner without MLIR knows each entry's
  // signature.
  OpBuilder builder(context);
  builder.setInsertionPointToEnd(lowered.getBody());
  for (const exec::EntryManifest &manifest : manifests) {
    std::string text = manifest.serialize() + '\0';
    auto type = LLVM::LLVMArrayType::get(builder.getI8Type(), text.size());
    LLVM::GlobalOp::create(builder, lowered.getLoc(), type,
                           /*isConstant=*/true, LLVM::Linkage::External,
                           exec::manifestSymbol(manifest.entry),
                           builder.getStringAttr(text));
  }
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> module =
      translateModuleToLLVMIR(lowered, llvmContext, "kv-program");
  if (!module)
    return emitError(lowered.getLoc())
           << "translating the program to LLVM IR failed";
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target)
    return emitError(lowered.getLoc()) << "no host target: " << lookupError;
  std::string cpuName =
      cpu == "native" ? llvm::sys::getHostCPUName().str() : cpu.str();
  std::string features;
  if (cpu == "native") {
    llvm::SubtargetFeatures subtarget;
    for (const auto &[feature, enabled] : llvm::sys::getHostCPUFeatures())
      subtarget.AddFeature(feature, enabled);
    features = subtarget.getString();
  }
  llvm::TargetOptions targetOptions;
  // A GPU binary is loaded by a constructor: .init_array, which every linker
  // and loader runs (lld does not turn .ctors into it).
  targetOptions.UseInitArray = true;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, cpuName, features, targetOptions, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return emitError(lowered.getLoc())
           << "no target machine for CPU '" << cpuName << "'";
  module->setTargetTriple(triple);
  module->setDataLayout(machine->createDataLayout());
  if (llvm::Error error =
          makeOptimizingTransformer(3, 0, machine.get())(module.get()))
    return emitError(lowered.getLoc()) << "optimizing the program failed: "
                                       << llvm::toString(std::move(error));
  std::error_code ec;
  llvm::raw_fd_ostream object(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return emitError(lowered.getLoc())
           << "cannot write " << path << ": " << ec.message();
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, object, nullptr,
                                   llvm::CodeGenFileType::ObjectFile))
    return emitError(lowered.getLoc()) << "the host target cannot emit objects";
  codegen.run(*module);
  object.close();
  if (object.has_error()) {
    object.clear_error();
    return emitError(lowered.getLoc()) << "cannot write " << path;
  }
  return success();
}

/// The subtarget of LLVM CPU `cpu` on this host's triple (null where LLVM
/// has no target for it).
static std::unique_ptr<llvm::MCSubtargetInfo> subtargetOf(StringRef cpu) {
  initializeNativeTarget();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target)
    return nullptr;
  return std::unique_ptr<llvm::MCSubtargetInfo>(
      target->createMCSubtargetInfo(triple, cpu, ""));
}

std::string kvir::compiler::quantDotFor(StringRef cpu, StringRef requested) {
  if (requested != "auto" || cpu == "native")
    return requested.str();
  std::unique_ptr<llvm::MCSubtargetInfo> info = subtargetOf(cpu);
  if (!info || !info->checkFeatures("+avx512vnni,+avx512bw"))
    return info && info->checkFeatures("+avx2") ? "avx2" : "f32";
  // auto takes AMX tiles where this host has them (CpuTarget): not in an
  // object for a CPU without.
  if (!info->checkFeatures("+amx-tile,+amx-int8") && mlir::kv::hostHasAmx())
    return "int8";
  return "auto";
}

std::string kvir::compiler::quantDotRefusal(StringRef cpu, StringRef quantDot) {
  if (!mlir::kv::parseQuantDot(quantDot))
    return ("quant-dot '" + quantDot +
            "' is unknown (available: auto, f32, int8, amx, avx2)")
        .str();
  if (cpu == "native")
    return "";
  struct Need {
    StringRef quantDot, features, names;
  };
  const Need needs[] = {{"int8", "+avx512vnni,+avx512bw", "AVX-512 VNNI"},
                        {"amx", "+avx512vnni,+avx512bw,+amx-tile,+amx-int8",
                         "AVX-512 VNNI and AMX"},
                        {"avx2", "+avx2", "AVX2"}};
  for (const Need &need : needs) {
    if (need.quantDot != quantDot)
      continue;
    std::unique_ptr<llvm::MCSubtargetInfo> info = subtargetOf(cpu);
    if (!info || !info->checkFeatures(need.features))
      return ("quant-dot " + quantDot + " needs " + need.names +
              ", which CPU '" + cpu + "' lacks")
          .str();
  }
  return "";
}
