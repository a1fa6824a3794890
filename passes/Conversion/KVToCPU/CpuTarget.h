//===- CpuTarget.h - The forward's stages on a CPU --------------*- C++ -*-===//
//
// The CPU mapping of the forward (ForwardTarget.h): each stage is a call of
// a private function of loops over 16-lane f32 vectors (func, scf, arith,
// math, memref, vector), lowered to LLVM by kv-lower-to-cpu. See
// docs/cpu-backend.md for the kernels and why they are shaped as they are.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H
#define KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H

#include "passes/Conversion/Forward/ForwardTarget.h"

#include <memory>
#include <optional>

namespace mlir::kv {

/// How the CPU forward multiplies quantised weights (the pass option
/// `quant-dot`; docs/cpu-backend.md, "Integer dot products"):
/// - F32: every format widened to f32 (exact: the oracle's weights);
/// - Int8: integer dot products where the format has them, the activations
///   quantised per block to int8: Q8_0, Q4_0, Q4_K and Q6_K, Q5_K in
///   decode steps (its prefill widens); other formats widen;
/// - Amx: Int8, with a prefill's Q8_0 and Q4_K products on AMX tiles
///   (tdpbssd, tdpbsud) instead of VNNI; the same integers, so the same
///   floats (Q6_K and decode steps stay on VNNI);
/// - Avx2: Int8's decode steps by AVX2's instructions (vpmaddubsw,
///   vpmaddwd: any x86-64-v3), a prefill widened as F32's;
/// - Auto: Amx where the host has AMX (hostHasAmx; measured faster, see
///   docs/cpu-backend.md), else Int8 where it has AVX-512 VNNI, else Avx2.
enum class QuantDot { Auto, F32, Int8, Amx, Avx2 };
/// "auto", "f32", "int8", "amx", "avx2" (the option's values), or nullopt.
std::optional<QuantDot> parseQuantDot(llvm::StringRef name);
/// How far ahead a decode step's tiles prefetch their F16 and BF16 rows and
/// their K-quant blocks (the pass option `decode-prefetch`; CpuKernels.h,
/// halfDecodeTilePrefetchBytes and kQuantTilePrefetchBlocks give the
/// figures): Near (256 bytes, one block: measured best on an AMD EPYC, Zen
/// 4), Far (512 bytes, eight blocks: on the Intel Xeons) or Host (Far where
/// the host's L1 data cache has 12 ways or more or says nothing, else Near:
/// decodePrefetchesFar).
enum class DecodePrefetch { Host, Near, Far };
/// "host", "near", "far" (the option's values), or nullopt.
std::optional<DecodePrefetch> parseDecodePrefetch(llvm::StringRef name);
/// Whether this host runs the integer dot products (AVX-512 VNNI).
bool hostHasInt8Dot();
/// Whether this host runs quant-dot=avx2's decode tiles (AVX2).
bool hostHasAvx2();
/// Whether this host runs AMX int8 tiles: the CPU has them (amx-tile,
/// amx-int8) beside VNNI, and Linux granted this process the tile data
/// state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once; without it the first
/// tile instruction raises SIGILL). The permission is the process's, so it
/// covers the worker threads too.
bool hostHasAmx();
/// The ways of this host's L1 data cache (sysconf), 0 when it says nothing:
/// how many rows a decode tile of F16 weights reads at once
/// (CpuQuantMatmul.cpp, decodeTileRows).
int64_t hostL1DataWays();

/// A new CPU target for vectors of `vectorBits` (512: AVX-512, 256: AVX2;
/// 0: the host's), which sets the register tile of the packed matmul, and
/// quantised weights multiplied as `quantDot` says.
std::unique_ptr<ForwardTarget>
createCpuTarget(int64_t vectorBits = 0, QuantDot quantDot = QuantDot::Auto,
                DecodePrefetch prefetch = DecodePrefetch::Host);

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTOCPU_CPUTARGET_H
