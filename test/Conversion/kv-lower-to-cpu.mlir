// RUN: kv-opt %s --kv-lower-to-cpu | FileCheck %s
// RUN: kv-opt %s --kv-lower-to-cpu | FileCheck %s --check-prefix=NONE
// RUN: kv-opt %s --kv-lower-to-cpu="reassociate-fp-reductions=false" | FileCheck %s --check-prefix=ORDERED

// The whole pipeline: the forward of stories260K's config in the LLVM
// dialect, with C interfaces for the host, libm calls for RoPE in f64 and no
// upstream op left.
module attributes {kv.forward = {stories = !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>}} {
}

// NONE:        module {
// NONE-NOT:    func.func
// NONE-NOT:    {{^ *(%.* = )?}}scf.
// NONE-NOT:    {{^ *(%.* = )?}}memref.
// NONE-NOT:    {{^ *(%.* = )?}}vector.
// NONE-NOT:    {{^ *(%.* = )?}}math.
// NONE-NOT:    {{^ *(%.* = )?}}arith.
// NONE-NOT:    unrealized_conversion_cast
// NONE-NOT:    kv.forward

// CHECK-DAG:   llvm.func @malloc(
// CHECK-DAG:   llvm.func @stories_attention(
// CHECK-DAG:   llvm.func @_mlir_ciface_stories_attention(
// CHECK-DAG:   llvm.func @_mlir_ciface_stories_prefill(
// CHECK-DAG:   llvm.func @_mlir_ciface_stories_materialize(
// CHECK-DAG:   llvm.intr.pow(%{{.*}}, %{{.*}}) : (f64, f64) -> f64
// CHECK-DAG:   llvm.intr.cos(%{{.*}}) : (f64) -> f64
// CHECK-DAG:   llvm.intr.sin(%{{.*}}) : (f64) -> f64
// CHECK-DAG:   llvm.intr.exp(%{{.*}}) : (f32) -> f32
// CHECK-DAG:   "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f32, vector<16xf32>) -> f32
// The softmax weights' exp is a 16-lane polynomial (@stories_exp16).
// CHECK-DAG:   llvm.func @stories_exp16(%{{.*}}: vector<16xf32>) -> vector<16xf32>
// CHECK-DAG:   llvm.intr.floor(%{{.*}}) : (vector<16xf32>) -> vector<16xf32>

// ORDERED:     "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<none>}> : (f32, vector<16xf32>) -> f32
