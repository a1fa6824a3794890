// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Token ids of type f32.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.prefill' op operand #2 must be 1D tensor of 32-bit signless integer values, but got 'tensor<?xf32>'

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>, %t: tensor<?xf32>) {
  %0, %1 = kv.prefill %m, %c, %t : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, (!kv.cache<5x4x8xf32>), tensor<?xf32> -> !kv.cache<5x4x8xf32>, tensor<?x512xf32>
  return
}
