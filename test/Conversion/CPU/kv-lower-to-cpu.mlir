// RUN: kv-opt %s --kv-lower-to-cpu | FileCheck %s
// RUN: kv-opt %s --kv-lower-to-cpu | FileCheck %s --check-prefix=NONE
// RUN: kv-opt %s --kv-lower-to-cpu="reassociate-fp-reductions=false" | FileCheck %s --check-prefix=ORDERED

// The whole pipeline on a forward alone (stories260K's config, asked for by
// kv.export_forwards): the LLVM dialect, libm calls for RoPE in f64, the
// entry points external and every kernel internal, no upstream op left.
module attributes {kv.export_forwards = [!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>]} {
}

// NONE:        module {
// NONE-NOT:    func.func
// NONE-NOT:    {{^ *(%.* = )?}}scf.
// NONE-NOT:    {{^ *(%.* = )?}}memref.
// NONE-NOT:    {{^ *(%.* = )?}}vector.
// NONE-NOT:    {{^ *(%.* = )?}}math.
// NONE-NOT:    {{^ *(%.* = )?}}arith.
// NONE-NOT:    unrealized_conversion_cast
// NONE-NOT:    llvm.intr.pow
// NONE-NOT:    kv.export_forwards

// CHECK-DAG:   llvm.func internal @[[P:kv_fwd_[0-9a-f]+]]_attention_kernel(
// CHECK-DAG:   llvm.func @[[P]]_prefill(%{{.*}}: !llvm.ptr) {
// CHECK-DAG:   llvm.func @[[P]]_attention(%{{.*}}: !llvm.ptr) {
// CHECK-DAG:   llvm.func @[[P]]_materialize(%{{.*}}: !llvm.ptr) {
// CHECK-DAG:   llvm.mlir.constant(dense<[1.000000e+00, 1.000000e-01, 1.000000e-02, 1.000000e-03]> : vector<4xf64>)
// CHECK-DAG:   llvm.intr.cos(%{{.*}}) : (f64) -> f64
// CHECK-DAG:   llvm.intr.sin(%{{.*}}) : (f64) -> f64
// CHECK-DAG:   llvm.intr.exp(%{{.*}}) : (f32) -> f32
// CHECK-DAG:   "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<reassoc>}> : (f32, vector<16xf32>) -> f32
// The softmax weights' exp is a 16-lane polynomial.
// CHECK-DAG:   llvm.func internal @[[P]]_exp16(%{{.*}}: vector<16xf32>) -> vector<16xf32>
// CHECK-DAG:   llvm.intr.floor(%{{.*}}) : (vector<16xf32>) -> vector<16xf32>

// ORDERED:     "llvm.intr.vector.reduce.fadd"(%{{.*}}, %{{.*}}) <{fastmathFlags = #llvm.fastmath<none>}> : (f32, vector<16xf32>) -> f32
