// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=f32" --split-input-file | FileCheck %s

// How far ahead a decode tile's rows prefetch their weights
// (CpuKernels.h): rows of 16-bit floats 256 bytes
// (kHalfDecodeTilePrefetchBytes), blocks of the other widened formats 512
// (kDecodeTilePrefetchBytes). Both measured on the Zen 4 machine
// (docs/cpu-backend.md, "Weight rows in tiles").

// An F16 row, 32 columns (64 bytes) a step: the step's byte offset plus
// 256, then the tile's rows prefetched there.
// CHECK-LABEL: func.func private @{{.*}}_matmul_f16_dot_task(
// CHECK:         scf.for %[[J:.+]] = %{{.*}} to %{{.*}} step %c32
// CHECK-NEXT:      %[[TWO:.+]] = arith.constant 2 : index
// CHECK-NEXT:      %[[AT:.+]] = arith.muli %[[J]], %[[TWO]] : index
// CHECK-NEXT:      %[[AHEAD:.+]] = arith.constant 256 : index
// CHECK-NEXT:      arith.addi %[[AT]], %[[AHEAD]] : index
// CHECK:           memref.prefetch %{{.*}}[%{{.*}}], read, locality<3>, data : memref<?xi8>
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:f16;wk:f16;wv:f16;wo:f16;w1:f16;w2:f16;w3:f16;wcls:f16"]]} {
}

// -----

// A Q8_0 row, widened a block (34 bytes) a step: 512 bytes ahead.
// CHECK-LABEL: func.func private @{{.*}}_matmul_q8_0_dot_task(
// CHECK:         scf.for %[[B:.+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK-NEXT:      %[[SIZE:.+]] = arith.constant 34 : index
// CHECK-NEXT:      %[[AT:.+]] = arith.muli %[[B]], %[[SIZE]] : index
// CHECK-NEXT:      %[[AHEAD:.+]] = arith.constant 512 : index
// CHECK-NEXT:      arith.addi %[[AT]], %[[AHEAD]] : index
// CHECK:           memref.prefetch %{{.*}}[%{{.*}}], read, locality<3>, data : memref<?xi8>
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q8_0;wk:q8_0;wv:q8_0;wo:q8_0;w1:q8_0;w2:q8_0;w3:q8_0;wcls:q8_0"]]} {
}
