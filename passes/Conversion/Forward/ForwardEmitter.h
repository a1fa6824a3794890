//===- ForwardEmitter.h - Builders of the model forward ---------*- C++ -*-===//
//
// The model forward is described once, in C++ over OpBuilder: this class
// holds the config being specialised for and the pieces every target shares
// (the RoPE angle and rotation, page addressing, the run table and its
// causal clamp, the online-softmax rescale, RMSNorm's scale, SwiGLU);
// ForwardTarget.h is the hook for what differs between targets (vector lanes
// on the CPU; warps, shuffles and shared memory on a GPU), and
// BuildForward.h the layer sequence and the entry points over it.
//
// Numerics are fixed here for every target: RoPE angles in f64 from integer
// positions (libm/libdevice pow, cos, sin; no approximation), rotations in
// f64 rounded to f32, RMSNorm sums of squares in f64, no fast-math flag.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_FORWARD_FORWARDEMITTER_H
#define KVIR_PASSES_CONVERSION_FORWARD_FORWARDEMITTER_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/ModelTensors.h"
#include "runtime/core/WeightFormat.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Support/LLVM.h"

#include <array>
#include <string>
#include <utility>

namespace mlir::kv {

/// One row of the run table (RUNS in runtime/core/ForwardABI.def), as i64.
struct RunRow {
  Value pageOffset, slotBegin, nTokens, basePos, delta;
};

/// Strides of the page layout of runtime/core/KVRuntime.h, in floats, as
/// index values: [page][layer][kv head][K, V][slot][head size].
struct PageStrides {
  Value pageTokens, kv, head, layer, page;
};

class ForwardEmitter {
public:
  /// Emits at the end of `module`, with the config's sizes as constants,
  /// for K/V pages of `dtype`; the functions are named `prefix` + `_` +
  /// what they are.
  ForwardEmitter(ModuleOp module, const kvrt_model_config &config,
                 StringRef prefix, kvrt_kv_dtype dtype = KVRT_KV_F32);

  ImplicitLocOpBuilder b;
  ModuleOp module;
  kvrt_model_config config;
  std::string prefix;
  /// The element type of the K/V pages; everything else is f32.
  kvrt_kv_dtype kvDtype;
  /// The format of every slice of every weight the forward is built for
  /// (all f32 unless set): it reaches the stages that read a weight
  /// (WeightRef, ForwardTarget.h), which pick their kernel by it, and
  /// splits the layer loop where the formats of a layer's weights change
  /// (BuildForward.cpp).
  kvir::WeightFormats formats;

  /// Sizes of the config.
  int64_t dim, hidden, layers, heads, kvHeads, group, vocab, headSize, half,
      kvDim;

  /// `prefix` + "_" + `what`.
  std::string name(StringRef what) const;

  //===--------------------------------------------------------------------===//
  // Types, constants and arithmetic shorthands
  //===--------------------------------------------------------------------===//

  Type f32() { return b.getF32Type(); }
  Type f64() { return b.getF64Type(); }
  Type i1() { return b.getI1Type(); }
  Type i32() { return b.getI32Type(); }
  Type i64() { return b.getI64Type(); }
  Type index() { return b.getIndexType(); }
  VectorType vec(int64_t lanes, Type element) {
    return VectorType::get({lanes}, element);
  }
  /// The element type of the K/V pages: f32, f16 or bf16.
  Type kvElement();
  /// i8: a weight's field is its bytes, whatever its format.
  Type byte() { return b.getI8Type(); }
  /// memref<?xT>.
  MemRefType buffer(Type element);
  /// memref<?xNxi64> (the run table: N = 8; attention tiles: N = 4).
  MemRefType table(int64_t columns);
  /// The LLVM-dialect type `type` lowers to (LLVMTypeConverter): a memref's
  /// descriptor struct, i64 for index, integers and floats as they are. It
  /// is how a value is kept in a struct that generated code reads: an entry
  /// point's argument struct (the C structs of runtime/core/ForwardABI.h),
  /// the context of a CPU parallel task.
  Type llvmType(Type type);

  Value cIndex(int64_t value);
  Value cI64(int64_t value);
  Value cI32(int64_t value);
  Value cF32(float value);
  /// An f32 constant given by its bit pattern (infinities, exact literals).
  Value cF32Bits(uint32_t bits);
  Value cF64(double value);
  /// A splat of `value` (f32, i32) over `lanes` lanes.
  Value splatF32(int64_t lanes, float value);
  Value splatI32(int64_t lanes, int32_t value);

  /// An f32 value (scalar or vector) rounded to the K/V element type, to
  /// nearest even (the runtime's KVElement.h rounds the same way): f16 by
  /// arith.truncf, bf16 by integer arithmetic on the bits (NaN kept quiet),
  /// which lowers without a library call on every host.
  Value toKV(Value value);
  /// A K/V element value (scalar or vector) widened to f32, exactly.
  Value fromKV(Value value);
  /// A bfloat16 value (scalar or vector) widened to f32, exactly.
  Value fromBF16(Value value);

  Value add(Value a, Value c);
  Value sub(Value a, Value c);
  Value mul(Value a, Value c);
  Value divu(Value a, Value c);
  Value remu(Value a, Value c);
  Value minu(Value a, Value c);
  Value maxu(Value a, Value c);
  Value mins(Value a, Value c);
  Value maxs(Value a, Value c);
  Value cmp(arith::CmpIPredicate predicate, Value a, Value c);
  Value select(Value condition, Value a, Value c);
  /// An integer (i32, i64) as an index, and an index as i64 or i32.
  Value toIndex(Value value);
  Value toI64(Value value);
  Value toI32(Value value);
  /// A load of `memref[indices]`.
  Value load(Value memref, ValueRange indices);
  void store(Value value, Value memref, ValueRange indices);

  //===--------------------------------------------------------------------===//
  // Structure
  //===--------------------------------------------------------------------===//

  /// A function at the end of the module with the insertion point at the
  /// start of its body; `finishFunction` adds the return and restores the
  /// insertion point.
  func::FuncOp beginFunction(StringRef name, TypeRange arguments,
                             bool isPublic);
  void finishFunction();

  /// scf.for from `lb` to `ub` by `step`; `body` is emitted with the
  /// builder inside the loop.
  void forLoop(Value lb, Value ub, Value step,
               function_ref<void(Value iv)> body);
  /// The same with loop-carried values: `body` returns the yielded values;
  /// the loop's results are returned.
  SmallVector<Value>
  forLoop(Value lb, Value ub, Value step, ValueRange inits,
          function_ref<SmallVector<Value>(Value iv, ValueRange iters)> body);
  /// scf.if without results.
  void ifThen(Value condition, function_ref<void()> then);
  /// scf.if with an else branch and no results.
  void ifElse(Value condition, function_ref<void()> then,
              function_ref<void()> otherwise);
  /// scf.if with results: each branch returns the values it yields.
  SmallVector<Value> ifThenElse(Value condition, TypeRange types,
                                function_ref<SmallVector<Value>()> then,
                                function_ref<SmallVector<Value>()> otherwise);

  //===--------------------------------------------------------------------===//
  // The model's math, shared by every target
  //===--------------------------------------------------------------------===//

  /// The indices (a, b) of the head dimensions RoPE pair `i` rotates
  /// together, by the config's layout and rotary dimensions (ModelConfig.h's
  /// ropePair): every pair 0 <= i < head_size / 2, the ones past the rotary
  /// dimensions included (they rotate by angle 0).
  std::pair<Value, Value> ropePair(Value i);
  /// cos and sin (f64) of pair `i` (index) at position `pos` (i64): the
  /// angle is double(pos) * ropeFrequency(config, i) (ModelConfig.h: theta,
  /// partial rotary, linear scaling, per-pair factors), computed as that
  /// function does.
  std::pair<Value, Value> ropeCosSin(Value pos, Value i);
  /// (a, b) (f32) rotated by the angle with cosine `c` and sine `s` (f64):
  /// (a c - b s, a s + b c) computed in f64, rounded to f32.
  std::pair<Value, Value> rotate(Value a, Value b, Value c, Value s);

  /// The strides of a pool with `pageTokens` (index) slots per page.
  PageStrides pageStrides(Value pageTokens);
  /// The float offset of the K of kv head `kvHead` at layer `layer` of page
  /// `pageId` (an i32 id); V follows at + strides.kv. Slot s of that head is
  /// at + s * head_size.
  Value headBase(const PageStrides &strides, Value pageId, Value layer,
                 Value kvHead);
  /// The id of page `pageIndex` of a run's page list starting at
  /// `pageOffset` in `pages` (both index).
  Value pageId(Value pages, Value pageOffset, Value pageIndex);
  /// Row `r` of the run table.
  RunRow loadRun(Value runs, Value r);
  /// How many keys of `run` a query at position `m` (i64) sees: a key
  /// counts iff its effective position base_pos + j + Δ is <= m, so the
  /// visible keys are the first clamp(m - base_pos - Δ + 1, 0, n_tokens).
  Value visibleKeys(Value m, const RunRow &run);

  /// One step of an online softmax: the running max raised to include
  /// `candidate` (`newMax`), what scores are shifted by before their exp
  /// (`shift`: the new max, or 0 while it is still -inf because no key has
  /// been seen, so that exp(-inf - shift) is 0 and not NaN), and the factor
  /// exp(old - shift) that rescales what was accumulated under the old max.
  /// `skipUnchanged`: the factor is computed behind a branch that gives 1
  /// when the max did not move (old - shift is 0, whose exp is exactly 1)
  /// without calling exp: the same value, for a target where most steps
  /// leave the max where it was and the call costs (the CPU's libm expf
  /// per query head and chunk of keys).
  struct SoftmaxStep {
    Value newMax, shift, factor;
  };
  SoftmaxStep softmaxRescale(Value oldMax, Value candidate,
                             bool skipUnchanged = false);
  /// 1 / sum, or 0 for a head that saw no key (sum 0).
  Value softmaxNormalizer(Value sum);

  /// RMSNorm: the factor 1 / sqrt(sumSquares / dim + eps) (f64), and
  /// x * factor * w rounded to f32.
  Value rmsScale(Value sumSquares);
  Value rmsApply(Value x, Value weight, Value scale);

  /// silu(h) * g = h / (1 + exp(-h)) * g, in f32.
  Value swiglu(Value h, Value g);

  /// 1 / sqrt(head_size) as f32, the attention score scale.
  Value scoreScale();

  //===--------------------------------------------------------------------===//
  // Weights of every format (runtime/core/WeightFormat.h), shared by every
  // target: the dequantisation of Quant.h, operation for operation in f32
  //===--------------------------------------------------------------------===//

  /// `size` (index) f32 elements at byte `offset` (index) of the bytes
  /// `bytes` (memref<?xi8>): a weight slice of f32 as a memref<?xf32>.
  Value f32View(Value bytes, Value offset, Value size);

  /// The byte at `at` (index) of `bytes`, zero-extended to i32.
  Value loadU8(Value bytes, Value at);
  /// The little-endian f16 at `at`, widened to f32 (exact).
  Value loadF16(Value bytes, Value at);

  /// A block format's groups: runs of `elements` elements of a block that
  /// share one scale (and min): Q8_0 one of 32; Q4_0 two of 16 (low, then
  /// high nibbles); Q4_K, Q5_K eight of 32; Q6_K sixteen of 16.
  struct Groups {
    int64_t count, elements;
  };
  static Groups groupsOf(kvrt_weight_format format);

  /// The scale A and min B (null for formats without one) of group `g`
  /// (index; a constant folds the selection) of the block at byte `block`:
  /// an element is A * q - B, q groupQuant's.
  std::pair<Value, Value> groupScale(kvrt_weight_format format, Value bytes,
                                     Value block, Value g);
  /// groupScale of all 8 groups of the Q4_K or Q5_K block at byte `block`
  /// at once, with vector operations: a vector<16 x f32> of the scales A0 ..
  /// A7 then the mins B0 .. B7, the same values bit for bit.
  Value kQuantScalesMins(Value bytes, Value block);
  /// The integers kQuantScalesMins scales: a vector<16 x i8> of the 6-bit
  /// scales sc0 .. sc7 then the mins m0 .. m7 (kvrt::scaleMinK4), decoded
  /// from the block's 12 scale bytes by byte shuffles, shifts and masks.
  /// With several blocks, a vector<16 n x i8> of theirs side by side (the
  /// same instructions decode each 128-bit lane).
  Value kQuantScalesMinsBytes(Value bytes, ArrayRef<Value> blocks);
  Value kQuantScalesMinsBytes(Value bytes, Value block) {
    return kQuantScalesMinsBytes(bytes, ArrayRef<Value>{block});
  }
  /// q of element `l` (index) of group `g` of the block, offset as the
  /// format says (Q4_0 q - 8, Q6_K q - 32), as f32 (exact); with `lanes`
  /// > 1, of elements l .. l + lanes - 1 as a vector<lanes x f32> (their
  /// bytes are consecutive in every format: one vector load each).
  Value groupQuant(kvrt_weight_format format, Value bytes, Value block, Value g,
                   Value l, int64_t lanes = 1);
  /// A * q - B: the element (or the lanes of q), as Quant.h's dequantizeRow
  /// gives it.
  Value dequant(Value scale, Value min, Value q);

  /// Element `j` (index) of the row at byte `row` of a weight in `format`,
  /// as f32: any format, one element at a time (the GPU's lanes).
  Value weightElement(kvrt_weight_format format, Value bytes, Value row,
                      Value j);
};

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_FORWARD_FORWARDEMITTER_H
