// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A generic kv.prefill whose operandSegmentSizes give the model no value (crashed the verifier once).
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.prefill' op operand group #0 is a single operand, but operandSegmentSizes gives it 0 values

func.func @f(%c: !kv.cache<5x4x8xf32>, %t: tensor<?xi32>) {
  %0:2 = "kv.prefill"(%c, %t) <{operandSegmentSizes = array<i32: 0, 1, 0, 1, 0>}> : (!kv.cache<5x4x8xf32>, tensor<?xi32>) -> (!kv.cache<5x4x8xf32>, tensor<?x512xf32>)
  return
}
