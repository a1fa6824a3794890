//===- BlockBlob.cpp - Keys and blobs of prefilled blocks -------*- C++ -*-===//

#include "runtime/store/BlockBlob.h"

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cstring>

using namespace kvir::store;
using kvrt::str;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'I', 'R', 'B', 'L', 'O', 'B'};

/// The header's fields at their offsets (little-endian; docs/block-store.md).
struct HeaderFields {
  uint32_t format, headerBytes, layout, dtype;
  uint32_t layers, kvHeads, headSize, elementBytes;
  int64_t base;
  uint64_t tokens, payloadBytes;
  uint8_t model[32];
  uint8_t keyDigest[16];
  uint64_t payloadChecksum, headerChecksum;
};

template <typename T> void put(uint8_t *at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <typename T> T get(const uint8_t *at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

void writeHeader(uint8_t *h, const HeaderFields &f) {
  std::memset(h, 0, kBlobHeaderBytes);
  std::memcpy(h, kMagic, 8);
  put(h + 8, f.format);
  put(h + 12, f.headerBytes);
  put(h + 16, f.layout);
  put(h + 20, f.dtype);
  put(h + 24, f.layers);
  put(h + 28, f.kvHeads);
  put(h + 32, f.headSize);
  put(h + 36, f.elementBytes);
  put(h + 40, f.base);
  put(h + 48, f.tokens);
  put(h + 56, f.payloadBytes);
  std::memcpy(h + 64, f.model, 32);
  std::memcpy(h + 96, f.keyDigest, 16);
  put(h + 112, f.payloadChecksum);
  put(h + 120, xxh64(h, 120));
}

HeaderFields readHeader(const uint8_t *h) {
  HeaderFields f;
  f.format = get<uint32_t>(h + 8);
  f.headerBytes = get<uint32_t>(h + 12);
  f.layout = get<uint32_t>(h + 16);
  f.dtype = get<uint32_t>(h + 20);
  f.layers = get<uint32_t>(h + 24);
  f.kvHeads = get<uint32_t>(h + 28);
  f.headSize = get<uint32_t>(h + 32);
  f.elementBytes = get<uint32_t>(h + 36);
  f.base = get<int64_t>(h + 40);
  f.tokens = get<uint64_t>(h + 48);
  f.payloadBytes = get<uint64_t>(h + 56);
  std::memcpy(f.model, h + 64, 32);
  std::memcpy(f.keyDigest, h + 96, 16);
  f.payloadChecksum = get<uint64_t>(h + 112);
  f.headerChecksum = get<uint64_t>(h + 120);
  return f;
}

/// The first 8 bytes of a digest in hex, for messages.
std::string shortHex(const uint8_t *digest) { return toHex(digest, 8) + "..."; }

/// Copies the K/V of `n` tokens between pages and a blob, in either
/// direction: the pages (their bytes in `pageData`) hold them from slot
/// `slotBegin` of the first; the blob's K/V is [layers][kv_heads][2][total]
/// [head_size] elements of the pool's type, of which these are tokens
/// [first, first + n). Elements are copied as stored, bit for bit.
template <bool ToBlob>
void copyRun(const kvrt_page_layout &layout, int64_t slotBegin, int64_t n,
             int64_t first, int64_t total, unsigned char *blob,
             unsigned char *const *pageData) {
  int64_t bytes = kvir::kvDtypeBytes(layout.dtype);
  int64_t head = layout.head_size, pt = layout.page_tokens;
  for (int64_t done = 0; done < n;) {
    int64_t slot = slotBegin + done;
    int64_t page = slot / pt, inPage = slot % pt;
    int64_t count = std::min(n - done, pt - inPage);
    unsigned char *base = pageData[page];
    for (int64_t l = 0; l < layout.n_layers; ++l)
      for (int64_t h = 0; h < layout.n_kv_heads; ++h)
        for (int64_t c = 0; c < 2; ++c) {
          unsigned char *p =
              base + (l * layout.layer_stride + h * layout.head_stride +
                      c * layout.kv_stride + inPage * head) *
                         bytes;
          unsigned char *b =
              blob + (((l * layout.n_kv_heads + h) * 2 + c) * total * head +
                      (first + done) * head) *
                         bytes;
          if (ToBlob)
            std::memcpy(b, p, count * head * bytes);
          else
            std::memcpy(p, b, count * head * bytes);
        }
    done += count;
  }
}

} // namespace

size_t BlockId::elementBytes() const {
  return size_t(kvir::kvDtypeBytes(dtype));
}

uint64_t BlockId::blobBytes() const {
  uint64_t n = tokens.size();
  return kBlobHeaderBytes + n * sizeof(int32_t) +
         uint64_t(layers) * kvHeads * 2 * n * headSize * elementBytes();
}

Digest kvir::store::modelFingerprint(const kvrt_model *model) {
  const kvrt_model_config &c = model->config;
  Sha256 hash;
  static const char domain[] = "kvir-model-fingerprint-v1";
  hash.update(domain, sizeof(domain));
  // The configuration the weights are read with: sizes, the classifier's
  // sharing, RoPE and the norm epsilon (configKey spells the same fields).
  std::string key = kvir::configKey(c, KVRT_KV_F32);
  hash.updateLE(uint64_t(key.size()));
  hash.update(key.data(), key.size());
  hash.updateLE(int32_t(c.shared_classifier));
  // The weights, in 1 MiB chunks each hashed with XXH64 seeded by its index:
  // SHA-256 over all of them would cost seconds on a large model, and the
  // fingerprint guards against mistakes (a block of another model), not
  // attacks (whoever can write to the store can write any K/V).
  // The bytes are the weights as the model holds them (its f32 floats, a
  // GGUF file's blocks), its slices back to back (Model.h).
  const size_t chunk = size_t(1) << 20;
  hash.updateLE(kvrt::weightBytes(*model));
  kvrt::forEachWeightChunk(*model, chunk,
                           [&](const void *bytes, size_t size, size_t i) {
                             hash.updateLE(xxh64(bytes, size, i));
                           });
  return hash.finish();
}

BlockId kvir::store::makeBlockId(const kvrt_model *model,
                                 const Digest &fingerprint, kvrt_kv_dtype dtype,
                                 int64_t base, std::vector<int32_t> tokens) {
  const kvrt_model_config &c = model->config;
  BlockId id;
  id.model = fingerprint;
  id.configKey = kvir::configKey(c, dtype);
  id.dtype = dtype;
  id.layers = c.n_layers;
  id.kvHeads = c.n_kv_heads;
  id.headSize = kvir::headSize(c);
  id.base = base;
  id.tokens = std::move(tokens);

  Sha256 hash;
  static const char domain[] = "kvir-block-key-v1";
  hash.update(domain, sizeof(domain));
  hash.update(id.model.data(), id.model.size());
  hash.updateLE(uint64_t(id.configKey.size()));
  hash.update(id.configKey.data(), id.configKey.size());
  hash.updateLE(uint32_t(dtype));
  hash.updateLE(uint32_t(KVRT_BLOCK_FORMAT_VERSION));
  hash.updateLE(uint32_t(KVRT_BLOCK_LAYOUT_VERSION));
  hash.updateLE(int64_t(base));
  hash.updateLE(uint64_t(id.tokens.size()));
  for (int32_t t : id.tokens)
    hash.updateLE(t);
  id.key = hash.finish();
  return id;
}

std::string kvir::store::keyString(const std::string &prefix,
                                   const BlockId &id) {
  return prefix + "blk:v1:" + toHex(id.key);
}

bool kvir::store::encodeBlob(const kvrt_view *view, const BlockId &id,
                             std::string &out, std::string &error) {
  kvrt_page_layout layout;
  kvrt_pool *pool = kvrt_view_pool(view);
  if (!pool || kvrt_pool_get_layout(pool, &layout) != KVRT_OK) {
    error = "the view has no pool";
    return false;
  }
  if (layout.n_layers != id.layers || layout.n_kv_heads != id.kvHeads ||
      layout.head_size != id.headSize || layout.dtype != id.dtype) {
    error =
        str("the pool holds ", layout.n_layers, " x ", layout.n_kv_heads, " x ",
            layout.head_size, " K/V of ", kvir::kvDtypeName(layout.dtype),
            ", the block ", id.layers, " x ", id.kvHeads, " x ", id.headSize,
            " of ", kvir::kvDtypeName(id.dtype));
    return false;
  }
  int64_t n = int64_t(id.tokens.size());
  if (kvrt_view_num_tokens(view) != n) {
    error = str("the view holds ", kvrt_view_num_tokens(view),
                " tokens, the block ", n);
    return false;
  }
  uint64_t bytes = id.blobBytes();
  out.assign(bytes, '\0');
  uint8_t *blob = reinterpret_cast<uint8_t *>(out.data());
  int32_t *tokens = reinterpret_cast<int32_t *>(blob + kBlobHeaderBytes);
  unsigned char *kv = reinterpret_cast<unsigned char *>(tokens + n);
  int64_t done = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) != KVRT_OK) {
      error = kvrt_last_error();
      return false;
    }
    if (run.delta != 0) {
      error = str("run ", r, " has offset ", run.delta,
                  ": a shifted view is not a block");
      return false;
    }
    if (run.base_pos != id.base + done) {
      error = str("run ", r, " starts at stored position ", run.base_pos,
                  ", the block's next position is ", id.base + done);
      return false;
    }
    if (!std::equal(run.tokens, run.tokens + run.n_tokens,
                    id.tokens.begin() + done)) {
      error = str("run ", r, " holds other tokens than the block's");
      return false;
    }
    std::vector<unsigned char *> data(run.n_pages);
    for (int64_t p = 0; p < run.n_pages; ++p) {
      const void *page = nullptr;
      if (kvrt_pool_page_cbytes(pool, run.pages[p], &page) != KVRT_OK) {
        error = kvrt_last_error();
        return false;
      }
      data[p] = static_cast<unsigned char *>(const_cast<void *>(page));
    }
    copyRun<true>(layout, run.slot_begin, run.n_tokens, done, n, kv,
                  data.data());
    done += run.n_tokens;
  }
  std::memcpy(tokens, id.tokens.data(), n * sizeof(int32_t));

  HeaderFields f{};
  f.format = KVRT_BLOCK_FORMAT_VERSION;
  f.headerBytes = kBlobHeaderBytes;
  f.layout = KVRT_BLOCK_LAYOUT_VERSION;
  f.dtype = uint32_t(id.dtype);
  f.layers = id.layers;
  f.kvHeads = id.kvHeads;
  f.headSize = id.headSize;
  f.elementBytes = uint32_t(id.elementBytes());
  f.base = id.base;
  f.tokens = uint64_t(n);
  f.payloadBytes = bytes - kBlobHeaderBytes;
  std::memcpy(f.model, id.model.data(), 32);
  std::memcpy(f.keyDigest, id.key.data(), 16);
  f.payloadChecksum = xxh64(blob + kBlobHeaderBytes, f.payloadBytes);
  writeHeader(blob, f);
  return true;
}

kvrt_block_fault kvir::store::checkBlob(std::string_view blob,
                                        const BlockId &id,
                                        std::string &message) {
  const uint8_t *b = reinterpret_cast<const uint8_t *>(blob.data());
  if (blob.size() < kBlobHeaderBytes) {
    message = str("truncated blob: ", blob.size(), " bytes, shorter than the ",
                  kBlobHeaderBytes, "-byte header");
    return KVRT_BLOCK_TRUNCATED;
  }
  if (std::memcmp(b, kMagic, 8) != 0) {
    message = "corrupt blob: not a KVIR block (bad magic)";
    return KVRT_BLOCK_CORRUPT;
  }
  HeaderFields f = readHeader(b);
  if (xxh64(b, 120) != f.headerChecksum) {
    message = "corrupt blob: the header checksum does not match";
    return KVRT_BLOCK_CORRUPT;
  }
  if (f.format != KVRT_BLOCK_FORMAT_VERSION ||
      f.headerBytes != kBlobHeaderBytes ||
      f.layout != KVRT_BLOCK_LAYOUT_VERSION) {
    message = str("blob of format ", f.format, " / layout ", f.layout,
                  ", this runtime reads format ", KVRT_BLOCK_FORMAT_VERSION,
                  " / layout ", KVRT_BLOCK_LAYOUT_VERSION);
    return KVRT_BLOCK_MISMATCH;
  }
  if (std::memcmp(f.model, id.model.data(), 32) != 0) {
    message =
        str("blob of another model: computed under model ", shortHex(f.model),
            ", this model's fingerprint is ", shortHex(id.model.data()));
    return KVRT_BLOCK_OTHER_MODEL;
  }
  if (f.dtype != uint32_t(id.dtype) || f.layers != uint32_t(id.layers) ||
      f.kvHeads != uint32_t(id.kvHeads) ||
      f.headSize != uint32_t(id.headSize) ||
      f.elementBytes != id.elementBytes()) {
    message = str("blob of another shape: ", f.layers, " x ", f.kvHeads, " x ",
                  f.headSize, " K/V of element type ", f.dtype, ", expected ",
                  id.layers, " x ", id.kvHeads, " x ", id.headSize, " of ",
                  int(id.dtype));
    return KVRT_BLOCK_MISMATCH;
  }
  if (f.base != id.base || f.tokens != id.tokens.size() ||
      std::memcmp(f.keyDigest, id.key.data(), 16) != 0) {
    message =
        str("blob of another block: ", f.tokens, " tokens at ", f.base,
            ", key ", shortHex(f.keyDigest), "; expected ", id.tokens.size(),
            " tokens at ", id.base, ", key ", shortHex(id.key.data()));
    return KVRT_BLOCK_MISMATCH;
  }
  uint64_t expected = id.blobBytes() - kBlobHeaderBytes;
  if (f.payloadBytes != expected) {
    message = str("blob header says ", f.payloadBytes,
                  " payload bytes, the block needs ", expected);
    return KVRT_BLOCK_MISMATCH;
  }
  if (blob.size() != kBlobHeaderBytes + f.payloadBytes) {
    message =
        str(blob.size() < kBlobHeaderBytes + f.payloadBytes ? "truncated blob: "
                                                            : "overlong blob: ",
            blob.size(), " bytes, its header says ",
            kBlobHeaderBytes + f.payloadBytes);
    return KVRT_BLOCK_TRUNCATED;
  }
  if (xxh64(b + kBlobHeaderBytes, f.payloadBytes) != f.payloadChecksum) {
    message = "corrupt blob: the payload checksum does not match";
    return KVRT_BLOCK_CORRUPT;
  }
  if (std::memcmp(b + kBlobHeaderBytes, id.tokens.data(),
                  id.tokens.size() * sizeof(int32_t)) != 0) {
    message = "blob of another block: its token ids differ";
    return KVRT_BLOCK_MISMATCH;
  }
  return KVRT_BLOCK_OK;
}

kvrt_status kvir::store::mapBlob(std::string_view blob, const BlockId &id,
                                 kvrt_pool *pool, const char *label,
                                 kvrt_view **out) {
  *out = nullptr;
  kvrt_page_layout layout;
  if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
    return s;
  if (layout.n_layers != id.layers || layout.n_kv_heads != id.kvHeads ||
      layout.head_size != id.headSize || layout.dtype != id.dtype)
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT,
                      str("the pool holds ", layout.n_layers, " x ",
                          layout.n_kv_heads, " x ", layout.head_size,
                          " K/V of ", kvir::kvDtypeName(layout.dtype),
                          ", the block ", id.layers, " x ", id.kvHeads, " x ",
                          id.headSize, " of ", kvir::kvDtypeName(id.dtype)));
  int64_t n = int64_t(id.tokens.size());
  int64_t nPages = (n + layout.page_tokens - 1) / layout.page_tokens;
  std::vector<int32_t> pages(nPages);
  if (kvrt_status s = kvrt_pool_alloc_pages(pool, nPages, pages.data()))
    return s;
  kvrt::PageRefs held{pool, pages};
  std::vector<unsigned char *> data(nPages);
  for (int64_t p = 0; p < nPages; ++p) {
    void *page = nullptr;
    if (kvrt_status s = kvrt_pool_page_bytes(pool, pages[p], &page))
      return s;
    data[p] = static_cast<unsigned char *>(page);
  }
  const unsigned char *kv = reinterpret_cast<const unsigned char *>(
      blob.data() + kBlobHeaderBytes + n * sizeof(int32_t));
  copyRun<false>(layout, 0, n, 0, n, const_cast<unsigned char *>(kv),
                 data.data());
  for (int32_t page : pages)
    if (kvrt_status s = kvrt_pool_seal_page(pool, page))
      return s;
  kvrt_view *empty = nullptr;
  if (kvrt_status s = kvrt_view_create(pool, &empty))
    return s;
  kvrt_run run{pages.data(), nPages, 0, n, id.base, 0, id.tokens.data(), label};
  kvrt_status s = kvrt_view_append(empty, &run, out);
  kvrt_view_release(empty);
  return s;
}
