// RUN: kv-opt %s --convert-kv-to-gpu | FileCheck %s

// The GPU forward built for the weights of a Q4_K_M file: a matmul kernel per
// format over the weights' bytes (each lane widens its elements from their
// blocks), launched with the byte offset the host loads from
// weight_offsets; f32 slices (the norms) viewed as floats on the host. The
// layer loop is split where the formats change (layers 2 and 3: attn_v and
// ffn_down in Q6_K).
!m = !kv.model<dim = 256, hidden = 512, layers = 4, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q4_k;wk:q4_k;wv:q4_k*2,q6_k*2;wo:q4_k;w1:q4_k;w2:q4_k*2,q6_k*2;w3:q4_k;wcls:q8_0"]]} {
}

// CHECK:       gpu.module @[[P:kv_fwd_[0-9a-f]+]]_kernels
// CHECK:         gpu.func @matmul(%{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: memref<?xf32>,
// CHECK:         gpu.func @matmul_q8_0(%{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: memref<?xi8>, %{{.*}}: index,
// CHECK:           call @warp_sum
// CHECK:         gpu.func @matmul_q4_k(
// The 6-bit scale and min of the element's sub-block: d * sc, dmin * m.
// CHECK:           arith.extf %{{.*}} : f16 to f32
// CHECK:           arith.mulf
// CHECK:           arith.subf
// CHECK:         gpu.func @matmul_q6_k(

// CHECK:       func.func private @[[P]]_prefill_impl(
// CHECK:         scf.for %{{.*}} = %c0{{.*}} to
// CHECK:           memref.view %{{.*}}[%{{.*}}][%{{.*}}] : memref<?xi8> to memref<?xf32>
// CHECK:           gpu.launch_func @[[P]]_kernels::@rmsnorm
// CHECK:           gpu.launch_func @[[P]]_kernels::@matmul_q4_k {{.*}} args(%{{.*}} : memref<?xf32>, %{{.*}} : index, %{{.*}} : memref<?xi8>, %{{.*}} : index,
// CHECK-NOT:       @matmul_q6_k
// CHECK:         scf.for %{{.*}} = %c2{{.*}} to
// CHECK:           gpu.launch_func @[[P]]_kernels::@matmul_q6_k
// CHECK:         gpu.launch_func @[[P]]_kernels::@matmul_q8_0
