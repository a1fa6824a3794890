// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A line of stray punctuation.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected operation name in quotes

}{ ][ %%% @@ ^^ ## !! >< ,, :: ->
