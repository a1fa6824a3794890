// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.edit with two correction operands: an erratum takes one.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.edit' op operand group starting at #3 requires 0 or 1 element, but found 2

kv.context @agent {
  kv.segment @city kind(fact) tokens(?)
  kv.segment @answer kind(answer) tokens(4)
}
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, %c: !kv.cache<5x4x8xf32, @agent>, %t: tensor<?xi32>) {
  %0 = "kv.edit"(%m, %c, %t, %t, %t) <{segment = @city, strategy = #kv.strategy<erratum>}> : (!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>, !kv.cache<5x4x8xf32, @agent>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> !kv.cache<5x4x8xf32, @agent>
  return
}
