//===- BlobFormat.h - What block and context blobs share --------*- C++ -*-===//
//
// The pieces of a blob (BlockBlob.h, ContextBlob.h) that do not depend on
// what it holds: little-endian fields, the K/V section's layout
// ([n_layers][n_kv_heads][2 (K, V)][n_tokens][head_size] elements of the
// pool's type, KVRT_BLOCK_LAYOUT_VERSION) and the copies between it and a
// run's pages, bit for bit. Internal to runtime/store.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_BLOBFORMAT_H
#define KVIR_RUNTIME_STORE_BLOBFORMAT_H

#include "runtime/core/KVRuntime.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvir::store {

template <typename T> void putField(uint8_t *at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T> T getField(const uint8_t *at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

/// The first 8 bytes of a digest in hex, for messages.
std::string shortHex(const uint8_t *digest);

/// "" when `layout` holds K/V of `layers` x `kvHeads` x `headSize` elements
/// of `dtype`, else what differs (the pool's shape and that of the `what`,
/// "block" or "context").
std::string describeShapeMismatch(const kvrt_page_layout &layout,
                                  const char *what, int32_t layers,
                                  int32_t kvHeads, int32_t headSize,
                                  kvrt_kv_dtype dtype);

/// The pool and page layout of `view`, checked to hold K/V of the shape of
/// the `what` ("block" or "context"). False with `error` otherwise.
bool viewPoolOfShape(const kvrt_view *view, const char *what, int32_t layers,
                     int32_t kvHeads, int32_t headSize, kvrt_kv_dtype dtype,
                     kvrt_pool *&pool, kvrt_page_layout &layout,
                     std::string &error);

/// What a block's or a context's blob header must say in the fields both
/// kinds share: the magic (bytes 0-7), the format, header size, K/V layout,
/// element type and shape (bytes 8-39, uint32 each), the model's
/// fingerprint (32 bytes at `modelOffset`) and the XXH64 of bytes 0-119 (at
/// 120).
struct BlobPrologue {
  const char *magic;
  /// "block" or "context", and how a format mismatch names the blob.
  const char *kind, *noun;
  uint32_t format, headerBytes;
  size_t modelOffset;
  const uint8_t *model;
  int32_t layers, kvHeads, headSize;
  kvrt_kv_dtype dtype;
};

/// Checks those fields of `blob`: KVRT_BLOCK_OK, or the fault (truncated
/// header, bad magic, header checksum, format, another model, another
/// shape) with `message`.
kvrt_block_fault checkBlobPrologue(std::string_view blob,
                                   const BlobPrologue &expected,
                                   std::string &message);

/// Bytes of the K/V section of `tokens` tokens.
uint64_t kvSectionBytes(const kvrt_page_layout &layout, uint64_t tokens);

/// Copies the K/V of `run` (a run of a view of `pool`) into a K/V section of
/// `total` tokens at tokens [first, first + run.n_tokens). False with
/// `error` when a page cannot be read.
bool copyRunToSection(kvrt_pool *pool, const kvrt_page_layout &layout,
                      const kvrt_run &run, int64_t first, int64_t total,
                      unsigned char *section, std::string &error);

/// Allocates the pages of `n` tokens, fills them from tokens [first, first +
/// n) of a K/V section of `total` tokens, and seals them; `pages` holds one
/// reference to each (the caller releases them). On failure nothing is left
/// allocated.
kvrt_status writeSectionToPages(kvrt_pool *pool, const kvrt_page_layout &layout,
                                int64_t n, int64_t first, int64_t total,
                                const unsigned char *section,
                                std::vector<int32_t> &pages);

} // namespace kvir::store

#endif // KVIR_RUNTIME_STORE_BLOBFORMAT_H
