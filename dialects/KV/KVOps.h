//===- KVOps.h - Operations of the kv dialect -------------------*- C++ -*-===//

#ifndef KVIR_DIALECTS_KV_KVOPS_H
#define KVIR_DIALECTS_KV_KVOPS_H

#include "dialects/KV/KVDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::kv {
class SegmentOp;

namespace OpTrait {
/// Checks that the non-variadic operand groups `Groups` of an op with
/// AttrSizedOperandSegments hold exactly one value each. ODS only checks that
/// the groups add up; without this, a generic-form op could make an operand
/// accessor read another group's operand, or past the last one.
template <unsigned... Groups> struct SingleValuedOperandGroups {
  template <typename ConcreteType>
  class Impl : public ::mlir::OpTrait::TraitBase<ConcreteType, Impl> {
  public:
    static LogicalResult verifyTrait(Operation *op) {
      for (unsigned group : {Groups...}) {
        unsigned size =
            cast<ConcreteType>(op).getODSOperandIndexAndLength(group).second;
        if (size != 1)
          return op->emitOpError()
                 << "operand group #" << group
                 << " is a single operand, but operandSegmentSizes gives it "
                 << size << " values";
      }
      return success();
    }
  };
};
} // namespace OpTrait

/// The block store kv.load_block and kv.store_block read and write.
struct BlockStoreResource
    : public SideEffects::Resource::Base<BlockStoreResource> {
  StringRef getName() final { return "<kv block store>"; }
};
} // namespace mlir::kv

#define GET_OP_CLASSES
#include "dialects/KV/KVOps.h.inc"

#include <optional>
#include <string>

namespace mlir::kv {

/// The label of the correction run an erratum edit of `segment` appends:
/// `<segment>.erratum`. Ops may name it as a segment of the context (it is
/// not declared there: only an erratum plan creates it).
std::string correctionLabel(StringRef segment);

/// Whether `label` is the correction label of a segment of `context`.
bool isCorrectionLabel(ContextOp context, StringRef label);

/// The answer an erratum edit of segment `edited` recomputes after its
/// correction, given the kinds of the context's segments in order: the first
/// segment of kind `answer` after `edited`, else the last segment when it
/// comes after `edited`, else nothing (an erratum of the last segment has no
/// answer to recompute). That segment and every later one are recomputed.
std::optional<unsigned> getErratumAnswer(ArrayRef<SegmentKind> kinds,
                                         unsigned edited);

} // namespace mlir::kv

#endif // KVIR_DIALECTS_KV_KVOPS_H
