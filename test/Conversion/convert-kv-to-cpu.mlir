// RUN: kv-opt %s --convert-kv-to-cpu --split-input-file | FileCheck %s

// The forward of an interleaved-RoPE GQA model: upstream dialects only, the
// three public kernels with C interfaces, the attribute consumed.
module attributes {kv.forward = {tiny = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>}} {
}

// CHECK-LABEL: module {
// CHECK-NOT:   kv.forward
// CHECK:       func.func private @tiny_rmsnorm(
// CHECK:         math.sqrt
// CHECK:       func.func private @tiny_matmul_nt(
// CHECK:         vector.fma
// CHECK:       func.func private @tiny_rope_table(%{{.*}}: i64,
// CHECK:         arith.sitofp %{{.*}} : i64 to f64
// CHECK:         math.powf %{{.*}} : f64
// CHECK:         math.cos %{{.*}} : f64
// CHECK:         math.sin %{{.*}} : f64
// CHECK:       func.func private @tiny_rope_apply(
// Interleaved pairs (2i, 2i + 1).
// CHECK:         %[[IA:.+]] = arith.muli %{{.*}}, %c2 : index
// CHECK:         arith.addi %[[IA]], %c1 : index
// CHECK:       func.func private @tiny_store_kv(
// The softmax weights' exp: 16 lanes, a polynomial, no libm call per lane.
// CHECK:       func.func private @tiny_exp16(%{{.*}}: vector<16xf32>) -> vector<16xf32>
// CHECK:         math.floor %{{.*}} : vector<16xf32>
// CHECK:         vector.fma
// CHECK:         arith.shli
// CHECK:       func.func @tiny_attention(%{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %[[KV:[^:]+]]: memref<?xf32>, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?x8xi64>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: memref<?xf32>) attributes {llvm.emit_c_interface}
// One query rotation per run: to m - delta (column 4 of the run table).
// CHECK:         %[[DELTA:.+]] = memref.load %{{.*}}[%{{.*}}, %c4] : memref<?x8xi64>
// CHECK:         scf.if
// CHECK:           %[[QPOS:.+]] = arith.subi %{{.*}}, %[[DELTA]] : i64
// CHECK:           call @tiny_rope_table(%[[QPOS]],
// CHECK:           call @tiny_rope_apply(
// Keys are read as stored from the arena, never rotated: no RoPE call after
// the query's; the dot products are FMAs over 16-lane slices.
// CHECK-NOT:       call @tiny_rope
// CHECK:           vector.maskedload %[[KV]][%{{.*}}], %{{.*}}, %{{.*}} : memref<?xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK-NEXT:      vector.fma
// CHECK:           vector.reduction <add>, %{{.*}} : vector<16xf32> into f32
// Online softmax merge per chunk: chunk max, new running max, rescale factor
// of the old sum and accumulator, the weights, then V summed with FMAs.
// CHECK:           vector.reduction <maxnumf>
// CHECK:           %[[MNEW:.+]] = arith.maxnumf %{{.*}}, %{{.*}} : f32
// CHECK:           %[[DM:.+]] = arith.subf %{{.*}}, %[[MNEW]] : f32
// CHECK:           math.exp %[[DM]] : f32
// CHECK:           call @tiny_exp16(
// CHECK:           vector.load %[[KV]][%{{.*}}] : memref<?xf32>, vector<8xf32>
// CHECK:           vector.fma %{{.*}} : vector<8xf32>
// CHECK-NOT:       call @tiny_rope
// CHECK:       func.func @tiny_prefill({{.*}}, %[[NLAYERS:.+]]: i64, %{{.+}}: i64, %{{.+}}: memref<?xf32>) attributes {llvm.emit_c_interface}
// The layer loop runs to the layer count it is given (fewer for a scan).
// CHECK:         %[[NL:.+]] = arith.index_cast %[[NLAYERS]] : i64 to index
// CHECK:         scf.for %{{.+}} = %{{.+}} to %[[NL]]
// CHECK:         call @tiny_store_kv(
// CHECK:         call @tiny_attention(
// CHECK:         call @tiny_swiglu(
// CHECK:       func.func @tiny_materialize({{.*}}) attributes {llvm.emit_c_interface}

// -----

// Half RoPE pairs (i, i + head_size / 2); two models in one module.
module attributes {kv.forward = {a = !kv.model<dim = 48, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 64, rope = half, theta = 500000.0, eps = 1.0e-06>, b = !kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>}} {
}

// CHECK-LABEL: module {
// CHECK:       func.func private @a_rope_apply(
// CHECK-NEXT:    %c0 = arith.constant 0 : index
// CHECK:         %[[HALF:.+]] = arith.constant 6 : index
// CHECK:         arith.addi %{{.*}}, %[[HALF]] : index
// CHECK:       func.func @a_prefill(
// CHECK:       func.func @b_prefill(

// -----

// A module without the attribute is left as it is.
// CHECK-LABEL: func.func @negative_untouched
// CHECK-NOT:   func.func
func.func @negative_untouched() {
  return
}
