//===- BlockBlob.cpp - Keys and blobs of prefilled blocks -------*- C++ -*-===//

#include "runtime/store/BlockBlob.h"

#include "runtime/store/BlobFormat.h"

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

void writeHeader(uint8_t *h, const HeaderFields &f) {
  std::memset(h, 0, kBlobHeaderBytes);
  std::memcpy(h, kMagic, 8);
  putField(h + 8, f.format);
  putField(h + 12, f.headerBytes);
  putField(h + 16, f.layout);
  putField(h + 20, f.dtype);
  putField(h + 24, f.layers);
  putField(h + 28, f.kvHeads);
  putField(h + 32, f.headSize);
  putField(h + 36, f.elementBytes);
  putField(h + 40, f.base);
  putField(h + 48, f.tokens);
  putField(h + 56, f.payloadBytes);
  std::memcpy(h + 64, f.model, 32);
  std::memcpy(h + 96, f.keyDigest, 16);
  putField(h + 112, f.payloadChecksum);
  putField(h + 120, xxh64(h, 120));
}

HeaderFields readHeader(const uint8_t *h) {
  HeaderFields f;
  f.format = getField<uint32_t>(h + 8);
  f.headerBytes = getField<uint32_t>(h + 12);
  f.layout = getField<uint32_t>(h + 16);
  f.dtype = getField<uint32_t>(h + 20);
  f.layers = getField<uint32_t>(h + 24);
  f.kvHeads = getField<uint32_t>(h + 28);
  f.headSize = getField<uint32_t>(h + 32);
  f.elementBytes = getField<uint32_t>(h + 36);
  f.base = getField<int64_t>(h + 40);
  f.tokens = getField<uint64_t>(h + 48);
  f.payloadBytes = getField<uint64_t>(h + 56);
  std::memcpy(f.model, h + 64, 32);
  std::memcpy(f.keyDigest, h + 96, 16);
  f.payloadChecksum = getField<uint64_t>(h + 112);
  f.headerChecksum = getField<uint64_t>(h + 120);
  return f;
}

} // namespace

//===----------------------------------------------------------------------===//
// What blobs share (BlobFormat.h)
//===----------------------------------------------------------------------===//

namespace {

/// Copies the K/V of `n` tokens between pages and a K/V section, in either
/// direction: the pages (their bytes in `pageData`) hold them from slot
/// `slotBegin` of the first; the section is [layers][kv_heads][2][total]
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

std::string kvir::store::shortHex(const uint8_t *digest) {
  return toHex(digest, 8) + "...";
}

std::string kvir::store::describeShapeMismatch(const kvrt_page_layout &layout,
                                               const char *what, int32_t layers,
                                               int32_t kvHeads,
                                               int32_t headSize,
                                               kvrt_kv_dtype dtype) {
  if (layout.n_layers == layers && layout.n_kv_heads == kvHeads &&
      layout.head_size == headSize && layout.dtype == dtype)
    return "";
  return str("the pool holds ", layout.n_layers, " x ", layout.n_kv_heads,
             " x ", layout.head_size, " K/V of ",
             kvir::kvDtypeName(layout.dtype), ", the ", what, " ", layers,
             " x ", kvHeads, " x ", headSize, " of ", kvir::kvDtypeName(dtype));
}

kvrt_block_fault kvir::store::checkBlobPrologue(std::string_view blob,
                                                const BlobPrologue &e,
                                                std::string &message) {
  const uint8_t *b = reinterpret_cast<const uint8_t *>(blob.data());
  if (blob.size() < e.headerBytes) {
    message = str("truncated blob: ", blob.size(), " bytes, shorter than the ",
                  e.headerBytes, "-byte header");
    return KVRT_BLOCK_TRUNCATED;
  }
  if (std::memcmp(b, e.magic, 8) != 0) {
    message = str("corrupt blob: not a KVIR ", e.kind, " (bad magic)");
    return KVRT_BLOCK_CORRUPT;
  }
  if (xxh64(b, 120) != getField<uint64_t>(b + 120)) {
    message = "corrupt blob: the header checksum does not match";
    return KVRT_BLOCK_CORRUPT;
  }
  uint32_t format = getField<uint32_t>(b + 8),
           headerBytes = getField<uint32_t>(b + 12),
           layout = getField<uint32_t>(b + 16);
  if (format != e.format || headerBytes != e.headerBytes ||
      layout != KVRT_BLOCK_LAYOUT_VERSION) {
    message = str(e.noun, " of format ", format, " / layout ", layout,
                  ", this runtime reads format ", e.format, " / layout ",
                  KVRT_BLOCK_LAYOUT_VERSION);
    return KVRT_BLOCK_MISMATCH;
  }
  if (std::memcmp(b + e.modelOffset, e.model, 32) != 0) {
    message = str("blob of another model: computed under model ",
                  shortHex(b + e.modelOffset), ", this model's fingerprint is ",
                  shortHex(e.model));
    return KVRT_BLOCK_OTHER_MODEL;
  }
  uint32_t dtype = getField<uint32_t>(b + 20),
           layers = getField<uint32_t>(b + 24),
           kvHeads = getField<uint32_t>(b + 28),
           headSize = getField<uint32_t>(b + 32),
           elementBytes = getField<uint32_t>(b + 36);
  if (dtype != uint32_t(e.dtype) || layers != uint32_t(e.layers) ||
      kvHeads != uint32_t(e.kvHeads) || headSize != uint32_t(e.headSize) ||
      elementBytes != uint32_t(kvir::kvDtypeBytes(e.dtype))) {
    message =
        str("blob of another shape: ", layers, " x ", kvHeads, " x ", headSize,
            " K/V of element type ", dtype, ", expected ", e.layers, " x ",
            e.kvHeads, " x ", e.headSize, " of ", int(e.dtype));
    return KVRT_BLOCK_MISMATCH;
  }
  return KVRT_BLOCK_OK;
}

bool kvir::store::viewPoolOfShape(const kvrt_view *view, const char *what,
                                  int32_t layers, int32_t kvHeads,
                                  int32_t headSize, kvrt_kv_dtype dtype,
                                  kvrt_pool *&pool, kvrt_page_layout &layout,
                                  std::string &error) {
  pool = kvrt_view_pool(view);
  if (!pool || kvrt_pool_get_layout(pool, &layout) != KVRT_OK) {
    error = "the view has no pool";
    return false;
  }
  error = describeShapeMismatch(layout, what, layers, kvHeads, headSize, dtype);
  return error.empty();
}

uint64_t kvir::store::kvSectionBytes(const kvrt_page_layout &layout,
                                     uint64_t tokens) {
  return uint64_t(layout.n_layers) * uint64_t(layout.n_kv_heads) * 2 * tokens *
         uint64_t(layout.head_size) *
         uint64_t(kvir::kvDtypeBytes(layout.dtype));
}

bool kvir::store::copyRunToSection(kvrt_pool *pool,
                                   const kvrt_page_layout &layout,
                                   const kvrt_run &run, int64_t first,
                                   int64_t total, unsigned char *section,
                                   std::string &error) {
  std::vector<unsigned char *> data(run.n_pages);
  for (int64_t p = 0; p < run.n_pages; ++p) {
    const void *page = nullptr;
    if (kvrt_pool_page_cbytes(pool, run.pages[p], &page) != KVRT_OK) {
      error = kvrt_last_error();
      return false;
    }
    data[p] = static_cast<unsigned char *>(const_cast<void *>(page));
  }
  copyRun<true>(layout, run.slot_begin, run.n_tokens, first, total, section,
                data.data());
  return true;
}

kvrt_status kvir::store::writeSectionToPages(
    kvrt_pool *pool, const kvrt_page_layout &layout, int64_t n, int64_t first,
    int64_t total, const unsigned char *section, std::vector<int32_t> &pages) {
  int64_t nPages = (n + layout.page_tokens - 1) / layout.page_tokens;
  std::vector<int32_t> fresh(nPages);
  if (kvrt_status s = kvrt_pool_alloc_pages(pool, nPages, fresh.data()))
    return s;
  kvrt::PageRefs held{pool, fresh};
  std::vector<unsigned char *> data(nPages);
  for (int64_t p = 0; p < nPages; ++p) {
    void *page = nullptr;
    if (kvrt_status s = kvrt_pool_page_bytes(pool, fresh[p], &page))
      return s;
    data[p] = static_cast<unsigned char *>(page);
  }
  copyRun<false>(layout, 0, n, first, total,
                 const_cast<unsigned char *>(section), data.data());
  for (int32_t page : fresh)
    if (kvrt_status s = kvrt_pool_seal_page(pool, page))
      return s;
  // The caller takes the references over.
  held.pages.clear();
  pages = std::move(fresh);
  return KVRT_OK;
}

//===----------------------------------------------------------------------===//
// Blocks
//===----------------------------------------------------------------------===//

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
  kvrt_pool *pool = nullptr;
  if (!viewPoolOfShape(view, "block", id.layers, id.kvHeads, id.headSize,
                       id.dtype, pool, layout, error))
    return false;
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
    if (!copyRunToSection(pool, layout, run, done, n, kv, error))
      return false;
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
  BlobPrologue prologue{kMagic,
                        "block",
                        "blob",
                        KVRT_BLOCK_FORMAT_VERSION,
                        uint32_t(kBlobHeaderBytes),
                        64,
                        id.model.data(),
                        id.layers,
                        id.kvHeads,
                        id.headSize,
                        id.dtype};
  if (kvrt_block_fault fault = checkBlobPrologue(blob, prologue, message))
    return fault;
  const uint8_t *b = reinterpret_cast<const uint8_t *>(blob.data());
  HeaderFields f = readHeader(b);
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
  std::string shape = describeShapeMismatch(layout, "block", id.layers,
                                            id.kvHeads, id.headSize, id.dtype);
  if (!shape.empty())
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT, shape);
  int64_t n = int64_t(id.tokens.size());
  const unsigned char *kv = reinterpret_cast<const unsigned char *>(
      blob.data() + kBlobHeaderBytes + n * sizeof(int32_t));
  std::vector<int32_t> pages;
  if (kvrt_status s = writeSectionToPages(pool, layout, n, 0, n, kv, pages))
    return s;
  kvrt::PageRefs held{pool, pages};
  int64_t nPages = int64_t(pages.size());
  kvrt_view *empty = nullptr;
  if (kvrt_status s = kvrt_view_create(pool, &empty))
    return s;
  kvrt_run run{pages.data(), nPages, 0, n, id.base, 0, id.tokens.data(), label};
  kvrt_status s = kvrt_view_append(empty, &run, out);
  kvrt_view_release(empty);
  return s;
}
