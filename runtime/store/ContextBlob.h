//===- ContextBlob.h - A whole context as one blob --------------*- C++ -*-===//
//
// The sibling of BlockBlob.h for a server's context spilled out of the pool
// (kvrt_block_store_save_context): not a block (tokens prefilled at
// consecutive positions over nothing) but any view, run by run, with what
// makes each run what it is (its tokens, stored positions, offset and
// label) and the logits of the view's last token, so that the view mapped
// back computes exactly what it computed before it was spilled. Named by
// the caller (kv-serve: the context's id), under `<prefix>ctx:v1:<name>`.
//
//   header (128 bytes, little-endian): magic "KVIRCTXT", format, header
//     bytes, K/V layout, element type, layers, KV heads, head size, element
//     bytes, runs, tokens, logits, payload bytes, the model's fingerprint,
//     8 bytes of the name's SHA-256, XXH64 of the payload, XXH64 of the
//     header's first 120 bytes
//   payload: per run (32 bytes) its tokens, stored position and offset
//     (int64), its label's length and whether it has one (uint32); the
//     labels; the token ids (int32); the logits (float); the K/V section
//     (BlobFormat.h) of all the runs' tokens in order
//
// As for blocks, everything is checked before a page is allocated; a blob
// that fails a check is never mapped.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_CONTEXTBLOB_H
#define KVIR_RUNTIME_STORE_CONTEXTBLOB_H

#include "runtime/store/Hash.h"
#include "runtime/store/KVBlockStore.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvir::store {

/// The fixed size of a context blob's header.
constexpr size_t kContextHeaderBytes = 128;

/// What a context blob must agree with: the model, the pool's shape, the
/// name it was stored under and the tokens of the context.
struct ContextId {
  Digest model{};
  kvrt_kv_dtype dtype = KVRT_KV_F32;
  int32_t layers = 0, kvHeads = 0, headSize = 0, vocab = 0;
  std::string name;
  std::vector<int32_t> tokens;
};

/// The identity of the context `name` holding `tokens` under `model` (whose
/// fingerprint is `fingerprint`) on pages of `dtype`.
ContextId makeContextId(const kvrt_model *model, const Digest &fingerprint,
                        kvrt_kv_dtype dtype, std::string name,
                        std::vector<int32_t> tokens);

/// "" when `name` can name a context (1 to KVRT_CONTEXT_NAME_MAX - 1
/// letters, digits and `_-.:`), else why not.
std::string checkContextName(const std::string &name);

/// `prefix` + `ctx:v1:` + the name.
std::string contextKeyString(const std::string &prefix,
                             const std::string &name);

/// Serialises every run of `view` (its tokens must be id.tokens) and
/// `nLogits` logits (0, or the model's vocabulary) into `out`. False with
/// `error` otherwise.
bool encodeContextBlob(const kvrt_view *view, const ContextId &id,
                       const float *logits, int64_t nLogits, std::string &out,
                       std::string &error);

/// Checks `blob` against `id`: size, magic, header checksum, versions,
/// model, element type and shapes, name, token and logit counts, payload
/// checksum, the run table (tokens, positions, labels) and the token ids.
/// KVRT_BLOCK_OK, or the fault with a message saying what differs.
kvrt_block_fault checkContextBlob(std::string_view blob, const ContextId &id,
                                  std::string &message);

/// Writes a blob checked against `id` into fresh sealed pages of `pool` as a
/// view with the blob's runs (`*out`), and its logits into `logits`. On
/// failure nothing is left allocated.
kvrt_status mapContextBlob(std::string_view blob, const ContextId &id,
                           kvrt_pool *pool, kvrt_view **out,
                           std::vector<float> &logits);

} // namespace kvir::store

#endif // KVIR_RUNTIME_STORE_CONTEXTBLOB_H
