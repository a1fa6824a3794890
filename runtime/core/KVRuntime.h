//===- KVRuntime.h - KVIR runtime C ABI -------------------------*- C++ -*-===//
//
// The C interface of the KVIR runtime: models (llama2.c checkpoints and seeded
// synthetic models), the paged KV pool, and cache views. Generated code and
// tools use only this header.
//
// Conventions:
//  - Every function that can fail returns a kvrt_status; KVRT_OK is 0. On
//    failure kvrt_last_error() returns a message naming the problem (valid
//    until the next failing call on the same thread). No C++ exception ever
//    crosses this interface.
//  - Handles are opaque and reference counted: *_retain adds a reference,
//    *_release drops one (NULL is accepted and ignored). Functions returning a
//    handle through an out parameter give the caller one reference.
//  - Views are values: every view operation returns a new view and leaves its
//    inputs unchanged.
//
// Page memory layout (elements of the pool's kvrt_kv_dtype):
//
//   A pool owns one contiguous arena of `capacity_pages` pages. A page holds
//   `page_tokens` consecutive token slots of K and V for every layer and every
//   KV head. Inside a page the order is
//
//       [n_layers][n_kv_heads][2 (0 = K, 1 = V)][page_tokens][head_size]
//
//   so the element (page p, layer l, kv head h, kind c, slot s, dim d) is at
//
//       base + p * page_stride + l * layer_stride + h * head_stride
//            + c * kv_stride + s * head_size + d
//
//   with kv_stride = page_tokens * head_size, head_stride = 2 * kv_stride,
//   layer_stride = n_kv_heads * head_stride, page_stride = n_layers *
//   layer_stride (all in elements; kvrt_pool_get_layout returns them, and
//   page_bytes = page_stride * the element's bytes). f16 and bf16 pages hold
//   the f32 K/V rounded to nearest even (runtime/core/KVElement.h). K is
//   stored already rotated by RoPE at the position it was computed at (the
//   run's base_pos plus its index in the run); V is stored as computed.
//
// Runs and views:
//
//   A run is (pages, slot_begin, n_tokens, base_pos, delta, tokens, label).
//   Token j (0 <= j < n_tokens) of a run lives in page
//   pages[(slot_begin + j) / page_tokens] at slot (slot_begin + j) %
//   page_tokens; its key was rotated at stored position base_pos + j and it
//   behaves as if it were at the effective position base_pos + j + delta. A
//   query at position m attends a key iff its effective position is <= m.
//   A view is an ordered list of runs; the view's token index runs over the
//   runs in order.
//
// Pages are reference counted and immutable once sealed. A page is allocated
// open (writable by its single owner), written, then sealed; only sealed pages
// can enter a view. kvrt_pool_cow gives a writable copy of a shared or sealed
// page. Pool exhaustion is an error that changes nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_KVRUNTIME_H
#define KVIR_RUNTIME_CORE_KVRUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// Result of every fallible runtime call.
typedef enum kvrt_status {
  KVRT_OK = 0,
  /// A NULL handle, an out-of-range index or an inconsistent argument.
  KVRT_ERR_INVALID_ARGUMENT = 1,
  /// A file could not be opened, read or written.
  KVRT_ERR_IO = 2,
  /// A model file or model config is malformed.
  KVRT_ERR_BAD_MODEL = 3,
  /// The KV pool has too few free pages; nothing was changed.
  KVRT_ERR_POOL_EXHAUSTED = 4,
  /// An operation not allowed in the object's state (writing a sealed page).
  KVRT_ERR_STATE = 5,
  /// Host memory allocation failed.
  KVRT_ERR_OUT_OF_MEMORY = 6,
  /// An unexpected internal failure.
  KVRT_ERR_INTERNAL = 7,
  /// A device or its driver is not available (no libcuda, no GPU), or a
  /// device call failed.
  KVRT_ERR_UNAVAILABLE = 8,
} kvrt_status;

/// The message of the last failing call on this thread ("" if none).
const char *kvrt_last_error(void);

/// A short constant name of a status ("ok", "invalid argument", ...).
const char *kvrt_status_name(kvrt_status status);

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// How RoPE pairs the dimensions of a head. Every switch over it is
/// exhaustive (no default), so a new layout is a compile error wherever it
/// must be handled: runtime/core/ModelConfig.h lists those places.
/// With partial rotary (rope_dim < head size) the pairs are taken within the
/// first rope_dim dimensions (d = rope_dim below); the others pass unrotated.
typedef enum kvrt_rope_layout {
  /// Pairs (2i, 2i+1), as llama2.c, Meta's checkpoints and GGUF's llama
  /// architecture: llama.cpp's "normal" RoPE (LLAMA_ROPE_TYPE_NORM).
  KVRT_ROPE_INTERLEAVED = 0,
  /// Pairs (i, i + d/2), as HF/NeoX: llama.cpp's "neox" RoPE.
  KVRT_ROPE_HALF = 1,
} kvrt_rope_layout;

/// Most RoPE pairs that can carry a frequency factor (rope_freq_factors):
/// rotary dimensions up to 512.
#define KVRT_MAX_ROPE_PAIRS 256

/// The number of RoPE layouts: they are numbered from 0 without gaps. A
/// configuration from outside is checked against it as an integer before
/// its rope_layout is used as the enum (a value outside the enumerators is
/// undefined behaviour in C++).
#define KVRT_ROPE_LAYOUT_COUNT 2

/// The element type of K/V pages: f32, IEEE half or bfloat16. Everything but
/// the pages computes in f32; stores round to nearest even.
typedef enum kvrt_kv_dtype {
  KVRT_KV_F32 = 0,
  KVRT_KV_F16 = 1,
  KVRT_KV_BF16 = 2,
} kvrt_kv_dtype;

/// A Llama-family decoder configuration.
typedef struct kvrt_model_config {
  int32_t dim;
  /// SwiGLU hidden size.
  int32_t hidden_dim;
  int32_t n_layers;
  int32_t n_heads;
  int32_t n_kv_heads;
  /// Number of tokens (always positive here; the file format's sign is
  /// shared_classifier).
  int32_t vocab_size;
  /// Trained context length (informational; positions are not limited).
  int32_t seq_len;
  /// 1 if the classifier is the token embedding, 0 if it has its own wcls.
  int32_t shared_classifier;
  /// 1 if the Q, K and V projections add a bias (bq, bk, bv: Qwen2), else 0.
  int32_t qkv_bias;
  kvrt_rope_layout rope_layout;
  /// RoPE base: frequency of pair i is rope_theta^(-2i/d), d the rotary
  /// dimensions (rope_dim), divided by the scaling below.
  double rope_theta;
  /// RMSNorm epsilon, added to the mean square.
  double rms_eps;
  /// RoPE rotates the first rope_dim dimensions of every head (even, at most
  /// the head size: GGUF's rope.dimension_count); the others pass through
  /// unrotated. 0 means the whole head.
  int32_t rope_dim;
  /// 0, or rope_dim / 2: pair i's frequency is divided by
  /// rope_freq_factors[i] (GGUF's rope_freqs tensor, e.g. Llama 3's
  /// frequency scaling).
  int32_t n_rope_freq_factors;
  /// Linear RoPE scaling (GGUF rope.scaling.type = linear): every frequency
  /// is divided by it, i.e. positions are compressed by this factor. 0 and 1
  /// mean none.
  double rope_scale;
  /// Per-pair frequency divisors, finite and positive; the first
  /// n_rope_freq_factors are used.
  float rope_freq_factors[KVRT_MAX_ROPE_PAIRS];
} kvrt_model_config;

/// The format of a weight's data: IEEE floats, or one of ggml's block formats
/// kept as a GGUF file stores them (a row is whole blocks of a fixed number
/// of elements, each of a fixed number of bytes; runtime/core/WeightFormat.h
/// has the layouts). Every switch over it is exhaustive (no default), so a
/// new format is a compile error wherever it must be handled;
/// docs/runtime.md says how to add one.
typedef enum kvrt_weight_format {
  /// IEEE float32 elements.
  KVRT_WEIGHT_F32 = 0,
  /// IEEE binary16 elements.
  KVRT_WEIGHT_F16 = 1,
  /// bfloat16 elements.
  KVRT_WEIGHT_BF16 = 2,
  /// Blocks of 32 elements in 34 bytes: an f16 scale d, 32 int8 q; d * q.
  KVRT_WEIGHT_Q8_0 = 3,
  /// Blocks of 32 in 18 bytes: an f16 scale d, 16 bytes of 4-bit q (element
  /// j < 16 in the low nibble of byte j, j >= 16 in the high nibble of byte
  /// j - 16); d * (q - 8).
  KVRT_WEIGHT_Q4_0 = 4,
  /// Super-blocks of 256 in 144 bytes: f16 d and dmin, 12 bytes of eight
  /// 6-bit scales and mins, 128 bytes of 4-bit q; d * sc * q - dmin * m per
  /// sub-block of 32.
  KVRT_WEIGHT_Q4_K = 5,
  /// Super-blocks of 256 in 176 bytes: as Q4_K with a fifth bit of every q
  /// (32 bytes qh, before the 128 bytes of low nibbles).
  KVRT_WEIGHT_Q5_K = 6,
  /// Super-blocks of 256 in 210 bytes: 128 bytes of low 4 bits, 64 bytes of
  /// high 2 bits, sixteen int8 scales, an f16 d; d * sc * (q - 32) per
  /// sub-block of 16.
  KVRT_WEIGHT_Q6_K = 7,
} kvrt_weight_format;

/// The number of weight formats: they are numbered from 0 without gaps.
#define KVRT_WEIGHT_FORMAT_COUNT 8

/// One slice of a weight: the whole of a global tensor, or one layer's part
/// of a per-layer tensor. Its `rows` x `cols` elements (kvrt_weight) are in
/// `format`, row-major ([out][in] for a matrix), `bytes` in all: rows times
/// the bytes of a row (4 * cols for f32; for a block format, cols / the
/// block's elements * the block's bytes).
typedef struct kvrt_weight_slice {
  const void *data;
  kvrt_weight_format format;
  int64_t bytes;
} kvrt_weight_slice;

/// One tensor of a model. Each slice has its own address (the layers of a
/// GGUF tensor are separate tensors of the file, wherever the file put them)
/// and its own format (a Q4_K_M file keeps some layers of attn_v and
/// ffn_down in Q6_K).
typedef struct kvrt_weight {
  /// The shape of one slice: `rows` rows of `cols` elements.
  int64_t rows;
  int64_t cols;
  /// 1 for a global tensor, n_layers for a per-layer one, 0 where the model
  /// does not have it.
  int64_t n_slices;
  /// The slices, slice l being layer l's; valid while the model is alive.
  const kvrt_weight_slice *slices;
} kvrt_weight;

/// A model's tensors: one field per entry of runtime/core/ModelTensors.def
/// (its GGUF name, shape and presence are there), in llama2.c order. A
/// tensor the config does not have holds no data, or the tensor it is tied
/// to: wcls is token_embedding when the classifier is shared. Valid while
/// the model is alive.
typedef struct kvrt_model_weights {
#define KVRT_MODEL_TENSOR(field, ...) kvrt_weight field;
#include "runtime/core/ModelTensors.def"
} kvrt_model_weights;

typedef struct kvrt_model kvrt_model;

/// Fills `config` with a small valid default (stories260K's shape) with
/// interleaved RoPE, rope_theta 10000 and rms_eps 1e-5.
void kvrt_model_config_init(kvrt_model_config *config);

/// Checks a config: positive sizes, heads dividing dim, kv heads dividing
/// heads, an even head size, a positive finite theta and eps.
kvrt_status kvrt_model_config_validate(const kvrt_model_config *config);

/// Loads a model with full validation; the format is told by the file's
/// first bytes, not its name. A GGUF file (magic "GGUF", version 3, llama or
/// qwen2 architecture: runtime/core/GGUF.h) gets the configuration its keys
/// state, and is mapped read-only: its matrices stay in the file's formats,
/// in the mapping (the page cache is shared between processes); only norm
/// vectors stored in another format than f32 are converted. Any other file
/// is read as a llama2.c ("version 0") checkpoint (f32 weights in memory the
/// model owns), which gets interleaved RoPE, rope_theta 10000 and rms_eps
/// 1e-5.
kvrt_status kvrt_model_load(const char *path, kvrt_model **out);

/// How kvrt_model_load_ex brings a model file's weights into memory.
typedef enum kvrt_load_flags {
  /// kvrt_model_load's way: a GGUF file is mapped (at a 2 MiB-aligned
  /// address, advised to be backed by transparent huge pages, so that pages
  /// the kernel reads in afresh come in 2 MiB folios where its file system
  /// allows).
  KVRT_LOAD_MAP = 0,
  /// A GGUF file is read into memory the model owns (2 MiB-aligned, advised
  /// MADV_HUGEPAGE) instead of mapped: nothing is shared with other
  /// processes, and the weights sit on 2 MiB pages whatever pages the file's
  /// page cache holds (docs/models.md, "Weights in 2 MiB pages"). A llama2.c
  /// checkpoint is read into memory either way.
  KVRT_LOAD_READ = 1,
  /// No copy of the Q8_0 matrices (nor of a small model's Q4_K ones) repacked
  /// for decode (docs/cpu-backend.md, "A layout for decode"): the CPU
  /// forward's decode steps read the file's rows, slower, and the model holds
  /// no second copy of those bytes.
  KVRT_LOAD_NO_REPACK = 2,
  /// The copy of KVRT_LOAD_NO_REPACK made even on a host whose decode steps
  /// read the file's rows by default (one with AMX int8 tiles: its prefill
  /// reads the file's rows anyway, so the copy would hold the weights twice,
  /// and its decode steps measured faster from the file's rows;
  /// docs/cpu-backend.md, "A layout for decode"). Not with
  /// KVRT_LOAD_NO_REPACK.
  KVRT_LOAD_REPACK = 4,
} kvrt_load_flags;

/// kvrt_model_load with `flags` (kvrt_load_flags; unknown bits are refused
/// with KVRT_ERR_INVALID_ARGUMENT).
kvrt_status kvrt_model_load_ex(const char *path, uint32_t flags,
                               kvrt_model **out);

/// Builds a model of any valid config whose weights come from `seed` through
/// splitmix64 (identical on every machine): matrices uniform in
/// [-1, 1) / sqrt(fan_in), the embedding uniform in [-1, 1), norm weights in
/// [0.75, 1.25), biases in [-0.5, 0.5).
kvrt_status kvrt_model_synthetic(const kvrt_model_config *config, uint64_t seed,
                                 kvrt_model **out);

/// Writes a model in the llama2.c format (negative vocab_size when the
/// classifier is separate). Fails for configs the format cannot express
/// (half RoPE, theta other than 10000, eps other than 1e-5, partial rotary,
/// RoPE scaling or frequency factors).
kvrt_status kvrt_model_save(const kvrt_model *model, const char *path);

/// What a GGUF file's matrices are written in: one ggml tensor type (the
/// value is its ggml type id), or a mix of types as llama.cpp's
/// llama-quantize writes (docs/models.md: Q4_K with Q6_K for the output,
/// for attn_v and ffn_down of some layers; the value is 0x10000 plus
/// llama.cpp's file type).
typedef enum kvrt_gguf_type {
  KVRT_GGUF_F32 = 0,
  KVRT_GGUF_F16 = 1,
  KVRT_GGUF_Q4_0 = 2,
  KVRT_GGUF_Q8_0 = 8,
  KVRT_GGUF_Q4_K = 12,
  KVRT_GGUF_Q5_K = 13,
  KVRT_GGUF_Q6_K = 14,
  KVRT_GGUF_BF16 = 30,
  KVRT_GGUF_Q4_K_M = 0x10000 + 15,
  KVRT_GGUF_Q5_K_M = 0x10000 + 17,
} kvrt_gguf_type;

/// Loads a GGUF v3 llama or qwen2 model from `size` bytes in memory, validated
/// as kvrt_model_load validates a GGUF file (runtime/core/GGUF.h). The model
/// keeps a copy of the tensor data (the buffer may go away).
kvrt_status kvrt_model_load_gguf_buffer(const void *data, size_t size,
                                        kvrt_model **out);

/// Writes a model as a GGUF v3 file of the llama architecture (interleaved
/// RoPE) or the qwen2 one (half RoPE): the <architecture>.* keys of its config,
/// matrices in `type` (vectors stay F32), a rope_freqs tensor for frequency
/// factors, and the tokenizer's vocabulary (tokenizer.ggml.*, spaces as
/// U+2581) when `tokenizer` is not NULL. A matrix whose rows are not whole
/// blocks of its type falls back: a K-quant to Q8_0 where rows are whole
/// 32-element blocks, else (and Q8_0, Q4_0 too) to F16, as llama.cpp's
/// converter does (docs/models.md). Weights of another format are
/// dequantised first, unless their format is the one written. Fails for half
/// RoPE with partial rotary or frequency factors, which qwen2 cannot express.
kvrt_status kvrt_model_save_gguf(const kvrt_model *model,
                                 const struct kvrt_tokenizer *tokenizer,
                                 kvrt_gguf_type type, const char *path);

/// The model's config.
kvrt_status kvrt_model_get_config(const kvrt_model *model,
                                  kvrt_model_config *out);

/// The model's weights.
kvrt_status kvrt_model_get_weights(const kvrt_model *model,
                                   kvrt_model_weights *out);

void kvrt_model_retain(kvrt_model *model);
void kvrt_model_release(kvrt_model *model);

//===----------------------------------------------------------------------===//
// KV pool
//===----------------------------------------------------------------------===//

/// Shape and capacity of a pool.
typedef struct kvrt_pool_config {
  int32_t n_layers;
  int32_t n_kv_heads;
  int32_t head_size;
  /// Token slots per page (default 16).
  int32_t page_tokens;
  /// Maximum number of pages (at most INT32_MAX). The arena is reserved up
  /// front; the operating system backs it lazily.
  int64_t capacity_pages;
  /// Element type of the pages (KVRT_KV_F32 when zero-initialised).
  kvrt_kv_dtype dtype;
} kvrt_pool_config;

/// Addressing of the pool's arena; see the layout at the top of this file.
/// Strides are in elements of `dtype`, `element_bytes` each.
typedef struct kvrt_page_layout {
  void *base;
  int32_t n_layers;
  int32_t n_kv_heads;
  int32_t head_size;
  int32_t page_tokens;
  int64_t capacity_pages;
  int64_t page_stride;
  int64_t layer_stride;
  int64_t head_stride;
  int64_t kv_stride;
  int64_t token_stride;
  int64_t page_bytes;
  kvrt_kv_dtype dtype;
  int32_t element_bytes;
} kvrt_page_layout;

/// Memory accounting: pages referenced by anyone.
typedef struct kvrt_pool_stats {
  int64_t pages_in_use;
  int64_t peak_pages;
  int64_t capacity_pages;
  int64_t page_bytes;
  int64_t bytes_in_use;
  int64_t peak_bytes;
} kvrt_pool_stats;

typedef struct kvrt_pool kvrt_pool;

/// The pool config matching a model: its layers, KV heads and head size,
/// page_tokens 16, room for four full contexts of seq_len tokens, f32 pages.
kvrt_status kvrt_pool_config_for_model(const kvrt_model *model,
                                       kvrt_pool_config *out);

kvrt_status kvrt_pool_create(const kvrt_pool_config *config, kvrt_pool **out);
void kvrt_pool_retain(kvrt_pool *pool);
/// Drops a reference. Views keep their pool alive.
void kvrt_pool_release(kvrt_pool *pool);

kvrt_status kvrt_pool_get_layout(const kvrt_pool *pool, kvrt_page_layout *out);
kvrt_status kvrt_pool_get_stats(const kvrt_pool *pool, kvrt_pool_stats *out);

/// Allocates `count` open pages (refcount 1, zero-filled), all or nothing.
kvrt_status kvrt_pool_alloc_pages(kvrt_pool *pool, int64_t count,
                                  int32_t *pages);

/// Adds a reference to a page in use.
kvrt_status kvrt_pool_retain_page(kvrt_pool *pool, int32_t page);

/// Drops a reference; the page is freed when none remains.
kvrt_status kvrt_pool_release_page(kvrt_pool *pool, int32_t page);

/// Makes a page immutable. Sealing a sealed page is allowed.
kvrt_status kvrt_pool_seal_page(kvrt_pool *pool, int32_t page);

/// A writable pointer to an open page (fails for sealed pages and for pools
/// of f16/bf16 pages: use the layout's base and runtime/core/KVElement.h).
kvrt_status kvrt_pool_page_data(kvrt_pool *pool, int32_t page, float **out);

/// A read-only pointer to any page in use of a pool of f32 pages.
kvrt_status kvrt_pool_page_cdata(const kvrt_pool *pool, int32_t page,
                                 const float **out);

/// The same for pages of any element type: the page's page_stride elements
/// of the layout's dtype (runtime/core/KVElement.h reads and writes them).
/// Writable only while the page is open.
kvrt_status kvrt_pool_page_bytes(kvrt_pool *pool, int32_t page, void **out);
kvrt_status kvrt_pool_page_cbytes(const kvrt_pool *pool, int32_t page,
                                  const void **out);

/// Copies the K and V of layer `layer` of `n` token slots starting at slot
/// `slot_begin` of the page list `pages` (as a run lays them out) into `k` and
/// `v`, [n][kv_heads][head_size] floats each (converted from the pool's
/// element type). Works on open and sealed pages.
kvrt_status kvrt_pool_read_kv(const kvrt_pool *pool, const int32_t *pages,
                              int64_t slot_begin, int64_t n, int32_t layer,
                              float *k, float *v);

/// Copy-on-write: gives the caller a writable page with the contents of
/// `page`, consuming the caller's reference to `page`. An open page with a
/// single reference is returned as is; otherwise a new page receives a copy.
/// On exhaustion nothing changes and the caller keeps its reference.
kvrt_status kvrt_pool_cow(kvrt_pool *pool, int32_t page, int32_t *out);

/// The page's reference count (0 for a free page, -1 for an invalid id).
int64_t kvrt_pool_page_refcount(const kvrt_pool *pool, int32_t page);

/// 1 if the page is in use and sealed, 0 otherwise.
int32_t kvrt_pool_page_is_sealed(const kvrt_pool *pool, int32_t page);

//===----------------------------------------------------------------------===//
// Views
//===----------------------------------------------------------------------===//

/// Stored positions lie in [0, KVRT_MAX_POSITION) and offsets and effective
/// positions in [-KVRT_MAX_POSITION, KVRT_MAX_POSITION]: every one of them is
/// exact as a double, so RoPE angles are computed from exact positions.
#define KVRT_MAX_POSITION (INT64_C(1) << 53)

/// One run of a view (see the top of this file). As an input to
/// kvrt_view_append, every pointer is copied. As an output of
/// kvrt_view_get_run, the pointers are valid while the view is alive.
typedef struct kvrt_run {
  const int32_t *pages;
  int64_t n_pages;
  int64_t slot_begin;
  int64_t n_tokens;
  int64_t base_pos;
  int64_t delta;
  /// The n_tokens token ids of the run.
  const int32_t *tokens;
  /// Segment label, or NULL.
  const char *label;
} kvrt_run;

typedef struct kvrt_view kvrt_view;

/// An empty view over `pool`.
kvrt_status kvrt_view_create(kvrt_pool *pool, kvrt_view **out);
void kvrt_view_retain(kvrt_view *view);
void kvrt_view_release(kvrt_view *view);

/// `view` followed by `run`. The run's pages must be sealed pages of the
/// view's pool, exactly those covering slots [slot_begin, slot_begin +
/// n_tokens) with slot_begin < page_tokens; n_tokens > 0.
kvrt_status kvrt_view_append(const kvrt_view *view, const kvrt_run *run,
                             kvrt_view **out);

/// The runs of `a` followed by those of `b` (same pool).
kvrt_status kvrt_view_concat(const kvrt_view *a, const kvrt_view *b,
                             kvrt_view **out);

/// Tokens [begin, end) of the view; runs are cut and keep their offsets.
kvrt_status kvrt_view_slice(const kvrt_view *view, int64_t begin, int64_t end,
                            kvrt_view **out);

/// The view with `delta` added to the offset of every run (a RoPE shift as
/// metadata: no key is rewritten).
kvrt_status kvrt_view_shift(const kvrt_view *view, int64_t delta,
                            kvrt_view **out);

/// Number of runs (0 for NULL).
int64_t kvrt_view_num_runs(const kvrt_view *view);
/// Number of tokens over all runs (0 for NULL).
int64_t kvrt_view_num_tokens(const kvrt_view *view);
/// The pool of the view (no reference added).
kvrt_pool *kvrt_view_pool(const kvrt_view *view);
/// Run `index` of the view.
kvrt_status kvrt_view_get_run(const kvrt_view *view, int64_t index,
                              kvrt_run *out);
/// The token indices [*begin, *end) of the runs labelled `label`. An error
/// when no run has the label or its runs are not contiguous.
kvrt_status kvrt_view_segment_bounds(const kvrt_view *view, const char *label,
                                     int64_t *begin, int64_t *end);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // KVIR_RUNTIME_CORE_KVRUNTIME_H
