// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A result use with a result number of 2^31 - 1: MLIR 22's parser allocates
// a slot for every number below it (32 GiB) before it checks the number
// (found by kv-fuzz-program), so the parser guard refuses it first.
// CHECK: huge-result-number.mlir:[[@LINE+4]]:20: error: result number 2147483647 of '%c' exceeds 1048576, more than any op has
// CHECK-NEXT: "func.return"(%c#2147483647)
func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>) -> !kv.cache<5x4x8xf32> {
  %c = kv.empty : !kv.cache<5x4x8xf32>
  "func.return"(%c#2147483647) : (!kv.cache<5x4x8xf32>) -> ()
}
