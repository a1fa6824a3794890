// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A 2-D tensor of token ids.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.prefill' op operand #2 must be 1D tensor of 32-bit signless integer values, but got 'tensor<2x3xi32>'

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<2x3xi32>) {
  %0, %1 = kv.prefill %m, %c, %t : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, (!kv.cache<5x4x8xf32>), tensor<2x3xi32> -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}
