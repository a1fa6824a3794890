// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.length with two operands.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.length' op requires a single operand

func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %0 = "kv.length"(%c, %c) : (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>) -> index
  return
}
