//===- ForwardABI.h - How the runtime calls generated forwards --*- C++ -*-===//
//
// Lowering a kv program (kv-lower-to-cpu, kv-lower-to-nvvm) puts the model's
// forward into the program's module, specialised per model config and K/V
// element type, with three entry points per config (runtime/core/
// ModelConfig.h names them: forwardPrefix() + `_prefill`, `_attention`,
// `_materialize`). Each takes one pointer to an argument struct, declared in
// ForwardABI.def: the runtime lays out memory (pages, run tables, scratch,
// weights; host memory on the CPU, device memory on a GPU) and fills the
// struct; the generated code does the math. The program's host code passes
// the entry it needs to the runtime with each kv.prefill, kv.attention,
// kv.materialize and kv.selective_recompute (runtime/exec/ExecABI.def).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_FORWARDABI_H
#define KVIR_RUNTIME_CORE_FORWARDABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Memref descriptors as MLIR's LLVM lowering lays them out.
typedef struct kvrt_memref_f32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} kvrt_memref_f32;

typedef struct kvrt_memref_i32 {
  int32_t *allocated;
  int32_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} kvrt_memref_i32;

/// A row-major [rows][columns] i64 table (run tables, attention tiles).
typedef struct kvrt_memref_i64x2 {
  int64_t *allocated;
  int64_t *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
} kvrt_memref_i64x2;

/// A 1-D buffer of K/V page elements (f32, f16 or bf16: the layout of the
/// descriptor is the same, only the element the forward reads differs).
typedef struct kvrt_memref_kv {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} kvrt_memref_kv;

/// The bytes of a model weight (runtime/core/ModelTensors.def): a buffer its
/// slices lie in, at the offsets of the OFFSETS table (ForwardABI.def), in
/// bytes whatever the format.
typedef struct kvrt_memref_weight {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} kvrt_memref_weight;

/// A 1-D i64 buffer (the weight offsets).
typedef struct kvrt_memref_i64 {
  int64_t *allocated;
  int64_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} kvrt_memref_i64;

typedef kvrt_memref_f32 kvrt_field_F32;
typedef kvrt_memref_weight kvrt_field_WEIGHT;
typedef kvrt_memref_weight kvrt_field_BYTES;
typedef kvrt_memref_i64 kvrt_field_OFFSETS;
typedef kvrt_memref_kv kvrt_field_KV;
typedef kvrt_memref_i32 kvrt_field_I32;
typedef kvrt_memref_i64x2 kvrt_field_RUNS;
typedef kvrt_memref_i64x2 kvrt_field_TILES;
typedef int64_t kvrt_field_I64;

#define KVRT_FORWARD_FIELD(entry, name, kind) KVRT_IN_##entry(name, kind)
#define KVRT_IN_PREFILL(name, kind) kvrt_field_##kind name;
#define KVRT_IN_ATTENTION(name, kind)
#define KVRT_IN_MATERIALIZE(name, kind)
/// The arguments of `<prefix>_prefill` (ForwardABI.def).
typedef struct kvrt_prefill_args {
#include "runtime/core/ForwardABI.def"
} kvrt_prefill_args;
#undef KVRT_IN_PREFILL
#undef KVRT_IN_ATTENTION
#define KVRT_FORWARD_FIELD(entry, name, kind) KVRT_IN_##entry(name, kind)
#define KVRT_IN_PREFILL(name, kind)
#define KVRT_IN_ATTENTION(name, kind) kvrt_field_##kind name;
/// The arguments of `<prefix>_attention` (ForwardABI.def).
typedef struct kvrt_attention_args {
#include "runtime/core/ForwardABI.def"
} kvrt_attention_args;
#undef KVRT_IN_ATTENTION
#undef KVRT_IN_MATERIALIZE
#define KVRT_FORWARD_FIELD(entry, name, kind) KVRT_IN_##entry(name, kind)
#define KVRT_IN_ATTENTION(name, kind)
#define KVRT_IN_MATERIALIZE(name, kind) kvrt_field_##kind name;
/// The arguments of `<prefix>_materialize` (ForwardABI.def).
typedef struct kvrt_materialize_args {
#include "runtime/core/ForwardABI.def"
} kvrt_materialize_args;
#undef KVRT_IN_PREFILL
#undef KVRT_IN_ATTENTION
#undef KVRT_IN_MATERIALIZE

typedef void (*kvrt_prefill_fn)(kvrt_prefill_args *args);
typedef void (*kvrt_attention_fn)(kvrt_attention_args *args);
typedef void (*kvrt_materialize_fn)(kvrt_materialize_args *args);

/// Columns of a run-table row (RUNS): index of the run's first page in the
/// page list, slot of its token 0 in that page, tokens, stored position of
/// token 0, offset Δ, then reserved zeros.
enum {
  KVRT_RUN_PAGE_OFFSET = 0,
  KVRT_RUN_SLOT_BEGIN = 1,
  KVRT_RUN_TOKENS = 2,
  KVRT_RUN_BASE_POS = 3,
  KVRT_RUN_DELTA = 4,
  KVRT_RUN_WIDTH = 8,
};

/// Columns of an attention-tile row (TILES): run, first key, end key.
enum { KVRT_TILE_WIDTH = 4 };

#ifdef __cplusplus
} // extern "C"

namespace kvir {

/// The generated forward of one model config: the entry points a compiled
/// module holds for it, and the key they were compiled for (ModelConfig.h's
/// forwardKey: the config, the K/V element type and the weights' formats).
/// An entry a call does not need may be null.
struct Forward {
  const char *key = nullptr;
  kvrt_prefill_fn prefill = nullptr;
  kvrt_attention_fn attention = nullptr;
  kvrt_materialize_fn materialize = nullptr;
};

/// Descriptors of contiguous buffers.
inline kvrt_memref_f32 memrefF32(float *data, int64_t size) {
  return {data, data, 0, {size}, {1}};
}
/// The arena of `elements` K/V elements at `data`.
inline kvrt_memref_kv memrefKV(void *data, int64_t elements) {
  return {data, data, 0, {elements}, {1}};
}
/// `bytes` bytes at `data` the forward only reads (a weight, decode_rows).
inline kvrt_memref_weight memrefBytes(const void *data, int64_t bytes) {
  void *p = const_cast<void *>(data);
  return {p, p, 0, {bytes}, {1}};
}
inline kvrt_memref_i32 memrefI32(int32_t *data, int64_t size) {
  return {data, data, 0, {size}, {1}};
}
/// An i64 table the forward only reads (weight_offsets, packed_offsets).
inline kvrt_memref_i64 memrefI64(const int64_t *data, int64_t size) {
  int64_t *p = const_cast<int64_t *>(data);
  return {p, p, 0, {size}, {1}};
}
inline kvrt_memref_i64x2 memrefTable(int64_t *data, int64_t rows,
                                     int64_t columns) {
  return {data, data, 0, {rows, columns}, {columns, 1}};
}

} // namespace kvir
#endif

#endif // KVIR_RUNTIME_CORE_FORWARDABI_H
