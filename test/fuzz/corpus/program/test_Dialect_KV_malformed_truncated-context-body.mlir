// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Input that ends inside a kv.context body.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected operation name in quotes

kv.context @agent {
  kv.segment @system kind(system) tokens(12)
  kv.segment @city kind(fact) tokens(?)
