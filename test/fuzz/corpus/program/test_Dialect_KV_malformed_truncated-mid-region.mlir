// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Input that ends inside a function body.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected operation name in quotes

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32>) {
  %0 = kv.materialize %m, %c : !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32>
