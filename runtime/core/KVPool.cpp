//===- KVPool.cpp - The paged KV pool ---------------------------*- C++ -*-===//

#include "runtime/core/KVPool.h"
#include "runtime/core/HugePages.h"
#include "runtime/core/KVElement.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cstdlib>
#include <cstring>
#include <limits>

using namespace kvrt;

namespace {

constexpr size_t kArenaAlignment = 64;

/// The body of a page operation of C entry point `function`: runs `body`
/// under the pool lock once `pool` is non-NULL, `hasOut` (the out pointer,
/// if any, is non-NULL) holds and `page` is in use.
template <typename Pool, typename Body>
kvrt_status onPage(Pool *pool, int32_t page, bool hasOut, const char *function,
                   Body &&body) {
  if (!pool || !hasOut)
    return nullArgument(function);
  std::lock_guard<std::mutex> lock(pool->mutex);
  if (!pool->inUse(page))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str(function, ": page ", page,
                    " is not an allocated page (pool of ",
                    pool->config.capacity_pages, " pages)"));
  return body();
}

/// The exhaustion message for a request of `count` pages.
kvrt_status exhausted(const kvrt_pool &pool, int64_t count) {
  return fail(KVRT_ERR_POOL_EXHAUSTED,
              str("kv pool exhausted: need ", count, " pages, ",
                  pool.freeList.size(), " of ", pool.config.capacity_pages,
                  " free (", pool.layout.page_bytes, " bytes per page)"));
}

/// Fails unless the pages of `pool` are f32: `function` hands out float
/// pointers.
kvrt_status requireF32(const kvrt_pool &pool, const char *function) {
  if (pool.layout.dtype == KVRT_KV_F32)
    return KVRT_OK;
  return fail(KVRT_ERR_INVALID_ARGUMENT,
              str(function, ": the pool's pages are ",
                  kvir::kvDtypeName(pool.layout.dtype),
                  ", not f32; address them through kvrt_pool_get_layout"));
}

} // namespace

kvrt_pool::kvrt_pool(const kvrt_pool_config &config, unsigned char *arena)
    : config(config), arena(arena) {
  layout.base = arena;
  layout.n_layers = config.n_layers;
  layout.n_kv_heads = config.n_kv_heads;
  layout.head_size = config.head_size;
  layout.page_tokens = config.page_tokens;
  layout.capacity_pages = config.capacity_pages;
  layout.token_stride = config.head_size;
  layout.kv_stride = int64_t(config.page_tokens) * config.head_size;
  layout.head_stride = 2 * layout.kv_stride;
  layout.layer_stride = config.n_kv_heads * layout.head_stride;
  layout.page_stride = config.n_layers * layout.layer_stride;
  layout.dtype = config.dtype;
  layout.element_bytes = int32_t(kvir::kvDtypeBytes(config.dtype));
  layout.page_bytes = layout.page_stride * layout.element_bytes;
  refcount.assign(config.capacity_pages, 0);
  sealed.assign(config.capacity_pages, 0);
  freeList.reserve(config.capacity_pages);
  for (int64_t p = config.capacity_pages; p > 0; --p)
    freeList.push_back(static_cast<int32_t>(p - 1));
}

kvrt_pool::~kvrt_pool() { std::free(arena); }

bool kvrt_pool::inUse(int32_t page) const {
  return page >= 0 && page < config.capacity_pages && refcount[page] > 0;
}

void kvrt_pool::retainRuns(const std::vector<Run> &runs) {
  for (const Run &run : runs)
    for (int32_t page : run.pages)
      ++refcount[page];
}

void kvrt_pool::releaseRuns(const std::vector<Run> &runs) {
  for (const Run &run : runs)
    for (int32_t page : run.pages)
      releasePage(page);
}

void kvrt_pool::releasePage(int32_t page) {
  if (--refcount[page] != 0)
    return;
  sealed[page] = 0;
  freeList.push_back(page);
  --pagesInUse;
}

void kvrt_pool::allocate(int64_t count, int32_t *pages) {
  for (int64_t i = 0; i < count; ++i) {
    int32_t page = freeList.back();
    freeList.pop_back();
    refcount[page] = 1;
    sealed[page] = 0;
    std::memset(pageAddress(page), 0, layout.page_bytes);
    pages[i] = page;
  }
  pagesInUse += count;
  if (pagesInUse > peakPages)
    peakPages = pagesInUse;
}

extern "C" kvrt_status kvrt_pool_config_for_model(const kvrt_model *model,
                                                  kvrt_pool_config *out) {
  if (!model || !out)
    return nullArgument(__func__);
  const kvrt_model_config &c = model->config;
  out->n_layers = c.n_layers;
  out->n_kv_heads = c.n_kv_heads;
  out->head_size = c.dim / c.n_heads;
  out->page_tokens = 16;
  out->capacity_pages = 4 * ((int64_t(c.seq_len) + 15) / 16);
  out->dtype = KVRT_KV_F32;
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_pool_create(const kvrt_pool_config *config,
                                        kvrt_pool **out) {
  if (!config || !out)
    return nullArgument(__func__);
  *out = nullptr;
  const kvrt_pool_config &c = *config;
  struct Field {
    const char *name;
    int64_t value;
  };
  for (Field f :
       {Field{"n_layers", c.n_layers}, Field{"n_kv_heads", c.n_kv_heads},
        Field{"head_size", c.head_size}, Field{"page_tokens", c.page_tokens},
        Field{"capacity_pages", c.capacity_pages}})
    if (f.value <= 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("invalid pool config: ", f.name, " = ", f.value,
                      " must be positive"));
  if (c.capacity_pages > std::numeric_limits<int32_t>::max())
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("invalid pool config: capacity_pages = ", c.capacity_pages,
                    " exceeds INT32_MAX"));
  if (std::string why = kvir::describeKvDtypeError(c.dtype); !why.empty())
    return fail(KVRT_ERR_INVALID_ARGUMENT, "invalid pool config: " + why);
  uint64_t bytes = uint64_t(kvir::kvDtypeBytes(c.dtype));
  bool overflow = false;
  for (uint64_t factor : {uint64_t(c.n_layers), uint64_t(c.n_kv_heads),
                          uint64_t(2), uint64_t(c.page_tokens),
                          uint64_t(c.head_size), uint64_t(c.capacity_pages)})
    overflow |= __builtin_mul_overflow(bytes, factor, &bytes);
  if (overflow || bytes > (uint64_t(1) << 48))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "invalid pool config: the arena would exceed 2^48 bytes");
  return guard([&] {
    // Attention walks the whole arena: on 4 KiB pages every page of K/V
    // costs a TLB miss (HugePages.h).
    auto *arena = static_cast<unsigned char *>(
        allocateStreamed(size_t(bytes), kArenaAlignment));
    if (!arena)
      return fail(KVRT_ERR_OUT_OF_MEMORY,
                  str("cannot reserve a kv pool arena of ", bytes, " bytes"));
    *out = new kvrt_pool(c, arena);
    return KVRT_OK;
  });
}

extern "C" void kvrt_pool_retain(kvrt_pool *pool) { retain(pool); }

extern "C" void kvrt_pool_release(kvrt_pool *pool) { release(pool); }

extern "C" kvrt_status kvrt_pool_get_layout(const kvrt_pool *pool,
                                            kvrt_page_layout *out) {
  if (!pool || !out)
    return nullArgument(__func__);
  *out = pool->layout;
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_pool_get_stats(const kvrt_pool *pool,
                                           kvrt_pool_stats *out) {
  if (!pool || !out)
    return nullArgument(__func__);
  std::lock_guard<std::mutex> lock(pool->mutex);
  out->pages_in_use = pool->pagesInUse;
  out->peak_pages = pool->peakPages;
  out->capacity_pages = pool->config.capacity_pages;
  out->page_bytes = pool->layout.page_bytes;
  out->bytes_in_use = pool->pagesInUse * pool->layout.page_bytes;
  out->peak_bytes = pool->peakPages * pool->layout.page_bytes;
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_pool_alloc_pages(kvrt_pool *pool, int64_t count,
                                             int32_t *pages) {
  if (!pool || (!pages && count > 0) || count < 0)
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("kvrt_pool_alloc_pages: invalid arguments (count ", count, ")"));
  std::lock_guard<std::mutex> lock(pool->mutex);
  if (count > static_cast<int64_t>(pool->freeList.size()))
    return exhausted(*pool, count);
  if (kvrt_status s =
          allocationFault(KVRT_FAULT_PAGES, "kvrt_pool_alloc_pages"))
    return s;
  pool->allocate(count, pages);
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_pool_retain_page(kvrt_pool *pool, int32_t page) {
  return onPage(pool, page, true, __func__, [&] {
    ++pool->refcount[page];
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_release_page(kvrt_pool *pool, int32_t page) {
  return onPage(pool, page, true, __func__, [&] {
    pool->releasePage(page);
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_seal_page(kvrt_pool *pool, int32_t page) {
  return onPage(pool, page, true, __func__, [&] {
    pool->sealed[page] = 1;
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_page_data(kvrt_pool *pool, int32_t page,
                                           float **out) {
  return onPage(pool, page, out != nullptr, __func__, [&] {
    if (kvrt_status s = requireF32(*pool, "kvrt_pool_page_data"))
      return s;
    if (pool->sealed[page])
      return fail(KVRT_ERR_STATE,
                  str("kvrt_pool_page_data: page ", page,
                      " is sealed (immutable); use kvrt_pool_cow for a copy"));
    *out = reinterpret_cast<float *>(pool->pageAddress(page));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_page_cdata(const kvrt_pool *pool, int32_t page,
                                            const float **out) {
  return onPage(pool, page, out != nullptr, __func__, [&] {
    if (kvrt_status s = requireF32(*pool, "kvrt_pool_page_cdata"))
      return s;
    *out = reinterpret_cast<const float *>(pool->pageAddress(page));
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_page_bytes(kvrt_pool *pool, int32_t page,
                                            void **out) {
  return onPage(pool, page, out != nullptr, __func__, [&] {
    if (pool->sealed[page])
      return fail(KVRT_ERR_STATE,
                  str("kvrt_pool_page_bytes: page ", page,
                      " is sealed (immutable); use kvrt_pool_cow for a copy"));
    *out = pool->pageAddress(page);
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_page_cbytes(const kvrt_pool *pool,
                                             int32_t page, const void **out) {
  return onPage(pool, page, out != nullptr, __func__, [&] {
    *out = pool->pageAddress(page);
    return KVRT_OK;
  });
}

extern "C" kvrt_status kvrt_pool_read_kv(const kvrt_pool *pool,
                                         const int32_t *pages,
                                         int64_t slot_begin, int64_t n,
                                         int32_t layer, float *k, float *v) {
  if (!pool || !pages || !k || !v)
    return kvrt::nullArgument(__func__);
  const kvrt_page_layout &layout = pool->layout;
  if (layer < 0 || layer >= layout.n_layers || n < 0 || slot_begin < 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("kvrt_pool_read_kv: layer ", layer, " of ", layout.n_layers,
                    ", ", n, " slots from ", slot_begin));
  int64_t headSize = layout.head_size;
  std::lock_guard<std::mutex> lock(pool->mutex);
  for (int64_t j = 0; j < n; ++j) {
    int64_t slot = slot_begin + j;
    int32_t page = pages[slot / layout.page_tokens];
    if (!pool->inUse(page))
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("kvrt_pool_read_kv: page ", page,
                      " is not an allocated page (pool of ",
                      pool->config.capacity_pages, " pages)"));
    const unsigned char *data = pool->pageAddress(page);
    for (int32_t g = 0; g < layout.n_kv_heads; ++g) {
      int64_t head = layer * layout.layer_stride + g * layout.head_stride +
                     (slot % layout.page_tokens) * headSize;
      float *kDst = k + (j * layout.n_kv_heads + g) * headSize;
      float *vDst = v + (j * layout.n_kv_heads + g) * headSize;
      for (int64_t d = 0; d < headSize; ++d) {
        kDst[d] = loadElement(data, head + d, layout.dtype);
        vDst[d] = loadElement(data, head + layout.kv_stride + d, layout.dtype);
      }
    }
  }
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_pool_cow(kvrt_pool *pool, int32_t page,
                                     int32_t *out) {
  return onPage(pool, page, out != nullptr, __func__, [&] {
    if (!pool->sealed[page] && pool->refcount[page] == 1) {
      *out = page;
      return KVRT_OK;
    }
    if (pool->freeList.empty())
      return exhausted(*pool, 1);
    if (kvrt_status s = allocationFault(KVRT_FAULT_PAGES, "kvrt_pool_cow"))
      return s;
    int32_t copy;
    pool->allocate(1, &copy);
    std::memcpy(pool->pageAddress(copy), pool->pageAddress(page),
                pool->layout.page_bytes);
    pool->releasePage(page);
    *out = copy;
    return KVRT_OK;
  });
}

extern "C" int64_t kvrt_pool_page_refcount(const kvrt_pool *pool,
                                           int32_t page) {
  if (!pool || page < 0 || page >= pool->config.capacity_pages)
    return -1;
  std::lock_guard<std::mutex> lock(pool->mutex);
  return pool->refcount[page];
}

extern "C" int32_t kvrt_pool_page_is_sealed(const kvrt_pool *pool,
                                            int32_t page) {
  if (!pool)
    return 0;
  std::lock_guard<std::mutex> lock(pool->mutex);
  return pool->inUse(page) && pool->sealed[page] ? 1 : 0;
}
