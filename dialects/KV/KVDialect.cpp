//===- KVDialect.cpp - The kv dialect ---------------------------*- C++ -*-===//

#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"

#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::kv;

#include "dialects/KV/KVDialect.cpp.inc"
#include "dialects/KV/KVEnums.cpp.inc"

namespace {
/// Short aliases (`!model`, `!cache`) keep printed programs readable: the model
/// type alone spells out nine parameters.
struct KVOpAsmDialectInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;

  AliasResult getAlias(Type type, raw_ostream &os) const override {
    if (isa<ModelType>(type)) {
      os << "model";
      return AliasResult::OverridableAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void KVDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dialects/KV/KVOps.cpp.inc"
      >();
  addInterfaces<KVOpAsmDialectInterface>();
}
