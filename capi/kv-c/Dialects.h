/*===- kv-c/Dialects.h - C API of the kv dialect ------------------*- C -*-===*\
|*                                                                            *|
|* The kv dialect's registration handle, used with the MLIR C API's           *|
|* mlirDialectHandle* functions (mlir-c/IR.h):                                *|
|*                                                                            *|
|*   MlirDialectHandle kv = mlirGetDialectHandle__kv__();                     *|
|*   mlirDialectHandleInsertDialect(kv, registry);                            *|
|*   mlirDialectHandleLoadDialect(kv, context);                               *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef KVIR_CAPI_KV_C_DIALECTS_H
#define KVIR_CAPI_KV_C_DIALECTS_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(KV, kv);

#ifdef __cplusplus
}
#endif

#endif /* KVIR_CAPI_KV_C_DIALECTS_H */
