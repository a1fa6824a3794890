//===- BlockBlob.h - Keys and blobs of prefilled blocks ---------*- C++ -*-===//
//
// How a block is named and serialised (KVBlockStore.h has the summary,
// docs/block-store.md the byte layout). Everything here is pure: no store,
// no network; the checks of a blob are all made before a page is allocated.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_BLOCKBLOB_H
#define KVIR_RUNTIME_STORE_BLOCKBLOB_H

#include "runtime/store/Hash.h"
#include "runtime/store/KVBlockStore.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvir::store {

/// The fixed size of a blob's header.
constexpr size_t kBlobHeaderBytes = 128;

/// What a block's key is computed from, and what its blob must agree with.
struct BlockId {
  Digest model{};
  /// kvir::configKey of the model's configuration and the element type.
  std::string configKey;
  kvrt_kv_dtype dtype = KVRT_KV_F32;
  int32_t layers = 0, kvHeads = 0, headSize = 0;
  int64_t base = 0;
  std::vector<int32_t> tokens;
  /// SHA-256 of all of the above (blockKey()).
  Digest key{};

  /// Bytes of one element of K/V.
  size_t elementBytes() const;
  /// Bytes of the blob of this block: header, token ids and K/V.
  uint64_t blobBytes() const;
};

/// The model's fingerprint (KVBlockStore.h: kvrt_model_fingerprint).
Digest modelFingerprint(const kvrt_model *model);

/// The identity of the block of `tokens` at `base` under `model` whose
/// fingerprint is `fingerprint`, with its key computed; the element type is
/// `dtype`.
BlockId makeBlockId(const kvrt_model *model, const Digest &fingerprint,
                    kvrt_kv_dtype dtype, int64_t base,
                    std::vector<int32_t> tokens);

/// The key string: `prefix` + `blk:v1:` + 64 hex digits.
std::string keyString(const std::string &prefix, const BlockId &id);

/// Serialises the K/V of `view` (which must be the block `id` names: runs
/// at offset 0, stored positions id.base, id.base + 1, ..., its tokens
/// id.tokens) into `out`. False with `error` otherwise.
bool encodeBlob(const kvrt_view *view, const BlockId &id, std::string &out,
                std::string &error);

/// Checks `blob` against `id`: size, magic, header checksum, versions,
/// model, element type and shapes, base position, token count, key digest,
/// payload checksum, and the token ids. KVRT_BLOCK_OK, or the fault with a
/// message saying what differs.
kvrt_block_fault checkBlob(std::string_view blob, const BlockId &id,
                           std::string &message);

/// Writes a checked blob into fresh pages of `pool`, sealed, as one run
/// labelled `label` of a new view (`*out`). On failure nothing is left
/// allocated.
kvrt_status mapBlob(std::string_view blob, const BlockId &id, kvrt_pool *pool,
                    const char *label, kvrt_view **out);

} // namespace kvir::store

#endif // KVIR_RUNTIME_STORE_BLOCKBLOB_H
