// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Two results bound to an op that has one.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: operation defines 1 results but was provided 2 to bind

func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %a, %b = kv.length %c : !kv.cache<5x4x8xf32>
  return
}
