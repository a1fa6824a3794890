//===- Dialects.cpp - C API of the kv dialect -------------------*- C++ -*-===//

#include "kv-c/Dialects.h"

#include "dialects/KV/KVDialect.h"

#include "mlir/CAPI/Registration.h"

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(KV, kv, mlir::kv::KVDialect)
