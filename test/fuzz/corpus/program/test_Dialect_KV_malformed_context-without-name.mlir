// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A kv.context without a symbol name.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: custom op 'kv.context' expected valid '@'-identifier for symbol name

kv.context {
  kv.segment @city kind(fact) tokens(4)
}
