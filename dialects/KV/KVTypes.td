//===- KVTypes.td - Types of the kv dialect ---------------*- tablegen -*-===//

#ifndef KVIR_DIALECTS_KV_KVTYPES_TD
#define KVIR_DIALECTS_KV_KVTYPES_TD

include "dialects/KV/KVAttrs.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

class KV_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<KV_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

//===----------------------------------------------------------------------===//
// Parameters of !kv.model
//===----------------------------------------------------------------------===//

// A float parameter: parsed as a double (which also takes a hexadecimal bit
// pattern) and printed in its shortest exact form, always with a '.'
// (formatShortestFloat). Floats compare by their bits, so that 0.0 and -0.0,
// or NaNs of different payloads, are different types.
class KV_FloatParameter<string desc, string default = "">
    : APFloatParameter<desc> {
  let parser = "parseFloatParameter($_parser)";
  let printer = "printShortestFloat($_printer, $_self)";
  let comparator = "parameterEquals($_lhs, $_rhs)";
  let defaultValue = default;
}

// `rope` takes llama.cpp's names of the layouts too (`normal`, `neox`).
def KV_RopeLayoutParameter : EnumParameter<KV_RopeLayout> {
  let parser = "parseRopeLayoutParameter($_parser)";
}

// `rope_freqs = [1.0, 8.0]`: one f32 divisor per rotary pair, at least one
// (a model without factors omits the parameter).
def KV_RopeFreqsParameter
    : OptionalParameter<"::mlir::DenseF32ArrayAttr",
                        "one RoPE frequency divisor per rotary pair"> {
  let parser = "parseRopeFreqsParameter($_parser)";
  let printer = "printRopeFreqsParameter($_printer, $_self)";
}

// `qkv_bias = true`: the Q, K and V projections add a bias (Qwen2); printed
// only where true.
def KV_QkvBiasParameter
    : DefaultValuedParameter<"bool", "false",
                             "Q, K and V projections add a bias"> {
  let parser = "parseBoolParameter($_parser)";
  let printer = "$_printer << ($_self ? \"true\" : \"false\")";
}

// A parameter that a program may omit (it then takes `value`) but that is
// always printed, so that a printed model spells out what its kernels compute
// with. ODS's struct() elides a parameter equal to its default; the default
// here is an AlwaysPrinted, which parameterEquals finds equal to no value.
class KV_AlwaysPrintedParameter<AttrOrTypeParameter base, string value>
    : AttrOrTypeParameter<base.cppType, base.summary> {
  let parser = base.parser;
  let printer = base.printer;
  let comparator = "parameterEquals($_lhs, $_rhs)";
  let defaultValue = "AlwaysPrinted<" # base.cppType # ">{" # value # "}";
}

def KV_ModelType : KV_Type<"Model", "model"> {
  let summary = "Llama-family decoder model (weights and configuration)";
  let description = [{
    A value of this type is a loaded model; its type carries the configuration
    every kernel is specialised for. The head size is `dim / heads`.

    ```mlir
    !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
              vocab = 512, rope = interleaved, theta = 10000.0, eps = 1.0e-05>
    ```

    `rope`, `theta` and `eps` may be omitted when parsing; they default to
    `interleaved`, 10000 and 1e-5 (`rope` also takes llama.cpp's names:
    `normal` is `interleaved`, `neox` is `half`).

    RoPE frequency variants, printed only where they are in effect:
    `rope_dim = N` (partial rotary: only the first N dimensions of a head
    rotate, N even and below the head size), `rope_scale = F` (linear
    scaling: every frequency divided by F) and `rope_freqs = [f0, f1, ...]`
    (one divisor per rotary pair, as a GGUF `rope_freqs` tensor, e.g. Llama
    3's frequency scaling):

    ```mlir
    !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4,
              vocab = 512, rope = half, theta = 500000.0, eps = 1.0e-05,
              rope_dim = 4, rope_scale = 2.0, rope_freqs = [1.0, 8.0]>
    ```

    `qkv_bias = true` (printed only where true): the Q, K and V projections
    add a bias, as Qwen2's do.
  }];
  // The struct keys are the parameter names, in any order when parsed and in
  // this order when printed. A field added later is one line here: a
  // DefaultValuedParameter or OptionalParameter is printed only where it is
  // in effect (as rope_dim, rope_scale and rope_freqs are).
  let parameters = (ins
    "int64_t":$dim,
    "int64_t":$hidden,
    "int64_t":$layers,
    "int64_t":$heads,
    "int64_t":$kv_heads,
    "int64_t":$vocab,
    KV_AlwaysPrintedParameter<KV_RopeLayoutParameter,
                              "RopeLayout::Interleaved">:$rope,
    KV_AlwaysPrintedParameter<KV_FloatParameter<"RoPE base">,
                              "::llvm::APFloat(10000.0)">:$theta,
    KV_AlwaysPrintedParameter<KV_FloatParameter<"RMSNorm epsilon">,
                              "::llvm::APFloat(1e-5)">:$eps,
    DefaultValuedParameter<"int64_t", "0",
                           "rotary dimensions of a head (0: all)">:$rope_dim,
    KV_FloatParameter<"linear RoPE scaling",
                      "::llvm::APFloat(1.0)">:$rope_scale,
    KV_RopeFreqsParameter:$rope_freqs,
    KV_QkvBiasParameter:$qkv_bias
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  // The generated parser builds through the first builder below, which makes
  // rope_dim canonical; it replaces the default one of the same signature.
  let skipDefaultBuilders = 1;
  let builders = [
    TypeBuilder<(ins "int64_t":$dim, "int64_t":$hidden, "int64_t":$layers,
                     "int64_t":$heads, "int64_t":$kvHeads, "int64_t":$vocab,
                     "RopeLayout":$rope, "::llvm::APFloat":$theta,
                     "::llvm::APFloat":$eps, "int64_t":$ropeDim,
                     "::llvm::APFloat":$ropeScale,
                     "::mlir::DenseF32ArrayAttr":$ropeFreqs,
                     "bool":$qkvBias), [{
      // rope_dim equal to the head size rotates the whole head, as 0 does:
      // one type per configuration.
      if (heads > 0 && ropeDim == dim / heads)
        ropeDim = 0;
      return $_get($_ctxt, dim, hidden, layers, heads, kvHeads, vocab, rope,
                   theta, eps, ropeDim, ropeScale, ropeFreqs, qkvBias);
    }]>,
    TypeBuilder<(ins "const ::kvrt_model_config &":$config)>,
    // Without RoPE frequency variants.
    TypeBuilder<(ins "int64_t":$dim, "int64_t":$hidden, "int64_t":$layers,
                     "int64_t":$heads, "int64_t":$kvHeads, "int64_t":$vocab,
                     "RopeLayout":$rope, "::llvm::APFloat":$theta,
                     "::llvm::APFloat":$eps), [{
      return $_get($_ctxt, dim, hidden, layers, heads, kvHeads, vocab, rope,
                   theta, eps, /*ropeDim=*/0, ::llvm::APFloat(1.0),
                   ::mlir::DenseF32ArrayAttr(), /*qkvBias=*/false);
    }]>
  ];
  let extraClassDeclaration = [{
    int64_t getHeadSize() const { return getDim() / getHeads(); }
    int64_t getKVDim() const { return getKvHeads() * getHeadSize(); }
    double getThetaValue() const { return getTheta().convertToDouble(); }
    double getEpsValue() const { return getEps().convertToDouble(); }
    /// The architecture as the runtime spells it (runtime/core/ModelConfig.h):
    /// the one conversion between `!kv.model` and kvrt_model_config. The file
    /// fields are not part of the type: seq_len is 0, the classifier shared.
    ::kvrt_model_config getConfig() const;
  }];
}

def KV_CacheType : KV_Type<"Cache", "cache"> {
  let summary = "paged KV cache view";
  let description = [{
    An ordered list of runs (pages, token range, position offset Δ), the token
    ids of every run and the segment each run belongs to. The type fixes the
    shape of one token's K/V (layers x KV heads x head size x element type) and
    may name the `kv.context` whose segments the cache holds.

    ```mlir
    !kv.cache<5x4x8xf32>
    !kv.cache<5x4x8xf32, @agent>
    ```
  }];
  let parameters = (ins "int64_t":$layers, "int64_t":$kvHeads,
                        "int64_t":$headSize, "::mlir::Type":$elementType,
                        OptionalParameter<"::mlir::FlatSymbolRefAttr">:$contextName);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether `other` holds K/V of the same shape (the context may differ).
    bool isLayoutCompatibleWith(CacheType other) const {
      return getLayers() == other.getLayers() &&
             getKvHeads() == other.getKvHeads() &&
             getHeadSize() == other.getHeadSize() &&
             getElementType() == other.getElementType();
    }
    /// This type without a context symbol.
    CacheType withoutContext() const {
      return CacheType::get(getContext(), getLayers(), getKvHeads(),
                            getHeadSize(), getElementType(), nullptr);
    }
  }];
}

#endif // KVIR_DIALECTS_KV_KVTYPES_TD
