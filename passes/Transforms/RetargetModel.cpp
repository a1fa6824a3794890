//===- RetargetModel.cpp - Retype a program to another model ----*- C++ -*-===//
//
// A kv program names the shape of its model in its types: `!kv.model<...>`,
// the layers x KV heads x head size of every `!kv.cache`, and the vocabulary
// as the columns of its logits. This pass rewrites those from the model the
// program was written for to another one, so that one program runs on model
// files of any shape. Everything is checked before anything changes: a
// program it cannot follow is left as it was, with a diagnostic.
//
//===----------------------------------------------------------------------===//

#include "passes/Transforms/RetargetModel.h"

#include "passes/Passes.h"

#include "dialects/KV/KVOps.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::kv {
#define GEN_PASS_DEF_KVRETARGETMODELPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

/// Calls `fn(type, loc)` for every type `op` holds itself: its results', its
/// regions' block arguments' and those inside its attributes (a function's
/// type, a module's kv.export_forwards), nested types included.
template <typename Fn> void forEachTypeOf(Operation *op, Fn fn) {
  auto walkType = [&](Type type, Location loc) {
    type.walk([&](Type nested) { fn(nested, loc); });
  };
  for (Value result : op->getResults())
    walkType(result.getType(), op->getLoc());
  for (Region &region : op->getRegions())
    for (Block &block : region)
      for (BlockArgument arg : block.getArguments())
        walkType(arg.getType(), arg.getLoc());
  op->getAttrDictionary().walk([&](Type nested) { fn(nested, op->getLoc()); });
}

/// The logits of a program: the values whose columns are the vocabulary,
/// and the function signature slots they flow through.
struct LogitsFlow {
  llvm::SetVector<Value> values;
  /// Function results (resp. arguments) that carry logits, by index.
  llvm::MapVector<func::FuncOp, llvm::SmallSetVector<unsigned, 2>> results,
      arguments;
};

/// Follows the logits of every kv.prefill, kv.prefill_chain and kv.logits
/// through returns and calls into `flow`. Fails at a use whose type it cannot
/// derive.
LogicalResult traceLogits(ModuleOp module, ModelType from, LogitsFlow &flow) {
  SmallVector<Value> worklist;
  module.walk([&](Operation *op) {
    if (auto prefill = dyn_cast<PrefillOp>(op))
      worklist.push_back(prefill.getLogits());
    else if (auto chain = dyn_cast<PrefillChainOp>(op))
      worklist.push_back(chain.getLogits());
    else if (auto logits = dyn_cast<LogitsOp>(op))
      worklist.push_back(logits.getLogits());
  });
  SymbolTableCollection symbols;
  SymbolUserMap users(symbols, module);
  auto add = [&](Value value) {
    if (flow.values.insert(value))
      worklist.push_back(value);
  };
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    flow.values.insert(value);
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      unsigned index = use.getOperandNumber();
      if (auto ret = dyn_cast<func::ReturnOp>(user)) {
        auto func = ret->getParentOfType<func::FuncOp>();
        if (!func || !flow.results[func].insert(index))
          continue;
        for (Operation *caller : users.getUsers(func)) {
          auto call = dyn_cast<func::CallOp>(caller);
          if (!call) {
            caller->emitOpError()
                << "uses @" << func.getSymName() << ", whose result " << index
                << " is logits over the vocabulary of " << from.getVocab()
                << ": kv-retarget-model retypes only func.call results";
            return failure();
          }
          add(call.getResult(index));
        }
        continue;
      }
      if (auto call = dyn_cast<func::CallOp>(user)) {
        auto callee = symbols.lookupNearestSymbolFrom<func::FuncOp>(
            call, call.getCalleeAttr());
        if (!callee || callee.isExternal()) {
          InFlightDiagnostic diag =
              call.emitOpError()
              << "passes logits over the vocabulary of " << from.getVocab()
              << " to a function without a body: kv-retarget-model cannot "
                 "retype its argument";
          diag.attachNote(value.getLoc()) << "the logits";
          return failure();
        }
        if (flow.arguments[callee].insert(index))
          add(callee.getArgument(index));
        continue;
      }
      InFlightDiagnostic diag =
          user->emitOpError()
          << "uses logits over the vocabulary of " << from.getVocab() << " ("
          << value.getType()
          << "): kv-retarget-model cannot derive its types for another "
             "vocabulary (it follows logits through func.return and "
             "func.call)";
      diag.attachNote(value.getLoc()) << "the logits";
      return failure();
    }
  }
  // Every value that flows into a retyped slot must be logits too: a return
  // or call that passes something else there would no longer type-check.
  for (auto &entry : flow.results) {
    func::FuncOp func = entry.first;
    for (unsigned index : entry.second) {
      WalkResult walk = func.walk([&](func::ReturnOp ret) {
        if (flow.values.contains(ret.getOperand(index)))
          return WalkResult::advance();
        ret.emitOpError() << "returns a value that is not logits as result "
                          << index << " of @" << func.getSymName()
                          << ", which other returns make logits over the "
                             "vocabulary: kv-retarget-model cannot retype it";
        return WalkResult::interrupt();
      });
      if (walk.wasInterrupted())
        return failure();
    }
  }
  for (auto &[callee, indices] : flow.arguments)
    for (Operation *caller : users.getUsers(callee))
      for (unsigned index : indices) {
        auto call = dyn_cast<func::CallOp>(caller);
        if (call && flow.values.contains(call.getOperand(index)))
          continue;
        caller->emitOpError()
            << "passes a value that is not logits as argument " << index
            << " of @" << callee.getSymName()
            << ", which other calls make logits over the vocabulary: "
               "kv-retarget-model cannot retype it";
        return failure();
      }
  return success();
}

/// Checks what the types alone do not say: kv.attention's query shape and
/// layer, and constant token ids, against `to`.
LogicalResult checkOps(ModuleOp module, ModelType from, ModelType to) {
  WalkResult walk = module.walk([&](Operation *op) {
    if (!isa<KVDialect>(op->getDialect()))
      return WalkResult::advance();
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      if (to.getHeads() != from.getHeads() ||
          to.getHeadSize() != from.getHeadSize()) {
        attention.emitOpError()
            << "takes queries of " << from.getHeads() << " heads x head size "
            << from.getHeadSize() << " (" << attention.getQuery().getType()
            << "), the target model has " << to.getHeads() << " x "
            << to.getHeadSize()
            << ": kv-retarget-model does not retype query tensors";
        return WalkResult::interrupt();
      }
      if (int64_t(attention.getLayer()) >= to.getLayers()) {
        attention.emitOpError() << "reads layer " << attention.getLayer()
                                << ", which the target model, of "
                                << to.getLayers() << " layers, does not have";
        return WalkResult::interrupt();
      }
    }
    for (Value operand : op->getOperands()) {
      auto type = dyn_cast<RankedTensorType>(operand.getType());
      DenseIntElementsAttr ids;
      if (!type || type.getRank() != 1 ||
          !type.getElementType().isInteger(32) ||
          !matchPattern(operand, m_Constant(&ids)))
        continue;
      for (APInt id : ids.getValues<APInt>())
        if (id.getSExtValue() >= to.getVocab()) {
          InFlightDiagnostic diag =
              emitError(operand.getLoc())
              << "token id " << id.getSExtValue()
              << " is out of the target model's vocabulary of " << to.getVocab()
              << ": constant token ids are the program's "
              << "own and cannot be retargeted";
          diag.attachNote(op->getLoc()) << "used here";
          return WalkResult::interrupt();
        }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct KVRetargetModelPass
    : public kv::impl::KVRetargetModelPassBase<KVRetargetModelPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (model.empty()) {
      emitError(module.getLoc())
          << "kv-retarget-model needs the target model: "
             "--kv-retarget-model='model=\"!kv.model<dim = ..., ...>\"'";
      return signalPassFailure();
    }
    Type parsed = parseType(model, &getContext());
    auto target = dyn_cast_or_null<ModelType>(parsed);
    if (!target) {
      if (parsed)
        emitError(module.getLoc())
            << "kv-retarget-model's model option must be a !kv.model type, "
               "got "
            << parsed;
      else
        emitError(module.getLoc())
            << "kv-retarget-model cannot parse the model option '" << model
            << "' as a type";
      return signalPassFailure();
    }
    FailureOr<RetargetSummary> summary = retargetModel(module, target);
    if (failed(summary))
      return signalPassFailure();
    numModels = summary->models;
    numCaches = summary->caches;
    numLogits = summary->logits;
    if (emitStatistics)
      emitRemark(module.getLoc())
          << "kv-retarget-model: retyped " << summary->models << " !kv.model, "
          << summary->caches << " !kv.cache and " << summary->logits
          << " logits values";
  }
};

} // namespace

FailureOr<RetargetSummary> mlir::kv::retargetModel(ModuleOp module,
                                                   ModelType target) {
  MLIRContext *context = module.getContext();
  RetargetSummary summary;
  // The one model type of the program, and where it first appears.
  std::optional<Location> fromLoc;
  std::optional<std::pair<ModelType, Location>> otherModel;
  module.walk([&](Operation *op) {
    forEachTypeOf(op, [&](Type type, Location loc) {
      if (auto model = dyn_cast<ModelType>(type)) {
        if (!summary.from) {
          summary.from = model;
          fromLoc = loc;
        } else if (model != summary.from && !otherModel) {
          otherModel.emplace(model, loc);
        }
      }
    });
  });
  ModelType from = summary.from;
  if (!from || from == target)
    return summary;
  if (otherModel) {
    InFlightDiagnostic diag = emitError(otherModel->second)
                              << "the program uses two model types, " << from
                              << " and " << otherModel->first
                              << ": kv-retarget-model retypes a program "
                              << "written for one model";
    diag.attachNote(*fromLoc) << "the first";
    return failure();
  }
  // Every cache must hold K/V of the program's model, or which model's
  // shape it should take is anyone's guess.
  auto ofModel = [&](CacheType cache) {
    return cache.getLayers() == from.getLayers() &&
           cache.getKvHeads() == from.getKvHeads() &&
           cache.getHeadSize() == from.getHeadSize();
  };
  std::optional<std::pair<CacheType, Location>> stray;
  module.walk([&](Operation *op) {
    forEachTypeOf(op, [&](Type type, Location loc) {
      auto cache = dyn_cast<CacheType>(type);
      if (cache && !ofModel(cache) && !stray)
        stray.emplace(cache, loc);
    });
  });
  if (stray) {
    emitError(stray->second)
        << stray->first << " does not hold K/V of the program's model ("
        << from.getLayers() << " layers x " << from.getKvHeads()
        << " KV heads x head size " << from.getHeadSize()
        << "): kv-retarget-model cannot tell what it becomes";
    return failure();
  }
  if (failed(checkOps(module, from, target)))
    return failure();
  LogitsFlow flow;
  bool vocabChanges = from.getVocab() != target.getVocab();
  if (vocabChanges && failed(traceLogits(module, from, flow)))
    return failure();

  // Checked: now rewrite. Logits first (their types hold no kv type), then
  // every model and cache type wherever it appears.
  auto retypeLogits = [&](Type type) -> Type {
    auto tensor = cast<RankedTensorType>(type);
    return tensor.clone({tensor.getDimSize(0), target.getVocab()});
  };
  for (Value value : flow.values)
    value.setType(retypeLogits(value.getType()));
  summary.logits = flow.values.size();
  llvm::SetVector<func::FuncOp> funcs;
  for (auto &entry : flow.results)
    funcs.insert(entry.first);
  for (auto &entry : flow.arguments)
    funcs.insert(entry.first);
  for (func::FuncOp func : funcs) {
    SmallVector<Type> inputs(func.getArgumentTypes());
    SmallVector<Type> results(func.getResultTypes());
    for (unsigned index : flow.results.lookup(func))
      results[index] = retypeLogits(results[index]);
    for (unsigned index : flow.arguments.lookup(func))
      inputs[index] = retypeLogits(inputs[index]);
    func.setFunctionType(FunctionType::get(context, inputs, results));
  }

  module.walk([&](Operation *op) {
    auto count = [&](Value value) {
      if (isa<ModelType>(value.getType()))
        ++summary.models;
      else if (isa<CacheType>(value.getType()))
        ++summary.caches;
    };
    llvm::for_each(op->getResults(), count);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        llvm::for_each(block.getArguments(), count);
  });
  AttrTypeReplacer replacer;
  replacer.addReplacement([&](ModelType) -> Type { return target; });
  replacer.addReplacement([&](CacheType cache) -> Type {
    return CacheType::get(context, target.getLayers(), target.getKvHeads(),
                          target.getHeadSize(), cache.getElementType(),
                          cache.getContextName());
  });
  replacer.recursivelyReplaceElementsIn(module, /*replaceAttrs=*/true,
                                        /*replaceLocs=*/false,
                                        /*replaceTypes=*/true);
  return summary;
}
