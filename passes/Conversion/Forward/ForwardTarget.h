//===- ForwardTarget.h - What differs between forward targets ---*- C++ -*-===//
//
// The hook of the forward description (BuildForward.h) for a target, in the
// spirit of Triton's TargetInfoBase: the layer sequence, the entry points and
// the model's math (ForwardEmitter) are shared; a target says how each stage
// maps onto its hardware: the CPU target (KVToCPU/CpuTarget.cpp) emits loops
// over 16-lane vectors, the GPU target (KVToNVVM/GpuTarget.cpp) kernels of
// warps with shuffles and shared memory, launched from host code.
//
// Buffers are flat memref<?xf32> values with an element offset (BufferRef);
// a model weight (WeightRef) is the bytes of its field (memref<?xi8>), the
// byte offset of the slice a stage reads and that slice's format: a target
// picks its kernel by the format (an f32 slice is viewed as floats,
// ForwardEmitter::f32View; a block format is read as its bytes). Every stage
// is emitted at the builder's insertion point, inside a host function of the
// forward (for the GPU: code that launches kernels).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_FORWARD_FORWARDTARGET_H
#define KVIR_PASSES_CONVERSION_FORWARD_FORWARDTARGET_H

#include "passes/Conversion/Forward/ForwardEmitter.h"

#include "llvm/Support/ErrorHandling.h"

#include <string>

namespace mlir::kv {

/// A flat f32 buffer and the element offset of what a stage reads or
/// writes.
struct BufferRef {
  Value memref;
  Value offset;
};

/// A model weight as a stage sees it: the bytes of its field, the byte
/// offset (index) of the slice the stage reads, and the slice's format
/// (WeightFormat.h). The forward is specialised per format at build time
/// (ForwardEmitter::formats).
struct WeightRef {
  Value bytes;
  Value offset;
  kvrt_weight_format format = KVRT_WEIGHT_F32;
  /// The prefill's weights packed once per model (ForwardABI.def: packed,
  /// packed_offsets, panel_width) and the entry of this slice in
  /// packed_offsets (index): what a target that packs its matmul weights may
  /// read instead of packing. Null outside a prefill; nothing is loaded
  /// unless a target does.
  Value packed, packedOffsets, packedEntry, panelWidth;
  /// The Q8_0 matrices repacked once per model for a decode step
  /// (ForwardABI.def: decode_rows, decode_rows_offsets; this slice's entry
  /// is packedEntry). Null outside a prefill.
  Value decodeRows, decodeRowsOffsets;
};

/// One product of ForwardTarget::products: c ([n][m]) = a · weightᵀ.
struct MatmulOutput {
  WeightRef weight;
  BufferRef c;
  int64_t m;
};

/// Stops with a message naming `stage` and the format unless `weight` is
/// f32: norm vectors are f32 in memory (the runtime converts those a file
/// stores otherwise), and a forward built with another format for one is a
/// programming error, not a reading of its bytes as floats.
inline void requireF32(const WeightRef &weight, StringRef stage) {
  if (weight.format != KVRT_WEIGHT_F32)
    llvm::report_fatal_error(llvm::Twine(stage) + ": weights of format " +
                             kvrt::weightFormatName(weight.format) +
                             " are not supported (f32 is)");
}

/// The K/V pool as a stage sees it: the page arena, the page lists and run
/// table of the view (runtime/core/ForwardABI.def), the GPU's attention
/// tiles and partials (empty on the CPU), and page_tokens (index). `rope`
/// is what ForwardTarget::ropeTables returned for the whole call, or null.
struct KVTables {
  Value kv, pages, runs, tiles, part, pageTokens;
  Value rope = {};
};

class ForwardTarget {
public:
  virtual ~ForwardTarget() = default;

  /// The target's name in diagnostics ("CPU", "GPU").
  virtual StringRef name() const = 0;

  /// Why the target cannot compile the config, or "".
  virtual std::string checkConfig(const kvrt_model_config &config) const = 0;

  /// Emits the kernels and helpers the stages use, once per forward, at
  /// module level (e.g. private functions, or a gpu.module).
  virtual void emitKernels(ForwardEmitter &e) = 0;

  /// The buffer a prefill keeps one of its intermediate values in (`size`
  /// floats): by default the region at `offset` of the runtime's scratch
  /// buffer (ForwardABI.def). A target may allocate it itself instead; it
  /// then frees it in releaseTemporaries, which the prefill calls before it
  /// returns.
  virtual BufferRef temporary(ForwardEmitter &e, Value scratch, Value offset,
                              Value size) {
    return BufferRef{scratch, offset};
  }
  virtual void releaseTemporaries(ForwardEmitter &e) {}

  /// out[t] = x[t] * rmsScale(sum of squares of x[t]) * w, rows t < n (w
  /// f32).
  virtual void rmsnorm(ForwardEmitter &e, BufferRef x, WeightRef w,
                       BufferRef out, Value n) = 0;

  /// c (+)= a · bᵀ: a is [n][k], the weights b [m][k] (row-major, [out][in],
  /// in b.format, any of WeightFormat.h), c [n][m]; with `accumulate` the
  /// product is added to c.
  virtual void matmul(ForwardEmitter &e, BufferRef a, WeightRef b, BufferRef c,
                      Value n, int64_t m, int64_t k, bool accumulate) = 0;

  /// c_i = a · b_iᵀ for each output of `outputs`: several products of one
  /// input a ([n][k]), the query, key and value of a layer. By default a
  /// matmul each; a target may run them together (the CPU's decode: one
  /// parallel loop over the rows of them all, the input quantised once).
  virtual void products(ForwardEmitter &e, BufferRef a,
                        ArrayRef<MatmulOutput> outputs, Value n, int64_t k) {
    for (const MatmulOutput &out : outputs)
      matmul(e, a, out.weight, out.c, n, out.m, k, /*accumulate=*/false);
  }

  /// h1 = silu(a · gateᵀ) * (a · upᵀ), both [n][m], a [n][k]: the feed
  /// forward's gated product. h3 is a buffer as large as h1 that the
  /// default (a matmul each, then swiglu) keeps a · upᵀ in; a target that
  /// computes both in one pass need not write it.
  virtual void gatedProduct(ForwardEmitter &e, BufferRef a, WeightRef gate,
                            WeightRef up, BufferRef h1, BufferRef h3, Value n,
                            int64_t m, int64_t k) {
    matmul(e, a, gate, h1, n, m, k, /*accumulate=*/false);
    matmul(e, a, up, h3, n, m, k, /*accumulate=*/false);
    swiglu(e, h1, h3, e.mul(n, e.cIndex(m)));
  }

  /// c[t] += bias for rows t < n of c ([n][m]): the Q/K/V biases of a
  /// config with qkv_bias. A target emits what this needs only for such
  /// configs.
  virtual void addBias(ForwardEmitter &e, BufferRef c, WeightRef bias, Value n,
                       int64_t m) = 0;

  /// Called once per prefill before its layers: the rotations its layers'
  /// storeKV and attention share (they depend on positions and the runs'
  /// offsets, not on the layer), in a form the target's own stages read
  /// from KVTables::rope; null (the default) when the stages compute their
  /// own.
  virtual Value ropeTables(ForwardEmitter &e, Value n, Value pos,
                           const KVTables &kv) {
    return {};
  }

  /// Rotates the n new keys k ([n][kv_dim]) to positions pos + t and writes
  /// them and the values v into the pages of the last run of the table, at
  /// layer `layer` (index).
  virtual void storeKV(ForwardEmitter &e, BufferRef k, BufferRef v, Value n,
                       Value pos, const KVTables &kv, Value layer) = 0;

  /// Attention of n queries q ([n][heads][head_size], not rotated; query t
  /// at position pos + t) over every run of the table at layer `layer`
  /// (index): the query rotated once per run to m - Δ, runs merged by
  /// online softmax; out receives [n][heads][head_size].
  virtual void attention(ForwardEmitter &e, BufferRef q, BufferRef out, Value n,
                         Value pos, const KVTables &kv, Value layer) = 0;

  /// h1 = silu(h1) * h3 over `count` elements.
  virtual void swiglu(ForwardEmitter &e, BufferRef h1, BufferRef h3,
                      Value count) = 0;

  /// Every run of the table written to `dstPages` (parallel to the page
  /// list, same slots): K rotated once by the run's Δ, V copied.
  virtual void materialize(ForwardEmitter &e, const KVTables &kv,
                           Value dstPages) = 0;
};

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_FORWARD_FORWARDTARGET_H
