//===- BlockStore.h - Where blobs are kept ----------------------*- C++ -*-===//
//
// The interface behind kvrt_block_store: four operations on opaque blobs
// under string keys, implemented in this process (MemoryStore) and over
// Redis (RedisStore.cpp). What a blob holds and how it is checked is
// BlockBlob.h's business; a store only moves bytes and says precisely what
// went wrong when it cannot.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_BLOCKSTORE_H
#define KVIR_RUNTIME_STORE_BLOCKSTORE_H

#include "runtime/store/KVBlockStore.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kvir::store {

/// The outcome of a store operation: KVRT_BLOCK_OK, a fault (unreachable,
/// timeout, store error, too large) with a message, or `notFound`.
struct StoreStatus {
  kvrt_block_fault fault = KVRT_BLOCK_OK;
  bool notFound = false;
  std::string message;

  bool ok() const { return fault == KVRT_BLOCK_OK && !notFound; }
  static StoreStatus success() { return {}; }
  static StoreStatus missing() { return {KVRT_BLOCK_OK, true, ""}; }
  static StoreStatus failure(kvrt_block_fault fault, std::string message) {
    return {fault, false, std::move(message)};
  }
};

class BlockStore {
public:
  virtual ~BlockStore() = default;

  /// The store as a URL, for messages (`redis://127.0.0.1:6379/0`).
  virtual std::string url() const = 0;

  /// Whether `key` is present, and the size of its blob.
  virtual StoreStatus lookup(const std::string &key, int64_t &size) = 0;

  /// The blob under `key` (notFound when it is gone); a blob over
  /// `maxBytes` is KVRT_BLOCK_TOO_LARGE.
  virtual StoreStatus fetch(const std::string &key, int64_t maxBytes,
                            std::string &blob) = 0;

  /// Stores `blob` under `key`, expiring after `ttlSeconds` (0: never).
  virtual StoreStatus put(const std::string &key, std::string_view blob,
                          int64_t ttlSeconds) = 0;

  /// Removes `key` (success when it is absent).
  virtual StoreStatus remove(const std::string &key) = 0;
};

/// A store in this process: a map with expiry, private to the handle.
std::unique_ptr<BlockStore> createMemoryStore();

/// A Redis store for `url` (`redis://[[user]:password@]host[:port][/db]`);
/// null with `error` for a malformed URL. Connects at first use.
std::unique_ptr<BlockStore>
createRedisStore(const std::string &url, const kvrt_block_store_options &opts,
                 std::string &error);

/// A kvrt_block_store over `store` (tests wrap stores to inject faults);
/// null with kvrt_last_error() set on invalid options.
kvrt_block_store *wrapBlockStore(std::unique_ptr<BlockStore> store,
                                 const kvrt_block_store_options *options);

/// The store a handle wraps (for tests).
BlockStore *unwrapBlockStore(kvrt_block_store *store);

} // namespace kvir::store

#endif // KVIR_RUNTIME_STORE_BLOCKSTORE_H
