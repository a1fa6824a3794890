// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A segment size that does not fit in 64 bits.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: custom op 'kv.segment' integer value too large

kv.context @agent {
  kv.segment @city kind(fact) tokens(99999999999999999999)
}
