// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.edit without its strategy.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.edit' op requires attribute 'strategy'

kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  %0 = "kv.edit"(%m, %c, %t) <{segment = @city}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>
  return
}
