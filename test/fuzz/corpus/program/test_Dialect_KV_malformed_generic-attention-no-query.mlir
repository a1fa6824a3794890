// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.attention whose operandSegmentSizes give the query no value (crashed the verifier once).
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.attention' op operand group #1 is a single operand, but operandSegmentSizes gives it 0 values

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %p: index) {
  %0 = "kv.attention"(%m, %c, %p) <{layer = 0 : i64, operandSegmentSizes = array<i32: 1, 0, 1, 0, 1>}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32>, index) -> tensor<?x8x8xf32>
  return
}
