// convert-kv-to-gpu emits the GPU forward of each model a module asks for:
// kernels in a gpu.module, host functions that launch them, and the three
// entry points taking an argument struct; no toolkit needed.
// RUN: kv-opt %s --convert-kv-to-gpu -split-input-file -verify-diagnostics | FileCheck %s
// RUN: kv-opt %s --convert-kv-to-gpu --canonicalize --cse -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=HOST

// The kernels of stories260K's shape (head size 8: one element per lane of
// the attention warps), the launches and the entry points.
module attributes {kv.export_forwards = [!kv.model<dim = 64, hidden = 172, layers = 5, heads = 8, kv_heads = 4, vocab = 512>]} {}

// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK-NOT:   kv.export_forwards
// CHECK:       gpu.module @[[P:kv_fwd_[0-9a-f]{16}]]_kernels {
// The RoPE angle in f64 from the integer position and the pair's constant
// frequency (kvir::ropeFrequency), libdevice cos/sin.
// CHECK:         func.func private @rope_cs(%{{.*}}: i64, %{{.*}}: index) -> (f64, f64)
// CHECK-NOT:       math.powf
// CHECK:           arith.constant dense<[1.000000e+00, 1.000000e-01, 1.000000e-02, 1.000000e-03]> : vector<4xf64>
// CHECK:           arith.sitofp %{{.*}} : i64 to f64
// CHECK:           math.cos %{{.*}} : f64
// CHECK:           math.sin %{{.*}} : f64
// CHECK:         func.func private @rotate(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f64, %{{.*}}: f64) -> (f32, f32)
// CHECK:           arith.truncf %{{.*}} : f64 to f32
// CHECK:         func.func private @warp_sum(%{{.*}}: f32) -> f32
// CHECK-COUNT-5:   gpu.shuffle xor
// RMSNorm: f64 partial sums in shared memory (16-byte aligned, as every
// shared buffer: the widest vector access), added after a barrier.
// CHECK:         gpu.func @rmsnorm({{.*}}) workgroup(%[[PARTIALS:.+]] : memref<256xf64, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK:           memref.store %{{.*}}, %[[PARTIALS]][%{{.*}}] : memref<256xf64, #gpu.address_space<workgroup>>
// CHECK:           gpu.barrier
// CHECK:           math.sqrt %{{.*}} : f64
// CHECK:         gpu.func @matmul({{.*}}, %{{.*}}: i32) kernel
// CHECK-COUNT-4:   math.fma %{{.*}} : f32
// CHECK-COUNT-4:   call @warp_sum(
// CHECK:         gpu.func @swiglu(
// CHECK:           math.exp %{{.*}} : f32
// CHECK:         gpu.func @store_kv(
// CHECK:           call @rope_cs(
// CHECK:           call @rotate(
// Each group of 8 queries of the block (groups z, z + gridDim.z, ... <
// ceil(n / 8)) rotated once into shared memory (8 heads of 8); one element
// per lane; each warp loads a batch of 4 keys (K and V) before it uses any;
// online softmax per warp, query and batch (the batch's best score, new max,
// rescale factor, each key's weight), then the warps merged query by query.
// CHECK:         gpu.func @attn_tile({{.*}}, %[[AN:.+]]: index) workgroup(%[[QS:.+]] : memref<64xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<4xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<4xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<32xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK:           %[[DELTA:.+]] = memref.load %{{.*}}[%{{.*}}, %c4{{.*}}] : memref<?x8xi64>
// CHECK:           %[[BZ:.+]] = gpu.block_id  z
// CHECK:           %[[GZ:.+]] = gpu.grid_dim  z
// CHECK:           %[[AN7:.+]] = arith.addi %[[AN]], %{{.*}} : index
// CHECK:           %[[GROUPS:.+]] = arith.divui %[[AN7]], %{{.*}} : index
// CHECK:           scf.for %{{.*}} = %[[BZ]] to %[[GROUPS]] step %[[GZ]]
// CHECK:           arith.subi %{{.*}}, %[[DELTA]] : i64
// CHECK:           call @rope_cs(
// CHECK:           call @rotate(
// CHECK:           memref.store %{{.*}}, %[[QS]][%{{.*}}]
// CHECK:           gpu.barrier
// CHECK:           vector.load %[[QS]][%{{.*}}] : memref<64xf32, #gpu.address_space<workgroup>>, vector<1xf32>
// CHECK:           scf.for %{{.*}} step %c16
// CHECK-COUNT-8:     vector.load %{{.*}}[%{{.*}}] {alignment = 4 : i64} : memref<?xf32>, vector<1xf32>
// CHECK-NOT:         vector.load
// CHECK-COUNT-4:     call @warp_sum(
// CHECK:             %[[B1:.+]] = arith.maxnumf %{{.*}}, %{{.*}} : f32
// CHECK:             %[[B2:.+]] = arith.maxnumf %[[B1]], %{{.*}} : f32
// CHECK:             %[[BEST:.+]] = arith.maxnumf %[[B2]], %{{.*}} : f32
// CHECK:             %[[MNEW:.+]] = arith.maxnumf %{{.*}}, %[[BEST]] : f32
// CHECK:             %[[UNSEEN:.+]] = arith.cmpf oeq, %[[MNEW]], %{{.*}} : f32
// CHECK:             %[[SHIFT:.+]] = arith.select %[[UNSEEN]], %{{.*}}, %[[MNEW]] : f32
// CHECK:             %[[DM:.+]] = arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK:             math.exp %[[DM]] : f32
// CHECK:             arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK-NEXT:        math.exp
// CHECK:             vector.fma %{{.*}} : vector<1xf32>
// CHECK:             arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK-NEXT:        math.exp
// CHECK:             vector.fma %{{.*}} : vector<1xf32>
// CHECK:             arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK-NEXT:        math.exp
// CHECK:             vector.fma %{{.*}} : vector<1xf32>
// CHECK:             arith.subf %{{.*}}, %[[SHIFT]] : f32
// CHECK-NEXT:        math.exp
// CHECK:             vector.fma %{{.*}} : vector<1xf32>
// CHECK:           gpu.barrier
// One query (a decode step): batches of 8 keys, at most 128 registers a
// thread (four blocks per SM).
// CHECK:         gpu.func @attn_tile_one({{.*}}) workgroup(%{{.*}} : memref<8xf32, #gpu.address_space<workgroup>> {{.*}}) kernel attributes {nvvm.maxntid = array<i32: 128, 1, 1>, nvvm.minctasm = 4 : i32}
// CHECK:           scf.for %{{.*}} step %c32
// CHECK-COUNT-16:    vector.load %{{.*}}[%{{.*}}] {alignment = 4 : i64} : memref<?xf32>, vector<1xf32>
// CHECK-NOT:         vector.load
// CHECK-COUNT-8:     call @warp_sum(
// The merge: each warp folds batches of 8 tiles, the warps merged in shared
// memory, then the division by the sum.
// CHECK:         gpu.func @attn_merge({{.*}}, %[[MN:.+]]: index) workgroup({{.*}}) kernel
// CHECK:           %[[BY:.+]] = gpu.block_id  y
// CHECK:           %[[GY:.+]] = gpu.grid_dim  y
// CHECK:           scf.for %{{.*}} = %[[BY]] to %[[MN]] step %[[GY]]
// CHECK:             scf.for %{{.*}} step %c32
// CHECK-COUNT-8:       math.exp
// CHECK:           gpu.barrier
// CHECK:           arith.divf
// Materialize: K rotated by the run's offset (column 4), V copied.
// CHECK:         gpu.func @materialize(
// CHECK:           %[[MDELTA:.+]] = memref.load %{{.*}}[%{{.*}}, %c4{{.*}}] : memref<?x8xi64>
// CHECK:           call @rope_cs(%[[MDELTA]],
// CHECK:           scf.for
// CHECK:             call @rotate(
// CHECK:       func.func private @[[P]]_prefill_impl(
// CHECK:       func.func @[[P]]_prefill(%{{.*}}: !llvm.ptr)
// CHECK:         call @[[P]]_prefill_impl(
// CHECK:       func.func private @[[P]]_attention_impl(
// CHECK:       func.func @[[P]]_attention(%{{.*}}: !llvm.ptr)
// CHECK:       func.func private @[[P]]_materialize_impl(
// CHECK:       func.func @[[P]]_materialize(%{{.*}}: !llvm.ptr)
// CHECK-NOT:   fastmath

// The launches with the grids of docs/gpu-backend.md, n tokens: rmsnorm (n),
// matmul (ceil(M / 8), ceil(n / 4)) with 256 threads, store_kv (n, kv_heads)
// with head_size / 2 threads, attn_tile (tiles, heads, min(ceil(n / 8),
// 65535): groups of 8 queries of head size 8) and attn_merge (heads, min(n,
// 65535)) with 128, which take n, swiglu
// ceil(n hidden / 256).
// HOST:        func.func private @[[P:kv_fwd_[0-9a-f]{16}]]_prefill_impl(
// HOST:          %[[N:.+]] = arith.index_cast %{{.*}} : i64 to index
// HOST:          scf.for
// HOST:            gpu.launch_func @[[P]]_kernels::@rmsnorm blocks in (%[[N]], %c1, %c1) threads in (%c256, %c1, %c1)
// HOST:            %[[N3:.+]] = arith.addi %[[N]], %c3 : index
// HOST:            %[[GY:.+]] = arith.divui %[[N3]], %c4 : index
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c8, %[[GY]], %c1) threads in (%c256, %c1, %c1) {{.*}}, %c64 : index, %c64 : index, %c0_i32 : i32)
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c4, %[[GY]], %c1) threads in (%c256, %c1, %c1)
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c4, %[[GY]], %c1) threads in (%c256, %c1, %c1)
// HOST:            gpu.launch_func @[[P]]_kernels::@store_kv blocks in (%[[N]], %c4, %c1) threads in (%c4, %c1, %c1)
// HOST:            %[[TILES:.+]] = memref.dim %{{.*}}, %c0 : memref<?x4xi64>
// HOST:            %[[N7:.+]] = arith.addi %[[N]], %c7 : index
// HOST:            %[[NG:.+]] = arith.divui %[[N7]], %c8 : index
// HOST:            %[[QZ:.+]] = arith.minui %[[N]], %c65535 : index
// HOST:            %[[ONE:.+]] = arith.cmpi eq, %[[N]], %c1 : index
// HOST:            scf.if %[[ONE]] {
// HOST:              gpu.launch_func @[[P]]_kernels::@attn_tile_one blocks in (%[[TILES]], %c8, %c1) threads in (%c128, %c1, %c1) {{.*}}, %[[N]] : index)
// HOST:              gpu.launch_func @[[P]]_kernels::@attn_merge blocks in (%c8, %[[QZ]], %c1) threads in (%c128, %c1, %c1) {{.*}}, %[[N]] : index)
// HOST:            } else {
// HOST:              %[[GZ:.+]] = arith.minui %[[NG]], %c65535 : index
// HOST:              gpu.launch_func @[[P]]_kernels::@attn_tile blocks in (%[[TILES]], %c8, %[[GZ]]) threads in (%c128, %c1, %c1) {{.*}}, %[[N]] : index)
// HOST:              gpu.launch_func @[[P]]_kernels::@attn_merge blocks in (%c8, %[[QZ]], %c1) threads in (%c128, %c1, %c1) {{.*}}, %[[N]] : index)
// HOST:            }
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c8, %[[GY]], %c1) threads in (%c256, %c1, %c1) {{.*}}, %c1_i32 : i32)
// HOST:            gpu.launch_func @[[P]]_kernels::@rmsnorm
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c22, %[[GY]], %c1)
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c22, %[[GY]], %c1)
// HOST:            gpu.launch_func @[[P]]_kernels::@swiglu
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c8, %[[GY]], %c1) {{.*}}, %c64 : index, %c172 : index, %c1_i32 : i32)
// HOST:          scf.if
// HOST:            gpu.launch_func @[[P]]_kernels::@rmsnorm
// HOST:            gpu.launch_func @[[P]]_kernels::@matmul blocks in (%c64, %{{.*}}, %c1)
// HOST:        func.func private @[[P]]_attention_impl(
// HOST:          %[[ATILES:.+]] = memref.dim %{{.*}}, %c0 : memref<?x4xi64>
// HOST:          gpu.launch_func @[[P]]_kernels::@attn_tile_one blocks in (%[[ATILES]], %c8, %c1) threads in (%c128, %c1, %c1)
// HOST:          gpu.launch_func @[[P]]_kernels::@attn_merge
// HOST:          gpu.launch_func @[[P]]_kernels::@attn_tile blocks in (%[[ATILES]], %c8, %{{.*}}) threads in (%c128, %c1, %c1)
// HOST:          gpu.launch_func @[[P]]_kernels::@attn_merge
// Materialize: one block per run, layer and KV head; 64 token lanes of the 4
// RoPE pairs; no launch for an empty table.
// HOST:        func.func private @[[P]]_materialize_impl(
// HOST:          %[[RUNS:.+]] = memref.dim %{{.*}}, %c0 : memref<?x8xi64>
// HOST:          %[[ANY:.+]] = arith.cmpi ugt, %[[RUNS]], %c0 : index
// HOST:          scf.if %[[ANY]] {
// HOST:            gpu.launch_func @[[P]]_kernels::@materialize blocks in (%[[RUNS]], %c5, %c4) threads in (%c256, %c1, %c1)

// -----

// Head size 128: four elements per lane of the attention warps, groups of
// four queries.
module attributes {kv.export_forwards = [!kv.model<dim = 1024, hidden = 2816, layers = 2, heads = 8, kv_heads = 8, vocab = 64>]} {}

// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK:       gpu.func @attn_tile({{.*}}) workgroup(%{{.*}} : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, {{.*}}, %{{.*}} : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// A lane's slice of a key in one aligned vector load (ld.global.v4).
// CHECK:         vector.load %{{.*}}[%{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// HOST:        func.func private @kv_fwd_{{[0-9a-f]+}}_prefill_impl(
// HOST:          @store_kv blocks in (%{{.*}}, %c8, %c1) threads in (%c64, %c1, %c1)

// -----

// A kv program: the forward of the model its ops use, with half RoPE pairs
// (i, i + head_size / 2); the kv ops are left for convert-kv-to-runtime.
!model = !kv.model<dim = 256, hidden = 512, layers = 3, heads = 4, kv_heads = 2, vocab = 300, rope = half, theta = 1000000.0>
!cache = !kv.cache<3x2x64xf32, @ctx>
kv.context @ctx {
  kv.segment @a kind(system) tokens(?)
}
func.func @prefill(%m: !model, %t: tensor<?xi32>) -> (!cache, tensor<1x300xf32>) {
  %c0 = kv.empty : !cache
  %c1, %l = kv.prefill %m, %c0, %t segment @a last
      : !model, (!cache), tensor<?xi32> -> !cache, tensor<1x300xf32>
  return %c1, %l : !cache, tensor<1x300xf32>
}

// CHECK-LABEL: module attributes {gpu.container_module}
// CHECK:       func.func @prefill(
// CHECK:         kv.prefill
// CHECK:       gpu.module @[[P:kv_fwd_[0-9a-f]{16}]]_kernels {
// CHECK:         func.func private @rope_cs(
// theta = 1e6, head size 64: pair 1 turns at 1e6^(-2/64) radians a position.
// CHECK:           arith.constant dense<[1.000000e+00, 0.64938163157621132, {{.*}}]> : vector<32xf64>
// CHECK:         gpu.func @store_kv(
// CHECK:           %[[I:.+]] = gpu.thread_id x
// CHECK:           %[[HALF:.+]] = arith.constant 32 : index
// CHECK-NEXT:      arith.addi %[[I]], %[[HALF]] : index
// CHECK:       func.func @[[P]]_prefill(%{{.*}}: !llvm.ptr)

// -----

// @negative_head_size: a head too large for the attention kernel's lanes.
// expected-error @below {{cannot build the GPU forward of [dim=4096 hidden=64 layers=1 heads=1 kv_heads=1 vocab=8 rope=interleaved}}
module attributes {kv.export_forwards = [!kv.model<dim = 4096, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 8>]} {}

// -----

// @negative_lanes: head size 70 does not split into lanes of 3 elements.
// expected-error @below {{head size 70 is not a multiple of the 3 elements each lane of a warp holds}}
module attributes {kv.export_forwards = [!kv.model<dim = 70, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 8>]} {}

// -----

// @negative_op_head_size: the diagnostic is at the op that needs the forward.
!big = !kv.model<dim = 2048, hidden = 64, layers = 1, heads = 1, kv_heads = 1, vocab = 8>
!bcache = !kv.cache<1x1x2048xf32, @bctx>
kv.context @bctx {
  kv.segment @a kind(system) tokens(?)
}
func.func @negative_op_head_size(%m: !big, %t: tensor<?xi32>) -> !bcache {
  %c0 = kv.empty : !bcache
  // expected-error @below {{head size 2048 exceeds 1024, the largest the GPU attention kernel holds in registers (32 elements per lane of a warp)}}
  %c1, %l = kv.prefill %m, %c0, %t segment @a last
      : !big, (!bcache), tensor<?xi32> -> !bcache, tensor<1x8xf32>
  return %c1 : !bcache
}

// -----

// f16 pages: the kernels that touch pages take memref<?xf16>, round what
// they store and widen what they read; everything else stays f32.
module attributes {kv.export_forwards = [[!kv.model<dim = 32, hidden = 64, layers = 1, heads = 2, kv_heads = 2, vocab = 10>, f16]]} {}
// CHECK:       gpu.module @kv_fwd_{{[0-9a-f]+}}_kernels
// CHECK:       gpu.func @store_kv(%{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: i64, %[[KV:.*]]: memref<?xf16>,
// CHECK:         %[[K:.*]] = arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:    memref.store %[[K]], %[[KV]][%{{.*}}] : memref<?xf16>
// CHECK:       gpu.func @attn_tile(%{{.*}}: memref<?xf32>, %{{.*}}: index, %{{.*}}: i64, %[[KVA:.*]]: memref<?xf16>,
// CHECK:         %[[L:.*]] = vector.load %[[KVA]][%{{.*}}] {alignment = 2 : i64} : memref<?xf16>, vector<1xf16>
// CHECK-NEXT:    arith.extf %[[L]] : vector<1xf16> to vector<1xf32>
// CHECK:       gpu.func @materialize(%[[KVM:.*]]: memref<?xf16>,
// CHECK:         %[[S:.*]] = memref.load %[[KVM]][%{{.*}}] : memref<?xf16>
// CHECK-NEXT:    arith.extf %[[S]] : f16 to f32
// CHECK:         arith.truncf %{{.*}} : f32 to f16
// CHECK:         arith.truncf %{{.*}} : f32 to f16
// V is copied as stored.
// CHECK:         %[[V:.*]] = memref.load %[[KVM]][%{{.*}}] : memref<?xf16>
// CHECK-NEXT:    memref.store %[[V]], %[[KVM]][%{{.*}}] : memref<?xf16>

// -----

// @negative_not_a_model
// expected-error @below {{'kv.export_forwards' must be an array of !kv.model types, got [3]}}
module attributes {kv.export_forwards = [3]} {}
