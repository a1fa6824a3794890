// RUN: not kv-opt %s 2>&1 | FileCheck %s
// A model value used as a cache.
// CHECK: {{.*}}.mlir:{{[0-9]+}}:{{[0-9]+}}: error: use of value '%m' expects different type than prior uses: '!kv.cache<5x4x8xf32>' vs '!kv.model<

func.func @f(%m: !kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>) {
  %n = kv.length %m : !kv.cache<5x4x8xf32>
  return
}
