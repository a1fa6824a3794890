/*===- kv-c/Passes.h - C API of the kv passes and pipelines -------*- C -*-===*\
|*                                                                            *|
|* mlirRegisterKVPassesAndPipelines() registers every kv pass and pipeline    *|
|* with MLIR's global registry; a textual pipeline can then name them, e.g.   *|
|* "builtin.module(kv-optimize)" for mlirParsePassPipeline.                   *|
|*                                                                            *|
|* Generated from passes/Passes.td, as upstream does for its own passes       *|
|* (kv-c/Passes.capi.h.inc): mlirRegisterKVPasses() registers the passes      *|
|* without the pipelines; for each pass, mlirCreateKV<Def>() creates one for  *|
|* mlirPassManagerAddOwnedPass and mlirRegisterKV<Def>() registers it, <Def>  *|
|* being its record name: mlirCreateKVKVDeriveCotSlicesPass().                *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef KVIR_CAPI_KV_C_PASSES_H
#define KVIR_CAPI_KV_C_PASSES_H

#include "mlir-c/Pass.h"

#include "kv-c/Passes.capi.h.inc"

#ifdef __cplusplus
extern "C" {
#endif

/// Registers every kv pass and the pipelines kv-optimize, kv-lower-to-cpu and
/// kv-lower-to-nvvm with MLIR's global registry. Calling it again does
/// nothing.
MLIR_CAPI_EXPORTED void mlirRegisterKVPassesAndPipelines(void);

#ifdef __cplusplus
}
#endif

#endif /* KVIR_CAPI_KV_C_PASSES_H */
