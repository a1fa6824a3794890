// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.compose whose operandSegmentSizes give the cache two values and the block none (crashed the verifier once).
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.compose' op operand group #0 is a single operand, but operandSegmentSizes gives it 2 values

func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %0 = "kv.compose"(%c, %c) <{operandSegmentSizes = array<i32: 2, 0, 0, 0>}> : (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>) -> !kv.cache<5x4x8xf32>
  return
}
