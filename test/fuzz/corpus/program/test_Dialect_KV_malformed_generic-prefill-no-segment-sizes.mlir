// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.prefill without operandSegmentSizes.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.prefill' op operand count (3) does not match with the total size (0) specified in attribute 'operandSegmentSizes'

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  %0:2 = "kv.prefill"(%m, %c, %t) : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32>, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}
