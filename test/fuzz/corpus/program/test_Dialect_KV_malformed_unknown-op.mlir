// RUN: not kv-opt %s 2>&1 | FileCheck %s
// An op the kv dialect does not define.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: custom op 'kv.frobnicate' is unknown

func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %0 = kv.frobnicate %c : !kv.cache<5x4x8xf32>
  return
}
