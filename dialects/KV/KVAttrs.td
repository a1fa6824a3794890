//===- KVAttrs.td - Attributes and enums of the kv dialect -*- tablegen -*-===//

#ifndef KVIR_DIALECTS_KV_KVATTRS_TD
#define KVIR_DIALECTS_KV_KVATTRS_TD

include "dialects/KV/KVDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def KV_RopeLayout : I32EnumAttr<"RopeLayout",
    "which dimensions RoPE rotates together", [
      I32EnumAttrCase<"Interleaved", 0, "interleaved">,
      I32EnumAttrCase<"Half", 1, "half">
    ]> {
  let cppNamespace = "::mlir::kv";
  let genSpecializedAttr = 0;
  let description = [{
    `interleaved` rotates the pairs (2i, 2i+1), as llama2.c and GGUF's llama
    architecture do (llama.cpp calls it `normal`); `half` rotates
    (i, i + d/2), as HF/NeoX do (llama.cpp's `neox`). The `!kv.model` parser
    accepts llama.cpp's names too and prints these.
  }];
}

def KV_SegmentKind : I32EnumAttr<"SegmentKind", "the role of a context segment", [
      I32EnumAttrCase<"System", 0, "system">,
      I32EnumAttrCase<"User", 1, "user">,
      I32EnumAttrCase<"History", 2, "history">,
      I32EnumAttrCase<"Tool", 3, "tool">,
      I32EnumAttrCase<"Skill", 4, "skill">,
      I32EnumAttrCase<"Document", 5, "document">,
      I32EnumAttrCase<"Fact", 6, "fact">,
      I32EnumAttrCase<"Thought", 7, "thought">,
      I32EnumAttrCase<"Answer", 8, "answer">,
      I32EnumAttrCase<"Correction", 9, "correction">,
      I32EnumAttrCase<"Other", 10, "other">
    ]> {
  let cppNamespace = "::mlir::kv";
}

def KV_StrategyKind : I32EnumAttr<"StrategyKind", "how an edit is planned", [
      I32EnumAttrCase<"Exact", 0, "exact">,
      I32EnumAttrCase<"CotSlice", 1, "cot_slice">,
      I32EnumAttrCase<"Erratum", 2, "erratum">
    ]> {
  let cppNamespace = "::mlir::kv";
  let genSpecializedAttr = 0;
}

def KV_RepairKind : I32EnumAttr<"RepairKind", "how a repair budget is spent", [
      I32EnumAttrCase<"FirstK", 0, "first_k">,
      I32EnumAttrCase<"Fraction", 1, "fraction">,
      I32EnumAttrCase<"Deviation", 2, "deviation">
    ]> {
  let cppNamespace = "::mlir::kv";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class KV_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<KV_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def KV_RepairAttr : KV_Attr<"Repair", "repair"> {
  let summary = "A budget of reused tokens to recompute anyway";
  let description = [{
    Reused K/V never saw the new content. A repair budget recomputes the reused
    tokens that matter most:

    * `first_k = N` (N >= 0): the first N tokens of every reused segment that
      follows the edit or the composed block (as EPIC does);
    * `fraction = f` (0 <= f <= 1): that fraction of the reused tokens, chosen at
      run time as the ones whose K/V at layer 1 (the first layer whose K/V
      depend on the context) deviate most when recomputed under the new
      context (as CacheBlend does);
    * `deviation = t` (t > 0, finite): every reused token whose *relative*
      deviation at layer 1 exceeds t, however many that is. The relative
      deviation of a token is ||v_fresh - v_stored|| / ||v_fresh||: the L2
      norm over all KV heads of its values recomputed under the new context
      minus its stored values, divided by the norm of the recomputed values
      (a token whose recomputed values are all 0 deviates by 0 when the
      stored ones are 0 too, else infinitely). How many tokens that chooses
      is only known at run time; kv-run reports it with the deviations seen.

    ```mlir
    #kv.repair<first_k = 32>
    #kv.repair<fraction = 0.15>
    #kv.repair<deviation = 0.05>
    ```
  }];
  let parameters = (ins EnumParameter<KV_RepairKind>:$kind,
                        "int64_t":$firstK,
                        APFloatParameter<"fraction of reused tokens">:$fraction,
                        APFloatParameter<"relative deviation threshold">:$deviation);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Parses the body `first_k = N`, `fraction = f` or `deviation = t`
    /// (without angle brackets), shared with #kv.strategy.
    static RepairAttr parseBody(::mlir::AsmParser &parser);
    /// Prints the body, without angle brackets.
    void printBody(::mlir::AsmPrinter &printer) const;
    double getFractionValue() const { return getFraction().convertToDouble(); }
    double getDeviationValue() const {
      return getDeviation().convertToDouble();
    }
    /// Whether the tokens it recomputes are chosen at run time by K/V
    /// deviation (fraction or deviation: a kv.selective_recompute).
    bool isSelective() const {
      return getKind() == RepairKind::Fraction ||
             getKind() == RepairKind::Deviation;
    }
  }];
}

def KV_StrategyAttr : KV_Attr<"Strategy", "strategy"> {
  let summary = "How a kv.edit is planned";
  let description = [{
    * `exact`: keep what precedes the edited segment, recompute it and
      everything after it (equal to a full prefill of the edited context);
    * `cot_slice`: keep what precedes the edited segment, recompute it and its
      dependency slice (every later segment that reaches it in the context's
      dependency graph), reuse every other later segment relocated by RoPE;
    * `cot_slice` with a repair budget (see `#kv.repair`);
    * `erratum`: change nothing in place. Every segment before the answer is
      kept as it is (the edited one with its old tokens and K/V); a correction
      (token ids the `kv.edit` gives with `correction(%tokens)`) is prefilled
      after them as a run labelled `@<edited>.erratum`, and the answer is
      recomputed after the correction. The answer is the first segment of kind
      `answer` after the edited one, or the last segment of the context if
      none is; it and every segment after it are recomputed (in order, with
      their labels). Append-only: the old cache stays a prefix of the new one
      up to the answer, which keeps an engine's prefix cache aligned. Its
      reference is still the edited context (the old context with the edited
      segment's tokens replaced), which kv-run's full-prefill comparison uses.

    ```mlir
    #kv.strategy<exact>
    #kv.strategy<cot_slice>
    #kv.strategy<cot_slice, first_k = 32>
    #kv.strategy<cot_slice, fraction = 0.15>
    #kv.strategy<cot_slice, deviation = 0.05>
    #kv.strategy<erratum>
    ```
  }];
  let parameters = (ins EnumParameter<KV_StrategyKind>:$kind,
                        OptionalParameter<"RepairAttr">:$repair);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // KVIR_DIALECTS_KV_KVATTRS_TD
