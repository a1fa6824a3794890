//===- KVDialect.td - The kv dialect ----------------------*- tablegen -*-===//
//
// The kv dialect: editable and composable KV caches as IR values.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DIALECTS_KV_KVDIALECT_TD
#define KVIR_DIALECTS_KV_KVDIALECT_TD

include "mlir/IR/OpBase.td"

def KV_Dialect : Dialect {
  let name = "kv";
  let cppNamespace = "::mlir::kv";
  let summary = "Editable and composable KV caches of Llama-family decoders";
  let description = [{
    The `kv` dialect makes the KV cache of a decoder-only transformer a value of
    the program. A `!kv.cache` stands for an ordered list of runs: each run is a
    range of tokens whose keys and values live in immutable pages, together with
    the token ids it was computed from, the segment it belongs to and a position
    offset Δ (a key stored at position p behaves as if it were at p + Δ).

    On top of that value the dialect expresses the two operations KVIR compiles:

    * `kv.edit` replaces the tokens of one segment of a cached context and
      recomputes what depends on it, as declared by the dependency graph of a
      `kv.context`, with a strategy (`exact`, `cot_slice`, `cot_slice` plus a
      repair budget);
    * `kv.compose` appends an independently prefilled block at a new position by
      a RoPE shift, without prefilling it again.

    Lower-level ops (`kv.prefill`, `kv.rope_shift`, `kv.slice`, `kv.concat`,
    `kv.attention`, ...) are what the passes rewrite those two into.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 0;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

#endif // KVIR_DIALECTS_KV_KVDIALECT_TD
