// RUN: kv-opt %s --convert-kv-to-cpu=vector-bits=512 --split-input-file | FileCheck %s
// The register blocking chosen for AVX2, on any host: scores of 2 keys x 2
// rows per reduction, V in blocks of 2 rows x 2 slices, the matmul's 6 x 16
// tile.
// RUN: kv-opt %s --convert-kv-to-cpu=vector-bits=256 --split-input-file | FileCheck %s --check-prefix=AVX2
// RUN: not kv-opt %s --convert-kv-to-cpu=vector-bits=300 2>&1 | FileCheck %s --check-prefix=BITS
// BITS: error: convert-kv-to-cpu: vector-bits must be 0 (the host's), 256 or 512, not 300

// AVX2-LABEL:  func.func private @{{.*}}_attention_task(
// Two keys x two rows: four dot vectors, summed by two levels of pairs, then
// within the vector; the scores of (row, key) sit on lanes 0, 8, 4, 12.
// AVX2:          vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
// AVX2:          vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
// AVX2:          vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27]
// AVX2-NOT:      vector.fma
// AVX2:          vector.shuffle %{{.*}}, %{{.*}} [0, 8, 4, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
// AVX2:          vector.extract_strided_slice %{{.*}} {offsets = [0], sizes = [2], strides = [1]} : vector<16xf32> to vector<2xf32>

// A forward asked for by `kv.export_forwards` (an interleaved-RoPE GQA
// model): upstream dialects only, private kernels, three public entry points
// taking one pointer, the attribute consumed.
module attributes {kv.export_forwards = [!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>]} {
}

// CHECK-LABEL: module {
// CHECK-NOT:   kv.export_forwards
// The runtime's thread pool (runtime/core/KVParallel.h).
// CHECK:       func.func private @kvrt_parallel_for(i64, !llvm.ptr, !llvm.ptr)
// CHECK:       func.func private @[[P:kv_fwd_[0-9a-f]+]]_rmsnorm(
// CHECK-SAME:    llvm.linkage = #llvm.linkage<internal>
// CHECK:         math.sqrt
// Matmuls are parallel loops on the runtime's threads: the dot-product
// kernel under 4 rows, else the weights packed into transposed panels and
// register tiles of broadcast-FMAs (6 tokens x 4 vectors of 16 on AVX-512,
// 6 x 2 of 8 on AVX2).
// CHECK:       func.func private @[[P]]_matmul_nt(
// CHECK:         func.call @kvrt_parallel_for(
// CHECK:         func.call @kvrt_parallel_for(
// CHECK:         func.call @kvrt_parallel_for(
// CHECK:       func.func private @[[P]]_matmul_nt_dot_task(
// CHECK:         vector.fma
// CHECK:       func.func private @[[P]]_matmul_nt_pack_task(
// CHECK:         vector.shuffle
// CHECK:       func.func private @[[P]]_matmul_nt_tile_task(
// CHECK:         vector.broadcast
// CHECK:         vector.fma
// The pairs' frequencies theta^(-2i/d) are constants (kvir::ropeFrequency):
// no pow at run time.
// CHECK:       func.func private @[[P]]_rope_table(%{{.*}}: i64,
// CHECK-NOT:     math.powf
// CHECK:         arith.constant dense<[1.000000e+00, 1.000000e-01, 1.000000e-02, 1.000000e-03]> : vector<4xf64>
// CHECK:         arith.sitofp %{{.*}} : i64 to f64
// CHECK:         math.cos %{{.*}} : f64
// CHECK:         math.sin %{{.*}} : f64
// A prefill's tables, once for every layer: a row per run and token (the
// query rotated to m - delta) and one per token (its key), on every thread.
// CHECK:       func.func private @[[P]]_rope_rows(%{{.*}}: memref<?xf64>, %{{.*}}: i64, %{{.*}}: memref<?x8xi64>, %{{.*}}: index)
// CHECK:         call @kvrt_parallel_for(
// CHECK:       func.func private @[[P]]_rope_rows_task(
// CHECK:         math.cos %{{.*}} : f64
// CHECK:       func.func private @[[P]]_rope_row(
// CHECK:       func.func private @[[P]]_rope_apply(
// Interleaved pairs (2i, 2i + 1).
// CHECK:         %[[IA:.+]] = arith.muli %{{.*}}, %c2 : index
// CHECK-NEXT:    %[[ONE:.+]] = arith.constant 1 : index
// CHECK-NEXT:    arith.addi %[[IA]], %[[ONE]] : index
// CHECK:       func.func private @[[P]]_store_kv(
// The softmax weights' exp: 16 lanes, a polynomial, no libm call per lane.
// CHECK:       func.func private @[[P]]_exp16(%{{.*}}: vector<16xf32>) -> vector<16xf32>
// CHECK:         math.floor %{{.*}} : vector<16xf32>
// CHECK:         vector.fma
// CHECK:         arith.shli
// CHECK:       func.func private @[[P]]_attention_kernel(%{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %{{.*}}: index, %{{.*}}: i64, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?x8xi64>, %{{.*}}: index, %{{.*}}: index, %{{.*}}: memref<?xf32, strided<[1], offset: ?>>, %{{.*}}: memref<?xf64>)
// One parallel loop: over tokens for a prefill, else (fewer than eight
// tokens, a decode step, or at least 8 context tokens per query token) over
// ranges of KV heads (as many as threads) times ranges of tokens, 0 ranges
// telling the task it has tokens; the task gets the arguments through a
// context struct.
// CHECK:         call @kvrt_get_num_threads() : () -> i32
// CHECK:         %[[DECODE:.+]] = arith.cmpi ult, %{{.*}}, %c8{{[_0-9]*}} : index
// CHECK:         arith.cmpi sge, %{{.*}}, %{{.*}} : i64
// CHECK:         %[[FEW:.+]] = arith.ori %[[DECODE]], %{{.*}} : i1
// CHECK:         %[[RANGES:.+]] = arith.select %[[FEW]], %{{.*}}, %c0{{[_0-9]*}} : index
// CHECK:         %[[ITEMS:.+]] = arith.select %[[FEW]], %{{.*}}, %{{.*}} : index
// CHECK:         %[[TASK:.+]] = constant @[[P]]_attention_task
// CHECK:         %[[COUNT:.+]] = arith.index_cast %[[ITEMS]] : index to i64
// CHECK:         call @kvrt_parallel_for(%[[COUNT]], %{{.*}}, %{{.*}})
// CHECK-NOT:     call @kvrt_parallel_for
// CHECK:       func.func private @[[P]]_attention_task(%{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: i64)
// CHECK:         %[[KV:.+]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<{{.*}}> to memref<?xf32>{{$}}
// A group of query tokens shares each pass over the keys. One query
// rotation per run and token: to m - delta (column 4 of the run table).
// CHECK:         %[[DELTA:.+]] = memref.load %{{.*}}[%{{.*}}, %c4{{[_0-9]*}}] : memref<?x8xi64>
// CHECK:         scf.if
// CHECK:           %[[QPOS:.+]] = arith.subi %{{.*}}, %[[DELTA]] : i64
// The call's row (rope_rows) where it has tables, else one of its own.
// CHECK:           scf.if
// CHECK:             call @[[P]]_rope_row(
// CHECK:           } else {
// CHECK:             call @[[P]]_rope_table(%[[QPOS]],
// CHECK:           call @[[P]]_rope_apply(
// Keys are read as stored from the arena, never rotated: no RoPE call after
// the queries'. A 16-lane key slice (head size 8: masked by a constant mask) is
// loaded once and dotted with every row (4 tokens x 2 query heads); a key past
// a token's causal limit scores -inf.
// CHECK-NOT:       call @[[P]]_rope
// CHECK:           %[[KS:.+]] = vector.maskedload %[[KV]][%{{.*}}], %[[TAIL:cst[_0-9]*]], %{{.*}} : memref<?xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:           vector.fma %{{.*}}, %[[KS]], %{{.*}} : vector<16xf32>
// CHECK-NOT:       vector.maskedload %[[KV]]
// CHECK:           vector.fma %{{.*}}, %[[KS]], %{{.*}} : vector<16xf32>
// The dots of 4 keys x 4 rows are summed by one transposed reduction into a
// vector of their 16 scores, stored 4 keys of a row at a time.
// CHECK-COUNT-8:   vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
// CHECK:           vector.extract_strided_slice %{{.*}} {offsets = [0], sizes = [4], strides = [1]} : vector<16xf32> to vector<4xf32>
// CHECK:           %[[SEEN:.+]] = arith.cmpi slt, %{{.*}}, %{{.*}} : vector<4xi64>
// CHECK:           %[[MASKED:.+]] = arith.select %[[SEEN]], %{{.*}}, %{{.*}} : vector<4xi1>, vector<4xf32>
// CHECK:           vector.store %[[MASKED]], %{{.*}} : memref<?xf32>, vector<4xf32>
// Online softmax merge per chunk: chunk max (the rows' maxima by one
// transposed tree of lane-wise maxnumf), new running max (0 in its place
// while it is -inf),
// rescale factor of the old sum and accumulator (1 without calling exp when
// the max did not move), the weights, then V summed with FMAs into
// accumulators carried by the loop over the chunk's keys, one V slice for a
// block of four rows.
// CHECK-COUNT-4:   arith.maxnumf %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK:           vector.extract %{{.*}}[0] : f32 from vector<16xf32>
// CHECK:           %[[MNEW:.+]] = arith.maxnumf %{{.*}}, %{{.*}} : f32
// CHECK:           %[[UNSEEN:.+]] = arith.cmpf oeq, %[[MNEW]], %{{.*}} : f32
// CHECK:           %[[BASE:.+]] = arith.select %[[UNSEEN]], %{{.*}}, %[[MNEW]] : f32
// CHECK:           %[[DM:.+]] = arith.subf %{{.*}}, %[[BASE]] : f32
// CHECK:           %[[SAME:.+]] = arith.cmpf oeq, %[[DM]], %{{.*}} : f32
// CHECK:           scf.if %[[SAME]] -> (f32)
// CHECK:           math.exp %[[DM]] : f32
// CHECK:           call @[[P]]_exp16(
// The accumulators are carried over the pages of the chunk, then over a
// page's keys.
// CHECK:           scf.for {{.*}} iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:             scf.for {{.*}} iter_args(%[[A0:[^ ]+]] = %{{.*}}, %[[A1:[^ ]+]] = %{{.*}}, %[[A2:[^ ]+]] = %{{.*}}, %[[A3:[^ ]+]] = %{{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK:             %[[VS:.+]] = vector.maskedload %[[KV]][%{{.*}}], %[[TAIL]], %{{.*}} : memref<?xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:             vector.fma %{{.*}}, %[[VS]], %[[A0]] : vector<16xf32>
// CHECK:             vector.fma %{{.*}}, %[[VS]], %[[A1]] : vector<16xf32>
// CHECK:             vector.fma %{{.*}}, %[[VS]], %[[A2]] : vector<16xf32>
// CHECK:             vector.fma %{{.*}}, %[[VS]], %[[A3]] : vector<16xf32>
// CHECK:           vector.maskedstore
// The group's tokens left over after its blocks of four go one at a time in
// the same pass over the keys (no rotation of their own), masked as well: a
// key past the token's causal limit scores -inf.
// CHECK-NOT:       call @[[P]]_rope
// CHECK:           arith.cmpi slt
// CHECK:           scf.for {{.*}} iter_args(%{{[^ ]+}} = %{{.*}}, %{{[^ ]+}} = %{{.*}}) -> (vector<16xf32>, vector<16xf32>)
// CHECK-NOT:       call @[[P]]_rope
// CHECK:       func.func private @[[P]]_materialize_kernel(
// The layer sequence, once: the loop runs to the layer count it is given
// (fewer for a deviation scan); every stage is a kernel call.
// CHECK:       func.func private @[[P]]_prefill_impl(
// CHECK:         call @[[P]]_rope_rows(
// CHECK:         scf.for
// CHECK-NOT:       call @[[P]]_rope_rows(
// CHECK:           call @[[P]]_rmsnorm(
// CHECK:           call @[[P]]_matmul_nt(
// CHECK:           call @[[P]]_store_kv(
// CHECK:           call @[[P]]_attention_kernel(
// CHECK:           call @[[P]]_matmul_nt_acc(
// CHECK:           call @[[P]]_swiglu(
// CHECK:         scf.if
// CHECK:           call @[[P]]_rmsnorm(
// CHECK:           call @[[P]]_matmul_nt(
// The entry point unpacks runtime/core/ForwardABI.def's struct.
// CHECK:       func.func @[[P]]_prefill(%[[ARGS:.+]]: !llvm.ptr) {
// CHECK:         llvm.getelementptr %[[ARGS]][0, 0]
// CHECK:         llvm.load
// CHECK:         builtin.unrealized_conversion_cast %{{.*}} to memref<?xf32>
// CHECK:         call @[[P]]_prefill_impl(
// CHECK:       func.func @[[P]]_attention(%{{.+}}: !llvm.ptr) {
// CHECK:       func.func @[[P]]_materialize(%{{.+}}: !llvm.ptr) {

// -----

// Forwards for the models a program's ops use: half RoPE pairs
// (i, i + head_size / 2) for the prefill's model, one forward per config
// however many ops use it, and the exported one besides. Both forwards call
// the runtime's thread pool through one declaration.
!half = !kv.model<dim = 48, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 64, rope = half, theta = 500000.0, eps = 1.0e-06>
!cache = !kv.cache<2x2x12xf32>
module attributes {kv.export_forwards = [!kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>]} {
  func.func @main(%m: !half, %t: tensor<?xi32>) -> tensor<?x64xf32> {
    %c0 = kv.empty : !cache
    %c1, %l1 = kv.prefill %m, %c0, %t : !half, (!cache), tensor<?xi32> -> !cache, tensor<?x64xf32>
    %c2, %l2 = kv.prefill %m, %c1, %t : !half, (!cache), tensor<?xi32> -> !cache, tensor<?x64xf32>
    return %l2 : tensor<?x64xf32>
  }
}

// CHECK-LABEL: module {
// CHECK:       func.func @main(
// CHECK:       func.func private @kvrt_parallel_for(
// CHECK-NOT:   func.func private @kvrt_parallel_for(
// CHECK:       func.func private @[[A:kv_fwd_[0-9a-f]+]]_rope_apply(
// CHECK:         scf.for %[[I:.+]] = %c0 to %c6 step
// CHECK-NEXT:      %[[HALF:.+]] = arith.constant 6 : index
// CHECK-NEXT:      arith.addi %[[I]], %[[HALF]] : index
// CHECK:       func.func @[[A]]_prefill(
// CHECK-NOT:   func.func @[[A]]_prefill(
// CHECK-NOT:   func.func private @kvrt_parallel_for(
// CHECK:       func.func @[[B:kv_fwd_[0-9a-f]+]]_prefill(
// CHECK-NOT:   func.func @[[A]]_prefill(

// -----

// A program over f16 pages: the forward's arena is memref<?xf16>; K and V are
// computed in f32 and rounded once when stored (arith.truncf), keys and
// values widened when attention reads them (arith.extf); materialize rotates
// keys in f32 and copies values as stored. The exported forward of f32
// pages is a second forward, its kernels untouched.
!m16 = !kv.model<dim = 48, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 64>
!c16 = !kv.cache<2x2x12xf16>
module attributes {kv.export_forwards = [!kv.model<dim = 48, hidden = 96, layers = 2, heads = 4, kv_heads = 2, vocab = 64>]} {
  func.func @f16_cache(%m: !m16, %t: tensor<?xi32>) -> tensor<?x64xf32> {
    %c0 = kv.empty : !c16
    %c1, %l = kv.prefill %m, %c0, %t : !m16, (!c16), tensor<?xi32> -> !c16, tensor<?x64xf32>
    %c2 = kv.materialize %m, %c1 : !m16, !c16
    %c3, %l2 = kv.prefill %m, %c2, %t : !m16, (!c16), tensor<?xi32> -> !c16, tensor<?x64xf32>
    return %l2 : tensor<?x64xf32>
  }
}

// CHECK-LABEL: func.func @f16_cache(
// CHECK:       func.func private @[[H:kv_fwd_[0-9a-f]+]]_store_kv(%{{.*}}, %{{.*}}, %{{.*}}: i64, %{{.*}}: memref<?xf16>,
// CHECK:         %[[K:.+]] = arith.truncf %{{.*}} : vector<12xf32> to vector<12xf16>
// CHECK:         vector.store %[[K]], %{{.*}} : memref<?xf16>, vector<12xf16>
// CHECK:         %[[V:.+]] = arith.truncf %{{.*}} : vector<12xf32> to vector<12xf16>
// CHECK:         vector.store %[[V]], %{{.*}} : memref<?xf16>, vector<12xf16>
// CHECK:       func.func private @[[H]]_attention_kernel(%{{.*}}, %{{.*}}: index, %{{.*}}: i64, %{{.*}}: memref<?xf16>,
// CHECK:       func.func private @[[H]]_attention_task(
// CHECK:         %[[KR:.+]] = vector.maskedload %{{.*}} : memref<?xf16>, vector<16xi1>, vector<16xf16> into vector<16xf16>
// CHECK-NEXT:    arith.extf %[[KR]] : vector<16xf16> to vector<16xf32>
// CHECK:         %[[VR:.+]] = vector.maskedload %{{.*}} : memref<?xf16>, vector<16xi1>, vector<16xf16> into vector<16xf16>
// CHECK-NEXT:    arith.extf %[[VR]] : vector<16xf16> to vector<16xf32>
// CHECK:       func.func private @[[H]]_materialize_kernel(%{{.*}}: memref<?xf16>,
// CHECK:         arith.extf %{{.*}} : vector<12xf16> to vector<12xf32>
// CHECK:         call @[[H]]_rope_apply(
// CHECK:         arith.truncf %{{.*}} : vector<12xf32> to vector<12xf16>
// CHECK:         %[[VC:.+]] = vector.load %{{.*}} : memref<?xf16>, vector<12xf16>
// CHECK:         vector.store %[[VC]], %{{.*}} : memref<?xf16>, vector<12xf16>
// CHECK:       func.func @[[H]]_prefill(
// CHECK:         builtin.unrealized_conversion_cast %{{.*}} to memref<?xf16>
// CHECK:       func.func private @[[F:kv_fwd_[0-9a-f]+]]_store_kv(%{{.*}}, %{{.*}}, %{{.*}}: i64, %{{.*}}: memref<?xf32>,
// CHECK-NOT:     arith.truncf
// CHECK:       func.func private @[[F]]_attention_kernel(

// -----

// An exported forward of bf16 pages: rounding to nearest even on the bits
// (no library call), widening by a shift.
module attributes {kv.export_forwards = [[!kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>, bf16]]} {
}

// CHECK-LABEL: module {
// CHECK:       func.func private @[[B:kv_fwd_[0-9a-f]+]]_store_kv(%{{.*}}, %{{.*}}, %{{.*}}: i64, %{{.*}}: memref<?xbf16>,
// CHECK:         arith.bitcast %{{.*}} : vector<16xf32> to vector<16xi32>
// CHECK:         arith.cmpf uno
// CHECK:         arith.trunci %{{.*}} : vector<16xi32> to vector<16xi16>
// CHECK:         arith.bitcast %{{.*}} : vector<16xi16> to vector<16xbf16>
// CHECK:       func.func private @[[B]]_attention_task(
// CHECK:         arith.bitcast %{{.*}} : vector<16xbf16> to vector<16xi16>
// CHECK-NEXT:    arith.extui %{{.*}} : vector<16xi16> to vector<16xi32>
// CHECK:         arith.shli

// -----

// A module without kv ops or the attribute is left as it is.
// CHECK-LABEL: func.func @negative_untouched
// CHECK-NOT:   func.func
func.func @negative_untouched() {
  return
}
