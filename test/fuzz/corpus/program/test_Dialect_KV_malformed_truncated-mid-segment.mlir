// RUN: not kv-opt %s 2>&1 | FileCheck %s
// Input that ends in the middle of a segment kind.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: custom op 'kv.segment' expected string or keyword containing one of the following enum values for attribute 'kind'

kv.context @agent {
  kv.segment @city kind(fa