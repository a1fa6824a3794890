// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=f32 decode-prefetch=near" --split-input-file | FileCheck %s --check-prefixes=CHECK,NEAR
// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=f32 decode-prefetch=far" --split-input-file | FileCheck %s --check-prefixes=CHECK,FAR
// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=int8 check-host=false decode-prefetch=near" --split-input-file | FileCheck %s --check-prefix=INT8-NEAR
// RUN: kv-opt %s --convert-kv-to-cpu="vector-bits=512 quant-dot=int8 check-host=false decode-prefetch=far" --split-input-file | FileCheck %s --check-prefix=INT8-FAR
// RUN: not kv-opt %s --convert-kv-to-cpu="decode-prefetch=nearby" --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD

// How far ahead a decode tile's rows prefetch their weights
// (CpuKernels.h): rows of 16-bit floats 256 bytes near, 512 far
// (halfDecodeTilePrefetchBytes), blocks of the other widened formats 512
// (kDecodeTilePrefetchBytes), the K-quants' integer tiles one block near
// and eight far (kQuantTilePrefetchBlocks). Near measured best on the Zen
// 4 machine, far on the Intel Xeon; decode-prefetch=host (the default)
// takes far where the host's L1 data cache has 12 ways or more
// (docs/cpu-backend.md, "Weight rows in tiles").
// BAD: convert-kv-to-cpu: decode-prefetch must be host, near or far, not 'nearby'

// An F16 row, 32 columns (64 bytes) a step: the step's byte offset plus
// 256 (near) or 512 (far), then the tile's rows prefetched there.
// CHECK-LABEL: func.func private @{{.*}}_matmul_f16_dot_task(
// CHECK:         scf.for %[[J:.+]] = %{{.*}} to %{{.*}} step %c32
// CHECK-NEXT:      %[[TWO:.+]] = arith.constant 2 : index
// CHECK-NEXT:      %[[AT:.+]] = arith.muli %[[J]], %[[TWO]] : index
// NEAR-NEXT:       %[[AHEAD:.+]] = arith.constant 256 : index
// FAR-NEXT:        %[[AHEAD:.+]] = arith.constant 512 : index
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

// -----

// A Q4_K row's integer tile, a block (144 bytes) a step: one block ahead
// (rounded up to whole lines: 192 bytes) near, eight (1152) far.
// INT8-NEAR-LABEL: func.func private @{{.*}}_matmul_q4_k_dot_task(
// INT8-NEAR:         scf.for %[[B:.+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// INT8-NEAR-NEXT:      %[[SIZE:.+]] = arith.constant 144 : index
// INT8-NEAR-NEXT:      %[[AT:.+]] = arith.muli %[[B]], %[[SIZE]] : index
// INT8-NEAR-NEXT:      %[[AHEAD:.+]] = arith.constant 192 : index
// INT8-NEAR-NEXT:      arith.addi %[[AT]], %[[AHEAD]] : index
// INT8-FAR-LABEL: func.func private @{{.*}}_matmul_q4_k_dot_task(
// INT8-FAR:          scf.for %[[B:.+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// INT8-FAR-NEXT:       %[[SIZE:.+]] = arith.constant 144 : index
// INT8-FAR-NEXT:       %[[AT:.+]] = arith.muli %[[B]], %[[SIZE]] : index
// INT8-FAR-NEXT:       %[[AHEAD:.+]] = arith.constant 1152 : index
// INT8-FAR-NEXT:       arith.addi %[[AT]], %[[AHEAD]] : index
!m = !kv.model<dim = 256, hidden = 512, layers = 2, heads = 2, kv_heads = 1, vocab = 32>
module attributes {kv.export_forwards = [!m], kv.weight_formats = [[!m, "wq:q4_k;wk:q4_k;wv:q4_k;wo:q4_k;w1:q4_k;w2:q4_k;w3:q4_k;wcls:q4_k"]]} {
}
