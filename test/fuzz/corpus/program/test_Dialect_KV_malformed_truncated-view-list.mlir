// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Input that ends in the middle of a view list.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected SSA operand

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %a: !kv.cache<5x4x8xf32>, %d: index, %t: tensor<?xi32>) {
  %0, %1 = kv.prefill %m, [%a + %d,
