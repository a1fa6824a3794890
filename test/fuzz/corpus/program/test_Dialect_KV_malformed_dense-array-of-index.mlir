// RUN: not kv-opt %s 2>&1 | FileCheck %s
// RUN: not kv-opt - < %s 2>&1 | FileCheck %s --check-prefix=STDIN
// RUN: not kv-run %s 2>&1 | FileCheck %s --check-prefix=RUNERR
// A dense array of index elements: MLIR 22's parser crashes on it (found by
// kv-fuzz-program), so the parser guard refuses it with a location first.
// CHECK: dense-array-of-index.mlir:[[@LINE+5]]:59: error: dense array of 'index' elements is not supported (the MLIR 22 parser crashes on it); use 'i64'
// CHECK-NEXT: operandSegmentSizes = array<index: 2, 0, 0, 0>
// STDIN: <stdin>:[[@LINE+3]]:59: error: dense array of 'index' elements
// RUNERR: dense-array-of-index.mlir:[[@LINE+2]]:59: error: dense array of 'index' elements
func.func @f(%c: !kv.cache<5x4x8xf32>) {
  %0 = "kv.compose"(%c, %c) <{operandSegmentSizes = array<index: 2, 0, 0, 0>}> : (!kv.cache<5x4x8xf32>, !kv.cache<5x4x8xf32>) -> !kv.cache<5x4x8xf32>
  return
}
