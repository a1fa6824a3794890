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
} // namespace mlir::kv

#define GET_OP_CLASSES
#include "dialects/KV/KVOps.h.inc"

#endif // KVIR_DIALECTS_KV_KVOPS_H
