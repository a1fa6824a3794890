// RUN: not kv-opt %s 2>&1 | FileCheck %s
// An i32 where a !kv.cache is expected.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'kv.length' op operand #0 must be paged KV cache view, but got 'i32'

func.func @f(%x: i32) -> index {
  %n = kv.length %x : i32
  return %n : index
}
