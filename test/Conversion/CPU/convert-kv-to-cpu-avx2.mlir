// REQUIRES: avx2
// RUN: kv-opt %s --split-input-file --convert-kv-to-cpu="vector-bits=256 quant-dot=avx2" | FileCheck %s
// RUN: kv-opt %s --split-input-file --convert-kv-to-cpu="vector-bits=256 quant-dot=avx2" | FileCheck %s --check-prefix=NONE
// RUN: kv-opt %s --split-input-file --kv-lower-to-cpu="vector-bits=256 quant-dot=avx2" | FileCheck %s --check-prefix=LOWERED

// quant-dot=avx2 (auto on a host without AVX-512 VNNI): a decode step's
// Q8_0, Q4_K and Q6_K products by AVX2's integer instructions on the
// 256-bit halves of the VNNI tiles' values (vpmaddubsw, then vpmaddwd; Q8_0
// signed by vpsignb, the K-quants' group scales spread by vpshufb), the
// activations quantised as for VNNI; a prefill widens the weights to f32 and
// takes the packed f32 kernel (AVX2 has no vpdpbusd for the panels). No
// AVX-512 intrinsic anywhere.
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q4_k;w2:q8_0;w3:q8_0;wcls:q6_k"]]} {
}

// NONE-NOT:     llvm.x86.avx512
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0(
// CHECK:         call @kvrt_parallel_for(
// CHECK:         call @{{kv_fwd_[0-9a-f]+}}_matmul_nt(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_quantize_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_dot_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.psign.b"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_dot_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pshuf.b"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_dot_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx2.pmadd.wd"

// LOWERED: llvm.call_intrinsic "llvm.x86.avx2.pmadd.ub.sw"
