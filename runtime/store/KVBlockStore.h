//===- KVBlockStore.h - Prefilled blocks in a shared store ------*- C++ -*-===//
//
// The C interface of the block store: prefilled K/V blocks kept outside the
// process, under a content key, so that every process (and every machine)
// that needs the same block under the same model fetches it instead of
// prefilling it again (docs/block-store.md).
//
// A *block* is the K/V of a token sequence prefilled at a known base position
// over nothing (no tokens before it) under a known model: what kv.load_block
// names. Its key is a SHA-256 over
//   - the model's fingerprint (its configuration and every weight),
//   - its configuration key (architecture fields and the K/V element type),
//   - the layout version of the K/V data,
//   - the base position and the token ids,
// written as `<prefix>blk:v1:<64 hex digits>`. A *blob* is what the store
// holds under a key: a header (magic, format and layout versions, model
// fingerprint, element type, shapes, base position, token count, a digest of
// the key, a checksum of the header and one of the payload), the token ids
// and the K/V. A blob that fails any check is rejected and counted, never
// mapped into a cache.
//
// Stores (`url`): `memory` (in this process, per handle) and
// `redis://[[user]:password@]host[:port][/db]` (Redis through hiredis, loaded
// with dlopen at first use: a machine without libhiredis gets a clear error,
// not a missing library at start-up; MOVED/ASK redirections of a Redis
// Cluster are followed).
//
// Errors follow KVRuntime.h: a kvrt_status and kvrt_last_error(). A fault of
// the store or of a blob is KVRT_ERR_UNAVAILABLE with the fault's kind in
// the kvrt_block_result; nothing already built is touched by a failure.
// A store handle may be shared by threads (calls are serialised).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_KVBLOCKSTORE_H
#define KVIR_RUNTIME_STORE_KVBLOCKSTORE_H

#include "runtime/core/KVRuntime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvrt_block_store kvrt_block_store;

/// The version of the blob format and of the K/V data layout inside it
/// ([n_layers][n_kv_heads][2 (K, V)][n_tokens][head_size], the pool's page
/// order with tokens for slots). Both are part of every key.
#define KVRT_BLOCK_FORMAT_VERSION 1
#define KVRT_BLOCK_LAYOUT_VERSION 1

/// Room for a key: the prefix (at most 64 bytes), `blk:v1:`, 64 hex digits
/// and the NUL.
#define KVRT_BLOCK_KEY_MAX 160

typedef struct kvrt_block_store_options {
  /// Put in front of every key (default "kvir:"); at most 64 bytes.
  const char *key_prefix;
  /// Expiry of stored blocks in seconds (0, the default: none).
  int64_t ttl_seconds;
  /// Timeouts of a connection and of one command, in milliseconds
  /// (defaults 1000 and 5000).
  int32_t connect_timeout_ms;
  int32_t io_timeout_ms;
  /// The largest blob fetched or stored (default 1 GiB).
  int64_t max_blob_bytes;
} kvrt_block_store_options;

/// The defaults above.
void kvrt_block_store_options_init(kvrt_block_store_options *options);

/// Opens the store `url` (see above); `options` may be NULL for the
/// defaults. Connecting is deferred to the first use, so opening never
/// waits on the network; a malformed URL or option is an error here.
kvrt_status kvrt_block_store_open(const char *url,
                                  const kvrt_block_store_options *options,
                                  kvrt_block_store **out);
void kvrt_block_store_retain(kvrt_block_store *store);
void kvrt_block_store_release(kvrt_block_store *store);

/// The URL, key prefix and TTL as one line, e.g.
/// `redis://127.0.0.1:6379 (key prefix "kvir:", ttl 3600 s)`.
const char *kvrt_block_store_describe(const kvrt_block_store *store);

/// What went wrong with a store or a blob.
typedef enum kvrt_block_fault {
  KVRT_BLOCK_OK = 0,
  /// The store cannot be reached, or the connection broke.
  KVRT_BLOCK_UNREACHABLE = 1,
  /// The store did not answer within io_timeout_ms (connect_timeout_ms).
  KVRT_BLOCK_TIMEOUT = 2,
  /// The lookup found the key, the fetch did not (expired or evicted in
  /// between).
  KVRT_BLOCK_EVICTED = 3,
  /// The blob's magic, header checksum or payload checksum is wrong.
  KVRT_BLOCK_CORRUPT = 4,
  /// The blob is shorter (or longer) than its header says.
  KVRT_BLOCK_TRUNCATED = 5,
  /// The blob was computed under another model (fingerprint).
  KVRT_BLOCK_OTHER_MODEL = 6,
  /// Another format or layout version, element type, shape, base position,
  /// token list or key than asked for.
  KVRT_BLOCK_MISMATCH = 7,
  /// Larger than max_blob_bytes.
  KVRT_BLOCK_TOO_LARGE = 8,
  /// The store answered with an error (out of memory, read-only, wrong
  /// type, authentication, ...).
  KVRT_BLOCK_STORE_ERROR = 9,
} kvrt_block_fault;
#define KVRT_BLOCK_NUM_FAULTS 10

/// A short name of a fault (`unreachable`, `timeout`, `evicted`, ...).
const char *kvrt_block_fault_name(kvrt_block_fault fault);

/// What one load or save did.
typedef struct kvrt_block_result {
  /// Load: 1 when the block was found and mapped.
  int32_t hit;
  kvrt_block_fault fault;
  /// Bytes of blob moved (fetched or stored).
  int64_t bytes;
  /// Wall time of the call.
  double seconds;
  /// The key (with the prefix).
  char key[KVRT_BLOCK_KEY_MAX];
} kvrt_block_result;

/// The key of the block of `n` tokens at `base` under `model` on pages of
/// `dtype`, with the store's prefix. Load and save take the type from the
/// pool.
kvrt_status kvrt_block_store_key(kvrt_block_store *store,
                                 const kvrt_model *model, kvrt_kv_dtype dtype,
                                 int64_t base, const int32_t *tokens, int64_t n,
                                 char out[KVRT_BLOCK_KEY_MAX]);

/// Fetches the block of `n` tokens at `base` under `model` into fresh sealed
/// pages of `pool`, as one run labelled `label` (may be NULL) at stored
/// positions base .. base+n-1, offset 0. KVRT_OK with `*out` the view on a
/// hit, or NULL on a miss; KVRT_ERR_UNAVAILABLE on a fault (`result->fault`
/// says which; a rejected blob is counted and never mapped);
/// KVRT_ERR_POOL_EXHAUSTED when the pool cannot take it. `result` may be
/// NULL.
kvrt_status kvrt_block_store_load(kvrt_block_store *store,
                                  const kvrt_model *model, kvrt_pool *pool,
                                  int64_t base, const int32_t *tokens,
                                  int64_t n, const char *label, kvrt_view **out,
                                  kvrt_block_result *result);

/// Stores `block` under the key of its tokens and its first stored position.
/// The caller vouches that it is a block: every run at offset 0, stored
/// positions consecutive from the first, its K/V prefilled over nothing
/// (kv.store_block checks this through the execution context). A view that
/// is visibly not one (an offset, a gap) is KVRT_ERR_INVALID_ARGUMENT; a
/// store fault KVRT_ERR_UNAVAILABLE. An empty view stores nothing.
kvrt_status kvrt_block_store_save(kvrt_block_store *store,
                                  const kvrt_model *model,
                                  const kvrt_view *block,
                                  kvrt_block_result *result);

/// A whole context (a server's, spilled out of the pool): every run of a view
/// with its tokens, stored positions, offset and label, and the logits of
/// its last token, under `<prefix>ctx:v1:<name>` (ContextBlob.h has the
/// format). Unlike a block it is named by the caller, not by its content,
/// and it is checked on load against the name and the tokens the caller
/// expects (a blob that fails a check is rejected, counted and never
/// mapped). Load, save and remove count in the store's counters as blocks
/// do.
#define KVRT_CONTEXT_FORMAT_VERSION 1
/// Room for a context's name: 1 to 95 letters, digits and `_-.:`.
#define KVRT_CONTEXT_NAME_MAX 96

/// Stores `view` and `n_logits` logits (0, or the model's vocabulary) as the
/// context `name` (replacing any).
kvrt_status kvrt_block_store_save_context(kvrt_block_store *store,
                                          const kvrt_model *model,
                                          const char *name,
                                          const kvrt_view *view,
                                          const float *logits, int64_t n_logits,
                                          kvrt_block_result *result);

/// Fetches the context `name`, which must hold `tokens` (`n` of them), into
/// fresh sealed pages of `pool`: KVRT_OK with `*out` the view (its runs as
/// they were saved) and its logits in `logits` (room for `logits_capacity`,
/// the count in `*n_logits`) on a hit, `*out` NULL on a miss;
/// KVRT_ERR_UNAVAILABLE on a fault (`result->fault`); KVRT_ERR_POOL_EXHAUSTED
/// when the pool cannot take it.
kvrt_status
kvrt_block_store_load_context(kvrt_block_store *store, const kvrt_model *model,
                              kvrt_pool *pool, const char *name,
                              const int32_t *tokens, int64_t n, float *logits,
                              int64_t logits_capacity, int64_t *n_logits,
                              kvrt_view **out, kvrt_block_result *result);

/// Removes the context `name` from the store (nothing when it is absent).
kvrt_status kvrt_block_store_remove_context(kvrt_block_store *store,
                                            const char *name,
                                            kvrt_block_result *result);

/// Counters since the store was opened.
typedef struct kvrt_block_store_stats {
  int64_t lookups, hits, misses, stores;
  int64_t bytes_fetched, bytes_stored;
  /// Blobs that failed a check (corrupt, truncated, another model, a
  /// mismatch, too large): never mapped.
  int64_t rejected;
  /// Faults by kind (KVRT_BLOCK_OK counts nothing).
  int64_t faults[KVRT_BLOCK_NUM_FAULTS];
} kvrt_block_store_stats;
kvrt_status kvrt_block_store_get_stats(const kvrt_block_store *store,
                                       kvrt_block_store_stats *out);

/// The fingerprint of a model: SHA-256 over its configuration and its
/// weights (hashed in 1 MiB chunks with XXH64, so it costs a read of the
/// weights), as 64 hex digits and the NUL.
kvrt_status kvrt_model_fingerprint(const kvrt_model *model, char out[65]);

#ifdef __cplusplus
} // extern "C"
#endif

#endif // KVIR_RUNTIME_STORE_KVBLOCKSTORE_H
