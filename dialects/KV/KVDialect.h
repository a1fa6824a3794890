//===- KVDialect.h - The kv dialect -----------------------------*- C++ -*-===//
//
// Declares the kv dialect, its enums, attributes and types.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DIALECTS_KV_KVDIALECT_H
#define KVIR_DIALECTS_KV_KVDIALECT_H

#include "runtime/core/KVRuntime.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"

#include "dialects/KV/KVDialect.h.inc"
#include "dialects/KV/KVEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/KV/KVAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/KV/KVTypes.h.inc"

#endif // KVIR_DIALECTS_KV_KVDIALECT_H
