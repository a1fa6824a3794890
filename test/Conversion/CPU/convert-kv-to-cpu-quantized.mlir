// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=f32" --split-input-file | FileCheck %s
// RUN: kv-opt %s --kv-lower-to-cpu="vector-bits=512 quant-dot=f32" --split-input-file | FileCheck %s --check-prefix=LOWERED
// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=int8" --split-input-file | FileCheck %s --check-prefix=INT8
// RUN: not kv-opt %s --convert-kv-to-cpu=quant-dot=fast --split-input-file 2>&1 | FileCheck %s --check-prefix=BADDOT
// BADDOT: error: convert-kv-to-cpu: quant-dot must be auto, f32, int8, amx or avx2, not 'fast'

// A forward built for the weights of a Q4_K_M file (kv.weight_formats: Q4_K,
// Q6_K for attn_v and ffn_down of layers 2 and 3, the classifier Q8_0):
// each weight is its bytes and a byte offset loaded from weight_offsets,
// an f32 slice (the norms) is viewed as floats, every other format calls
// matmul_<format>, and the layer loop is split where the formats change.
!m = !kv.model<dim = 256, hidden = 512, layers = 4, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q4_k;wk:q4_k;wv:q4_k*2,q6_k*2;wo:q4_k;w1:q4_k;w2:q4_k*2,q6_k*2;w3:q4_k;wcls:q8_0"]]} {
}

// The attribute stays for convert-kv-to-runtime, which names the forward's
// entry points by it and removes it (LOWERED).
// CHECK-LABEL: module attributes {kv.weight_formats
// The kernel of each format: for a decode (under 4 rows) tiles of 4 rows of
// weights widened in registers as they are multiplied, a group of a block
// (Q4_K: 8 of 32, each with its scale d * sc and min dmin * m) as one vector
// per row, its two halves into the row's two accumulators (no buffer:
// nothing on the stack), each row's weights prefetched ahead; for a prefill
// the rows widened into a buffer, then the f32 packed matmul on them.
// CHECK:       func.func private @[[P:kv_fwd_[0-9a-f]+]]_matmul_q8_0(%{{.*}}: memref<?x?xf32, strided<[?, 1], offset: ?>>, %{{.*}}: memref<?xi8>, %{{.*}}: index, %{{.*}}: memref<?x?xf32, strided<[?, 1], offset: ?>>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>)
// CHECK:         call @kvrt_parallel_for(
// CHECK:         call @kvrt_parallel_for(
// CHECK:         call @[[P]]_matmul_nt(
// CHECK:       func.func private @[[P]]_matmul_q4_k(
// CHECK:       func.func private @[[P]]_matmul_q4_k_dot_task(
// CHECK-NOT:     memref.alloca
// CHECK:         iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, f32, f32, f32, f32)
// CHECK-COUNT-12: memref.prefetch %{{.*}}[%{{.*}}], read, locality<3>, data : memref<?xi8>
// Each row's 8 scales and 8 mins of the block decoded together, before its
// groups (kQuantScalesMins): the 12 scale bytes in one load, two shuffles.
// CHECK-COUNT-4: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11] : vector<16xi8>, vector<16xi8>
// CHECK-COUNT-8: vector.load %{{.*}} : memref<?xi8>, vector<32xi8>
// CHECK-NOT:     memref.alloca
// CHECK:         vector.fma
// CHECK:       func.func private @[[P]]_matmul_q4_k_widen_task(
// CHECK:       func.func private @[[P]]_matmul_q6_k(

// CHECK:       func.func private @[[P]]_prefill_impl(
// CHECK-SAME:    %{{[a-z0-9]+}}: memref<?xi8>, %[[WQ:[a-z0-9]+]]: memref<?xi8>
// Layers 0 and 1: Q4_K everywhere.
// CHECK:         scf.for %[[L:.+]] = %c0{{.*}} to %{{.*}} step
// CHECK:           memref.load %{{.*}}[%{{.*}}] : memref<?xi64>
// CHECK:           memref.view %{{.*}}[%{{.*}}][%{{.*}}] : memref<?xi8> to memref<?xf32>
// CHECK:           call @[[P]]_rmsnorm(
// A decode step (fewer than 4 rows) takes the query, key and value as one
// kernel, a prefill a matmul each.
// CHECK:           scf.if
// CHECK:             call @[[P]]_products_q4_k_q4_k_q4_k(%{{.*}}, %[[WQ]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK:           } else {
// CHECK:             call @[[P]]_matmul_q4_k(%{{.*}}, %[[WQ]], %{{.*}}, %{{.*}})
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:           call @[[P]]_matmul_q4_k_acc(
// The gate and up projections the same way, SwiGLU inside the decode's
// kernel.
// CHECK:           scf.if
// CHECK:             call @[[P]]_gated_q4_k(
// CHECK:           } else {
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:             call @[[P]]_swiglu(
// CHECK:           call @[[P]]_matmul_q4_k_acc(
// Layers 2 and 3: attn_v and ffn_down in Q6_K.
// CHECK:         scf.for %{{.*}} = %c2{{.*}} to %{{.*}} step
// CHECK:             call @[[P]]_products_q4_k_q4_k_q6_k(
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:             call @[[P]]_matmul_q4_k(
// CHECK:             call @[[P]]_matmul_q6_k(
// CHECK:           call @[[P]]_matmul_q4_k_acc(
// CHECK:             call @[[P]]_gated_q4_k(
// CHECK:           call @[[P]]_matmul_q6_k_acc(
// The classifier.
// CHECK:         call @[[P]]_matmul_q8_0(
// The fused kernels, one per combination of formats: one parallel loop over
// the tiles of every weight, each weight's tiles widened in registers.
// CHECK:       func.func private @[[P]]_products_q4_k_q4_k_q4_k(
// CHECK-NOT:     func.func
// CHECK:         call @kvrt_parallel_for(
// CHECK-NEXT:    return
// CHECK:       func.func private @[[P]]_products_q4_k_q4_k_q4_k_task(
// CHECK-COUNT-3: vector.fma
// CHECK:       func.func private @[[P]]_gated_q4_k(
// CHECK:       func.func private @[[P]]_gated_q4_k_task(
// The gate's sums and the up projection's combined: silu(g) * u.
// CHECK:         math.exp
// CHECK:       func.func private @[[P]]_products_q4_k_q4_k_q6_k(

// With integer dots, a fused kernel quantises its input once, on the
// calling thread, before its one parallel loop.
// INT8:        func.func private @[[P:kv_fwd_[0-9a-f]+]]_products_q4_k_q4_k_q6_k(
// INT8-NOT:      call @kvrt_parallel_for
// INT8:          math.roundeven
// INT8-NOT:      call @kvrt_parallel_for
// INT8:          vector.store
// INT8:          call @kvrt_parallel_for(
// INT8-NOT:      call @kvrt_parallel_for
// INT8:          memref.dealloc
// INT8:          return
// INT8:        func.func private @[[P]]_products_q4_k_q4_k_q6_k_task(
// INT8:          llvm.call_intrinsic "llvm.x86.avx512.vpdpwssd.512"

// LOWERED-NOT: kv.weight_formats
// LOWERED:     llvm.func @{{kv_fwd_[0-9a-f]+}}_prefill(%{{.*}}: !llvm.ptr)

// -----

// All f32 (the default, and "f32" spelled out): the f32 kernels alone, one
// layer loop, and the forward of an f32 model's name.
!m = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "f32"]]} {
}

// CHECK-LABEL: module attributes {kv.weight_formats
// CHECK-NOT:   _matmul_q
// CHECK:       func.func private @kv_fwd_fcf7c6399ef6fcd9_prefill_impl(
// CHECK:         scf.for
// CHECK:           call @kv_fwd_fcf7c6399ef6fcd9_matmul_nt(
// CHECK-NOT:     scf.for %{{.*}} = %c{{[1-9]}}
