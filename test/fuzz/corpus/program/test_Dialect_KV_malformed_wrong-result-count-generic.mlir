// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.tokens with two results.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.tokens' op requires one result

func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %0:2 = "kv.tokens"(%c) : (!kv.cache<5x4x8xf32>) -> (tensor<?xi32>, tensor<?xi32>)
  return
}
