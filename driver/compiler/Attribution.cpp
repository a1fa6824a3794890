//===- Attribution.cpp - The entry an attribution runs ----------*- C++ -*-===//

#include "driver/compiler/Attribution.h"
#include "driver/compiler/Compiler.h"

#include "dialects/KV/KVOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Iterators.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace kvir;
using namespace kvir::compiler;

namespace {

/// The single func.return of `func`, or null.
func::ReturnOp singleReturn(func::FuncOp func) {
  func::ReturnOp found;
  int count = 0;
  func.walk([&](func::ReturnOp op) {
    found = op;
    ++count;
  });
  return count == 1 ? found : func::ReturnOp();
}

} // namespace

FailureOr<AttributionEntry>
kvir::compiler::addAttributionEntry(ModuleOp module, StringRef entryName) {
  FailureOr<func::FuncOp> entry = lookupEntry(module, entryName);
  if (failed(entry))
    return failure();
  auto diag = [&]() { return emitError(entry->getLoc()) << "--attribute: "; };
  std::optional<unsigned> answerIndex;
  for (auto [i, type] : llvm::enumerate(entry->getResultTypes())) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (tensor && tensor.getRank() == 2 && tensor.getElementType().isF32()) {
      answerIndex = i;
      break;
    }
  }
  if (!answerIndex)
    return diag() << "@" << entryName
                  << " returns no logits: there is no answer to attribute";
  func::ReturnOp ret = singleReturn(*entry);
  if (!ret)
    return diag() << "@" << entryName << " must have exactly one func.return";
  Value answer = ret.getOperand(*answerIndex);
  auto logits = answer.getDefiningOp<kv::LogitsOp>();
  kv::EditOp edit =
      logits ? logits.getCache().getDefiningOp<kv::EditOp>() : kv::EditOp();
  if (!edit) {
    Operation *def = (logits ? logits.getCache() : answer).getDefiningOp();
    std::string what =
        def ? "defined by '" + def->getName().getStringRef().str() + "'"
            : "an argument of @" + entryName.str();
    return diag() << "the answer (result " << *answerIndex << " of @"
                  << entryName
                  << ") must be kv.logits of a segment of a kv.edit's "
                     "result; "
                  << (logits ? "its cache" : "it") << " is " << what;
  }

  AttributionEntry out;
  out.edited = edit.getSegment().str();
  out.answer = logits.getSegment().str();
  out.answerResult = *answerIndex;
  out.editLoc = edit.getLoc();
  out.entry = ("__kv_attribution_" + entryName).str();
  auto cacheType = cast<kv::CacheType>(edit.getCache().getType());
  if (FlatSymbolRefAttr name = cacheType.getContextName())
    if (auto context = module.lookupSymbol<kv::ContextOp>(name))
      for (kv::SegmentOp segment : context.getSegments())
        out.segments.push_back(
            {segment.getSymName().str(),
             kv::stringifySegmentKind(segment.getKind()).str()});
  if (module.lookupSymbol(out.entry))
    return diag() << "the program already has a symbol @" << out.entry;

  // The clone returns the edit's operands; what only led to the answer
  // (the edit, the logits) is dead and goes.
  IRMapping mapping;
  auto clone = cast<func::FuncOp>((*entry)->clone(mapping));
  clone.setName(out.entry);
  OpBuilder builder(*entry);
  builder.setInsertionPointAfter(*entry);
  builder.insert(clone);
  auto cloneReturn = cast<func::ReturnOp>(mapping.lookup(ret.getOperation()));
  Value oldCache = mapping.lookup(edit.getCache());
  Value newTokens = mapping.lookup(edit.getTokens());
  builder.setInsertionPoint(cloneReturn);
  func::ReturnOp::create(builder, cloneReturn.getLoc(),
                         ValueRange{oldCache, newTokens});
  cloneReturn.erase();
  clone.setFunctionType(builder.getFunctionType(
      clone.getArgumentTypes(), {oldCache.getType(), newTokens.getType()}));
  clone.removeResAttrsAttr();
  for (bool erased = true; erased;) {
    erased = false;
    clone.walk<WalkOrder::PostOrder, ReverseIterator>([&](Operation *op) {
      if (op != clone.getOperation() && isOpTriviallyDead(op)) {
        op->erase();
        erased = true;
      }
    });
  }
  return out;
}
