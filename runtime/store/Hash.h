//===- Hash.h - SHA-256 and XXH64 for block keys and blobs -----*- C++ -*-===//
//
// The two hashes of the block store, implemented here so that the runtime
// needs no crypto library: SHA-256 (FIPS 180-4) names content (model
// fingerprints, block keys: a collision would hand one block's K/V to
// another's tokens), XXH64 (xxHash's 64-bit variant) checks that a blob
// arrived as it was written (fast enough to check every byte of every fetch).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_STORE_HASH_H
#define KVIR_RUNTIME_STORE_HASH_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvir::store {

/// A SHA-256 digest.
using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256.
class Sha256 {
public:
  Sha256();
  /// Adds `n` bytes.
  void update(const void *data, size_t n);
  /// Adds a little-endian integer (the byte order of every field hashed).
  template <typename T> void updateLE(T value) {
    uint8_t bytes[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i)
      bytes[i] = uint8_t(uint64_t(value) >> (8 * i));
    update(bytes, sizeof(T));
  }
  /// Finishes; the object must not be updated afterwards.
  Digest finish();

private:
  void block(const uint8_t *data);
  uint32_t state[8];
  uint8_t buffer[64];
  size_t buffered = 0;
  uint64_t length = 0;
};

/// The SHA-256 of `n` bytes.
Digest sha256(const void *data, size_t n);

/// XXH64 of `n` bytes with `seed`.
uint64_t xxh64(const void *data, size_t n, uint64_t seed = 0);

/// Lowercase hexadecimal of `n` bytes.
std::string toHex(const uint8_t *data, size_t n);
inline std::string toHex(const Digest &digest) {
  return toHex(digest.data(), digest.size());
}

} // namespace kvir::store

#endif // KVIR_RUNTIME_STORE_HASH_H
