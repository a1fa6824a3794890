// REQUIRES: avx512vnni
// RUN: kv-opt %s --split-input-file --convert-kv-to-cpu=quant-dot=int8 | FileCheck %s
// RUN: kv-opt %s --split-input-file --convert-kv-to-cpu=quant-dot=f32 | FileCheck %s --check-prefix=F32

// Integer dot products (quant-dot=int8, and auto on a host with AVX-512
// VNNI and no AMX; with AMX, convert-kv-to-cpu-amx.mlir): matmul_q8_0
// quantises the activations per block of 32 in a parallel pre-pass, then
// multiplies with vpdpbusd; decode tiles over the weights as they are,
// prefill tiles over panels repacked per call. Q4_K (w1 here) and Q6_K (the
// classifier) the same, but the activations quantised per block of 256, a
// decode tile multiplying by vpdpbusd, packing to words (vpackssdw) for
// vpdpwssd to scale the groups, and their prefill
// taking the tokens' sums of quants from one more pre-pass; nothing widens to
// f32.
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q4_k;w2:q8_0;w3:q8_0;wcls:q6_k"]]} {
}

// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0(
// CHECK:         memref.alloc
// CHECK:         call @kvrt_parallel_for(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_quantize_task(
// CHECK:         math.roundeven %{{.*}} : vector<32xf32>
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_dot_task(
// The token's two scales of a pair, and per row the weights' two, multiplied
// in two lanes, then spread to the pair's 16.
// CHECK:         %[[DX:.*]] = vector.from_elements %{{.*}}, %{{.*}} : vector<2xf32>
// CHECK:         %[[DW:.*]] = arith.extf %{{.*}} : vector<2xf16> to vector<2xf32>
// CHECK:         %[[DOT:.*]] = llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:         %[[S:.*]] = arith.mulf %[[DW]], %[[DX]] : vector<2xf32>
// CHECK:         %[[SPREAD:.*]] = vector.shuffle %[[S]], %[[S]] [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
// CHECK:         %[[WIDE:.*]] = arith.sitofp %[[DOT]] : vector<16xi32> to vector<16xf32>
// CHECK:         vector.fma %[[WIDE]], %[[SPREAD]], %{{.*}} : vector<16xf32>
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_pack_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q8_0_tile_task(
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k(
// CHECK-NOT:     call @{{kv_fwd_[0-9a-f]+}}_matmul_nt(
// CHECK:         call @kvrt_parallel_for(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_quantize_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_dot_task(
// A tile of 6 rows carries a 16-lane accumulator a row and, for the mins'
// terms, an 8-lane one a pair of rows, added to the rows' sums at the end.
// CHECK:         scf.for {{.*}} -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK:         vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.packssdw.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"
// CHECK:         vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK:         vector.extract_strided_slice %{{.*}} {offsets = [4], sizes = [4], strides = [1]} : vector<8xf32> to vector<4xf32>
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_pack_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_sums_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_k_tile_task(
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k(
// CHECK-NOT:     call @{{kv_fwd_[0-9a-f]+}}_matmul_nt(
// CHECK:         call @kvrt_parallel_for(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_quantize_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_dot_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.packssdw.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_pack_task(
// CHECK-NOT:     llvm.call_intrinsic
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_sums_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_tile_task(
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-NOT:     _widen_task
// CHECK:       func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q6_k_acc(

// F32-NOT: llvm.call_intrinsic

// -----

// Q8_0 and Q4_K weights on one input (wv beside wq and wk): a decode step's
// fused product quantises it twice, a scale per 32 for wv's tiles and per 256
// for wq's and wk's, and frees both.
!m = !kv.model<dim = 256, hidden = 512, layers = 1, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q4_k;wk:q4_k;wv:q8_0;wo:q4_k;w1:q4_k;w2:q4_k;w3:q4_k;wcls:q6_k"]]} {
}

// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_products_q4_k_q4_k_q8_0(
// CHECK-NOT:     memref<?xi16>
// CHECK:         math.roundeven
// CHECK:         memref.alloc({{.*}}) {{.*}} : memref<?xi16>
// CHECK:         math.roundeven
// CHECK:         memref.store {{.*}} : memref<?xi16>
// CHECK:         call @kvrt_parallel_for(
// CHECK-COUNT-9: memref.dealloc
// CHECK:         return
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_products_q4_k_q4_k_q8_0_task(
// CHECK-DAG:     llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"
// CHECK-DAG:     llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"

// -----

// Q5_K (Q5_K_M's matrices beside Q6_K): a decode step's tiles are Q4_K's,
// each element's fifth bit moved from qh to bit 4 by word shifts; Q5_K has no
// panels, so its prefill widens the weights (a _widen_task, no _pack_task).
!m = !kv.model<dim = 256, hidden = 512, layers = 1, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q5_k;wk:q5_k;wv:q6_k;wo:q5_k;w1:q5_k;w2:q6_k;w3:q5_k;wcls:q6_k"]]} {
}

// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q5_k(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q5_k_quantize_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q5_k_dot_task(
// CHECK:         arith.shli {{.*}} : vector<32xi16>
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.packssdw.512"
// CHECK:         arith.shrui {{.*}} : vector<32xi16>
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"
// CHECK-NOT:     _matmul_q5_k_pack_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q5_k_widen_task(
// CHECK-NOT:     llvm.call_intrinsic
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q5_k_acc(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_gated_q5_k_task(
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.packssdw.512"

// -----

// Q4_0: a decode step's tiles take the nibbles unsigned (a pair of blocks'
// 16-byte halves into four 128-bit lanes, the high nibbles' lanes shifted by
// 4), the dot started at the token's bias / 16; each pair's two f16 scales
// from one load and one shuffle. A prefill packs Q8_0's panels (q - 8) and
// takes Q8_0's tiles.
!m = !kv.model<dim = 256, hidden = 512, layers = 1, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q4_0;wk:q4_0;wv:q4_0;wo:q4_0;w1:q4_0;w2:q4_0;w3:q4_0;wcls:q6_k"]]} {
}

// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0_quantize_task(
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0_dot_task(
// CHECK:         arith.shrsi {{.*}} : vector<16xi32>
// CHECK:         arith.shrui {{.*}} : vector<32xi16>
// CHECK:         llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0_pack_task(
// CHECK:         arith.shrui {{.*}} : vector<16xi8>
// CHECK-LABEL: func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0_tile_task(
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.x86.avx512.vpdpbusd.512"
// CHECK-NOT:     _widen_task
// CHECK:       func.func private @{{kv_fwd_[0-9a-f]+}}_matmul_q4_0_acc(
