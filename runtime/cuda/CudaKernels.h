//===- CudaKernels.h - ABI of the AOT-compiled GPU forward -------*- C++
//-*-===//
//
// The host functions kv-lower-to-nvvm emits for a model config (prefix
// `kvgpu`), as the CUDA backend calls them from a kernel library built ahead
// of time by kv-aot (docs/gpu-backend.md). No MLIR dependency. Every memref
// argument is a pointer to a descriptor whose pointers are device pointers;
// `index` arguments are int64_t.
//
// A kernel library `libkvgpu_<name>.so` exports `_mlir_ciface_kvgpu_prefill`
// and `_mlir_ciface_kvgpu_attention`, embeds the cubin (loaded by its
// constructor through mgpuModuleLoad), and sits beside `libkvgpu_<name>.key`,
// one line: the configKey() of the config it was compiled for.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CUDA_CUDAKERNELS_H
#define KVIR_RUNTIME_CUDA_CUDAKERNELS_H

#include "runtime/core/KVRuntime.h"
#include "runtime/cpu/CpuKernels.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace kvir::cuda {

using cpu::MemRef;

/// The prefix of the generated functions in every kernel library.
constexpr const char *kKernelPrefix = "kvgpu";

/// What the kernels are specialised for, as one line (seq_len and the
/// classifier sharing are not part of it; theta and eps as exact bits).
inline std::string configKey(const kvrt_model_config &c) {
  uint64_t theta, eps;
  std::memcpy(&theta, &c.rope_theta, sizeof(theta));
  std::memcpy(&eps, &c.rms_eps, sizeof(eps));
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "dim=%d hidden=%d layers=%d heads=%d kv_heads=%d vocab=%d "
                "rope=%s theta=0x%016llx eps=0x%016llx",
                c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                c.vocab_size,
                c.rope_layout == KVRT_ROPE_HALF ? "half" : "interleaved",
                static_cast<unsigned long long>(theta),
                static_cast<unsigned long long>(eps));
  return buf;
}

/// `kvgpu_prefill`: the forward of n tokens at positions pos .. pos+n-1 over
/// the run table (last run = the new one, its pages receive the K/V of
/// layers 0 .. nLayers-1); logits of positions logitsFrom .. n-1. `tiles` is
/// [nTiles][4] (run, key_begin, key_end, 0); `scratch` holds n * (3 dim + 2
/// kv_dim + 2 hidden) floats; `part` n * heads * nTiles * (head_size + 2).
using GpuPrefillFn = void (*)(
    MemRef<float, 1> *x, MemRef<float, 1> *rmsAtt, MemRef<float, 1> *wq,
    MemRef<float, 1> *wk, MemRef<float, 1> *wv, MemRef<float, 1> *wo,
    MemRef<float, 1> *rmsFfn, MemRef<float, 1> *w1, MemRef<float, 1> *w2,
    MemRef<float, 1> *w3, MemRef<float, 1> *rmsFinal, MemRef<float, 1> *wcls,
    MemRef<float, 1> *kv, MemRef<int32_t, 1> *pages, MemRef<int64_t, 2> *runs,
    MemRef<int64_t, 2> *tiles, int64_t nTiles, int64_t pageTokens, int64_t pos,
    int64_t n, int64_t nLayers, int64_t logitsFrom, MemRef<float, 1> *logits,
    MemRef<float, 1> *scratch, MemRef<float, 1> *part);

/// `kvgpu_attention`: n queries (at qOff of q, [n][heads][head_size], not
/// rotated; query t at position pos + t) over the run table at layer
/// `layer`; the output [n][heads][head_size] at outOff of out.
using GpuAttentionFn = void (*)(MemRef<float, 1> *q, int64_t qOff, int64_t n,
                                int64_t pos, MemRef<float, 1> *kv,
                                MemRef<int32_t, 1> *pages,
                                MemRef<int64_t, 2> *runs,
                                MemRef<int64_t, 2> *tiles, int64_t nTiles,
                                int64_t layer, int64_t pageTokens,
                                MemRef<float, 1> *part, MemRef<float, 1> *out,
                                int64_t outOff);

} // namespace kvir::cuda

#endif // KVIR_RUNTIME_CUDA_CUDAKERNELS_H
