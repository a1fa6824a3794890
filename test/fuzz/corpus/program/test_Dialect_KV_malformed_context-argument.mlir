// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A kv.context whose body has an argument.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.context' op region should have no arguments

kv.context @agent {
^bb0(%x: i32):
  kv.segment @city kind(fact) tokens(4)
}
