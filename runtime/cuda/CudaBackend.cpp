//===- CudaBackend.cpp - The generated-code CUDA backend --------*- C++ -*-===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/core/Support.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/cuda/CudaRuntime.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

using namespace kvir;
using namespace kvir::cuda;
using cpu::memref1D;
using cpu::RunTable;
using kvrt::fail;
using kvrt::str;

namespace {

/// A device allocation that only grows.
struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { kvrt_cuda_free(ptr); }

  /// At least `need` bytes; the old contents are kept when `keep`.
  kvrt_status reserve(size_t need, bool keep = false) {
    if (need <= bytes && ptr)
      return KVRT_OK;
    size_t grown = std::max(need, bytes + bytes / 2);
    void *fresh = nullptr;
    if (kvrt_status s = kvrt_cuda_malloc(grown, &fresh))
      return s;
    if (keep && ptr)
      if (kvrt_status s = kvrt_cuda_copy(fresh, ptr, bytes)) {
        kvrt_cuda_free(fresh);
        return s;
      }
    kvrt_cuda_free(ptr);
    ptr = fresh;
    bytes = grown;
    return KVRT_OK;
  }

  template <typename T> kvrt_status upload(const std::vector<T> &host) {
    if (kvrt_status s = reserve(host.size() * sizeof(T)))
      return s;
    return kvrt_cuda_upload(ptr, host.data(), host.size() * sizeof(T));
  }

  template <typename T> MemRef<T, 1> ref1D(int64_t size) const {
    return memref1D(static_cast<T *>(ptr), size);
  }
};

/// The kernel library of one config.
struct Kernels {
  void *handle = nullptr;
  GpuPrefillFn prefill = nullptr;
  GpuAttentionFn attention = nullptr;
};

std::string executableDir() {
  char buf[4096];
  ssize_t len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (len <= 0)
    return "";
  std::string path(buf, len);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

/// Finds and opens the kernel library compiled for `key`.
kvrt_status openKernels(const std::string &key, Kernels *out) {
  std::vector<std::string> dirs = kernelSearchPath();
  for (const std::string &dir : dirs) {
    DIR *d = opendir(dir.c_str());
    if (!d)
      continue;
    std::vector<std::string> keys;
    while (dirent *e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 4 && name.rfind(".key") == name.size() - 4 &&
          name.rfind("libkvgpu_", 0) == 0)
        keys.push_back(name);
    }
    closedir(d);
    std::sort(keys.begin(), keys.end());
    for (const std::string &name : keys) {
      std::ifstream in(dir + "/" + name);
      std::string line;
      std::getline(in, line);
      if (line != key)
        continue;
      std::string lib = dir + "/" + name.substr(0, name.size() - 4) + ".so";
      // The library's constructor loads its cubin (mgpuModuleLoad): the
      // driver was checked before, so a failure is recorded, not a crash.
      void *handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char *why = dlerror();
        return fail(KVRT_ERR_UNAVAILABLE,
                    str("cannot open the GPU kernel library ", lib, ": ",
                        why ? why : "unknown reason"));
      }
      out->handle = handle;
      out->prefill = reinterpret_cast<GpuPrefillFn>(
          dlsym(handle, "_mlir_ciface_kvgpu_prefill"));
      out->attention = reinterpret_cast<GpuAttentionFn>(
          dlsym(handle, "_mlir_ciface_kvgpu_attention"));
      if (!out->prefill || !out->attention)
        return fail(KVRT_ERR_UNAVAILABLE,
                    str("the GPU kernel library ", lib,
                        " lacks _mlir_ciface_kvgpu_prefill/attention"));
      if (kvrt_status s = kvrt_cuda_check())
        return fail(s, str("loading the kernels of ", lib,
                           " failed: ", kvrt_last_error()));
      return KVRT_OK;
    }
  }
  std::string where;
  for (const std::string &dir : dirs)
    where += (where.empty() ? "" : ", ") + dir;
  return fail(KVRT_ERR_UNAVAILABLE,
              str("no GPU kernels for the model config [", key, "] (looked in ",
                  where.empty() ? "nothing" : where,
                  "); build them with kv-aot (docs/gpu-backend.md) or set "
                  "KVIR_GPU_KERNELS"));
}

/// A model's weights on the device, one buffer.
struct DeviceModel {
  kvrt_model *model = nullptr;
  kvrt_model_config config{};
  DeviceBuffer weights;
  /// Float offsets of each tensor in `weights`.
  int64_t off[11] = {};
  int64_t size[11] = {};
  std::shared_ptr<Kernels> kernels;
  ~DeviceModel() { kvrt_model_release(model); }
};

/// A pool's pages on the device, page p at p * page_stride.
struct DevicePool {
  kvrt_pool *pool = nullptr;
  kvrt_page_layout layout{};
  DeviceBuffer arena;
  int64_t pages = 0;
  /// Pages held on the device (the backend owns one reference to each).
  std::vector<uint8_t> held;
  ~DevicePool() {
    for (size_t p = 0; p < held.size(); ++p)
      if (held[p])
        kvrt_pool_release_page(pool, int32_t(p));
    kvrt_pool_release(pool);
  }

  kvrt_status cover(int64_t page) {
    if (page < pages)
      return KVRT_OK;
    int64_t want = std::min<int64_t>(layout.capacity_pages,
                                     std::max<int64_t>(page + 1, 2 * pages));
    if (kvrt_status s = arena.reserve(size_t(want) * layout.page_bytes,
                                      /*keep=*/true))
      return s;
    pages = int64_t(arena.bytes / layout.page_bytes);
    held.resize(pages, 0);
    return KVRT_OK;
  }

  /// Drops the pages only the backend still references.
  void sweep() {
    for (size_t p = 0; p < held.size(); ++p)
      if (held[p] && kvrt_pool_page_refcount(pool, int32_t(p)) == 1) {
        kvrt_pool_release_page(pool, int32_t(p));
        held[p] = 0;
      }
  }

  /// Makes sealed `page` resident (uploaded once, then held).
  kvrt_status ensure(int32_t page) {
    if (kvrt_status s = cover(page))
      return s;
    if (held[page])
      return KVRT_OK;
    const float *data = nullptr;
    if (kvrt_status s = kvrt_pool_page_cdata(pool, page, &data))
      return s;
    if (kvrt_status s = kvrt_cuda_upload(static_cast<char *>(arena.ptr) +
                                             int64_t(page) * layout.page_bytes,
                                         data, layout.page_bytes))
      return s;
    if (kvrt_status s = kvrt_pool_retain_page(pool, page))
      return s;
    held[page] = 1;
    return KVRT_OK;
  }
};

/// Holds one reference to each of a list of pages until destroyed.
struct PageRefs {
  kvrt_pool *pool;
  std::vector<int32_t> pages;
  ~PageRefs() {
    for (int32_t page : pages)
      kvrt_pool_release_page(pool, page);
  }
};

class CudaBackend final : public CudaComputeBackend {
public:
  const char *name() const override { return "cuda"; }

  kvrt_status prefill(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      const char *label, bool lastOnly,
                      std::vector<float> *logits, kvrt_view **out) override {
    if (!model || !view || !logits || !out)
      return kvrt::nullArgument("cuda prefill");
    *out = nullptr;
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s = prepare(model, tokens, n, pos, "prefill", &dm))
        return s;
      std::unique_ptr<PageRefs> pages;
      std::vector<float> result;
      if (kvrt_status s = run(*dm, view, tokens, n, pos, dm->config.n_layers,
                              lastOnly ? n - 1 : 0, &result, pages))
        return s;
      for (int32_t page : pages->pages)
        if (kvrt_status s = kvrt_pool_seal_page(pages->pool, page))
          return s;
      kvrt_run newRun{pages->pages.data(),
                      int64_t(pages->pages.size()),
                      0,
                      n,
                      pos,
                      0,
                      tokens,
                      label};
      if (kvrt_status s = kvrt_view_append(view, &newRun, out))
        return s;
      // The new pages are on the device already: hold them there.
      DevicePool &dp = *pools[kvrt_view_pool(view)];
      for (int32_t page : pages->pages)
        if (kvrt_pool_retain_page(dp.pool, page) == KVRT_OK)
          dp.held[page] = 1;
      *logits = std::move(result);
      return KVRT_OK;
    });
  }

  kvrt_status layerKV(const kvrt_model *model, const kvrt_view *view,
                      const int32_t *tokens, int64_t n, int64_t pos,
                      int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    if (!model || !view || !k || !v)
      return kvrt::nullArgument("cuda layerKV");
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s = prepare(model, tokens, n, pos, "layerKV", &dm))
        return s;
      if (layer < 0 || layer >= dm->config.n_layers)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("layerKV: layer ", layer, " is outside [0, ",
                        dm->config.n_layers, ")"));
      std::unique_ptr<PageRefs> pages;
      if (kvrt_status s =
              run(*dm, view, tokens, n, pos, layer + 1, n, nullptr, pages))
        return s;
      int64_t kvDim = int64_t(dm->config.n_kv_heads) *
                      (dm->config.dim / dm->config.n_heads);
      k->resize(n * kvDim);
      v->resize(n * kvDim);
      return kvrt_pool_read_kv(pages->pool, pages->pages.data(), 0, n, layer,
                               k->data(), v->data());
    });
  }

  kvrt_status timeAttention(const kvrt_model *model, const kvrt_view *view,
                            int64_t pos, int32_t layer, int iters,
                            double *seconds) override {
    if (!model || !view || !seconds)
      return kvrt::nullArgument("cuda timeAttention");
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      int32_t token = 0;
      DeviceModel *dm;
      if (kvrt_status s = prepare(model, &token, 1, pos, "attention", &dm))
        return s;
      const kvrt_model_config &c = dm->config;
      DevicePool *dp;
      RunTable table;
      if (kvrt_status s = residentTable(view, c, &dp, &table))
        return s;
      int64_t hs = c.dim / c.n_heads;
      std::vector<int64_t> tiles = buildTiles(table, 1, c.n_heads, hs);
      int64_t nTiles = int64_t(tiles.size()) / 4;
      std::vector<float> q(c.dim);
      for (int64_t i = 0; i < c.dim; ++i)
        q[i] = float((i * 37) % 17) / 17.0f - 0.5f;
      if (kvrt_status s = upload(table, tiles))
        return s;
      if (kvrt_status s = qBuf.upload(q))
        return s;
      if (kvrt_status s = partBuf.reserve(size_t(c.n_heads) * nTiles *
                                          (hs + 2) * sizeof(float)))
        return s;
      if (kvrt_status s = outBuf.reserve(size_t(c.dim) * sizeof(float)))
        return s;
      auto qr = qBuf.ref1D<float>(c.dim);
      auto kv = dp->arena.ref1D<float>(dp->pages * dp->layout.page_stride);
      auto pg = pagesBuf.ref1D<int32_t>(int64_t(table.pages.size()));
      MemRef<int64_t, 2> runs = rowsRef(table.numRuns());
      MemRef<int64_t, 2> tl = tilesRef(nTiles);
      auto part = partBuf.ref1D<float>(int64_t(c.n_heads) * nTiles * (hs + 2));
      auto outr = outBuf.ref1D<float>(c.dim);
      auto call = [&] {
        dm->kernels->attention(&qr, 0, 1, pos, &kv, &pg, &runs, &tl, nTiles,
                               layer, dp->layout.page_tokens, &part, &outr, 0);
      };
      call();
      if (kvrt_status s = kvrt_cuda_synchronize())
        return s;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i)
        call();
      if (kvrt_status s = kvrt_cuda_synchronize())
        return s;
      std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - start;
      *seconds = elapsed.count() / std::max(iters, 1);
      return KVRT_OK;
    });
  }

  /// Opens the driver and the kernels of `model`, uploads its weights.
  kvrt_status load(const kvrt_model *model) {
    std::lock_guard<std::mutex> lock(mutex);
    DeviceModel *dm;
    return deviceModel(model, &dm);
  }

private:
  kvrt_status deviceModel(const kvrt_model *model, DeviceModel **out) {
    auto it = models.find(model);
    if (it != models.end()) {
      *out = it->second.get();
      return KVRT_OK;
    }
    if (kvrt_status s = kvrt_cuda_init())
      return s;
    auto dm = std::make_unique<DeviceModel>();
    if (kvrt_status s = kvrt_model_get_config(model, &dm->config))
      return s;
    const kvrt_model_config &c = dm->config;
    std::string key = configKey(c);
    auto kit = kernelsByKey.find(key);
    if (kit == kernelsByKey.end()) {
      auto k = std::make_shared<Kernels>();
      if (kvrt_status s = openKernels(key, k.get()))
        return s;
      kit = kernelsByKey.emplace(key, std::move(k)).first;
    }
    dm->kernels = kit->second;
    kvrt_model_weights w;
    if (kvrt_status s = kvrt_model_get_weights(model, &w))
      return s;
    int64_t L = c.n_layers, D = c.dim, H = c.hidden_dim;
    int64_t KV = int64_t(c.n_kv_heads) * (c.dim / c.n_heads);
    const float *src[11] = {w.rms_att, w.wq,        w.wk,  w.wv,
                            w.wo,      w.rms_ffn,   w.w1,  w.w2,
                            w.w3,      w.rms_final, w.wcls};
    int64_t sizes[11] = {L * D,
                         L * D * D,
                         L * KV * D,
                         L * KV * D,
                         L * D * D,
                         L * D,
                         L * H * D,
                         L * D * H,
                         L * H * D,
                         D,
                         int64_t(c.vocab_size) * D};
    int64_t total = 0;
    for (int i = 0; i < 11; ++i) {
      dm->off[i] = total;
      dm->size[i] = sizes[i];
      // 64-byte aligned tensors.
      total += (sizes[i] + 15) / 16 * 16;
    }
    if (kvrt_status s = dm->weights.reserve(size_t(total) * sizeof(float)))
      return s;
    for (int i = 0; i < 11; ++i)
      if (kvrt_status s = kvrt_cuda_upload(
              static_cast<float *>(dm->weights.ptr) + dm->off[i], src[i],
              size_t(sizes[i]) * sizeof(float)))
        return s;
    kvrt_model_retain(const_cast<kvrt_model *>(model));
    dm->model = const_cast<kvrt_model *>(model);
    *out = dm.get();
    models.emplace(model, std::move(dm));
    return KVRT_OK;
  }

  kvrt_status prepare(const kvrt_model *model, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *what, DeviceModel **out) {
    if (kvrt_status s = deviceModel(model, out))
      return s;
    return kvrt::checkPrefillArguments((*out)->config, tokens, n, pos, what);
  }

  /// The device pool of `view` with every page of its runs resident, and
  /// the view's run table.
  kvrt_status residentTable(const kvrt_view *view, const kvrt_model_config &c,
                            DevicePool **out, RunTable *table) {
    kvrt_pool *pool = kvrt_view_pool(view);
    auto &slot = pools[pool];
    if (!slot) {
      slot = std::make_unique<DevicePool>();
      if (kvrt_status s = kvrt_pool_get_layout(pool, &slot->layout))
        return s;
      kvrt_pool_retain(pool);
      slot->pool = pool;
    }
    DevicePool &dp = *slot;
    int32_t headSize = c.dim / c.n_heads;
    if (dp.layout.n_layers != c.n_layers ||
        dp.layout.n_kv_heads != c.n_kv_heads || dp.layout.head_size != headSize)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("the view's pool holds ", dp.layout.n_layers,
                      " layers x ", dp.layout.n_kv_heads,
                      " kv heads x head size ", dp.layout.head_size,
                      ", the model needs ", c.n_layers, " x ", c.n_kv_heads,
                      " x ", headSize));
    dp.sweep();
    if (kvrt_status s = cpu::buildRunTable(view, table))
      return s;
    for (int32_t page : table->pages)
      if (kvrt_status s = dp.ensure(page))
        return s;
    *out = &dp;
    return KVRT_OK;
  }

  /// Run tiles: each run cut into tiles of at most `tile` keys, so that a
  /// few thousand blocks run (flash decoding for few queries) while the
  /// partials stay under 256 MiB.
  static std::vector<int64_t> buildTiles(const RunTable &table, int64_t n,
                                         int64_t heads, int64_t headSize) {
    int64_t total = 0, longest = 1;
    for (int64_t r = 0; r < table.numRuns(); ++r) {
      int64_t nt = table.rows[r * cpu::kRunWidth + cpu::kRunTokens];
      total += nt;
      longest = std::max(longest, nt);
    }
    int64_t target =
        std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * heads));
    int64_t tile = std::max<int64_t>(32, (total + target - 1) / target);
    auto count = [&](int64_t t) {
      int64_t c = 0;
      for (int64_t r = 0; r < table.numRuns(); ++r)
        c += std::max<int64_t>(
            1, (table.rows[r * cpu::kRunWidth + cpu::kRunTokens] + t - 1) / t);
      return c;
    };
    const int64_t budget = int64_t(256) << 20;
    while (tile < longest &&
           n * heads * count(tile) * (headSize + 2) * 4 > budget)
      tile *= 2;
    std::vector<int64_t> tiles;
    for (int64_t r = 0; r < table.numRuns(); ++r) {
      int64_t nt = table.rows[r * cpu::kRunWidth + cpu::kRunTokens];
      for (int64_t b = 0; b == 0 || b < nt; b += tile) {
        int64_t row[4] = {r, b, std::min(b + tile, nt), 0};
        tiles.insert(tiles.end(), row, row + 4);
      }
    }
    return tiles;
  }

  kvrt_status upload(RunTable &table, const std::vector<int64_t> &tiles) {
    if (kvrt_status s = pagesBuf.upload(table.pages))
      return s;
    if (kvrt_status s = runsBuf.upload(table.rows))
      return s;
    return tilesBuf.upload(tiles);
  }

  MemRef<int64_t, 2> rowsRef(int64_t nRuns) const {
    auto *p = static_cast<int64_t *>(runsBuf.ptr);
    return {p, p, 0, {nRuns, cpu::kRunWidth}, {cpu::kRunWidth, 1}};
  }
  MemRef<int64_t, 2> tilesRef(int64_t nTiles) const {
    auto *p = static_cast<int64_t *>(tilesBuf.ptr);
    return {p, p, 0, {nTiles, 4}, {4, 1}};
  }

  /// Layers 0 .. nLayers-1 of the forward of the tokens over `view` into
  /// fresh pages (returned in `pages`, not sealed, copied back to the host),
  /// and the logits of positions logitsFrom .. n-1 into `logits`.
  kvrt_status run(DeviceModel &dm, const kvrt_view *view, const int32_t *tokens,
                  int64_t n, int64_t pos, int64_t nLayers, int64_t logitsFrom,
                  std::vector<float> *logits,
                  std::unique_ptr<PageRefs> &pages) {
    const kvrt_model_config &c = dm.config;
    DevicePool *dp;
    RunTable table;
    if (kvrt_status s = residentTable(view, c, &dp, &table))
      return s;
    const kvrt_page_layout &layout = dp->layout;
    int64_t nPages = (n + layout.page_tokens - 1) / layout.page_tokens;
    std::vector<int32_t> fresh(nPages);
    if (kvrt_status s = kvrt_pool_alloc_pages(dp->pool, nPages, fresh.data()))
      return s;
    pages.reset(new PageRefs{dp->pool, std::move(fresh)});
    for (int32_t page : pages->pages)
      if (kvrt_status s = dp->cover(page))
        return s;
    table.append(pages->pages.data(), nPages, 0, n, pos, 0);

    int64_t hs = c.dim / c.n_heads;
    int64_t D = c.dim, H = c.hidden_dim, V = c.vocab_size;
    int64_t KV = int64_t(c.n_kv_heads) * hs;
    std::vector<int64_t> tiles = buildTiles(table, n, c.n_heads, hs);
    int64_t nTiles = int64_t(tiles.size()) / 4;
    kvrt_model_weights w;
    if (kvrt_status s = kvrt_model_get_weights(dm.model, &w))
      return s;
    std::vector<float> x(n * D);
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&x[t * D], w.token_embedding + int64_t(tokens[t]) * D,
                  sizeof(float) * D);
    int64_t nLogits = (n - logitsFrom) * V;
    if (kvrt_status s = upload(table, tiles))
      return s;
    if (kvrt_status s = xBuf.upload(x))
      return s;
    if (kvrt_status s = scratchBuf.reserve(
            size_t(n) * (3 * D + 2 * KV + 2 * H) * sizeof(float)))
      return s;
    if (kvrt_status s = partBuf.reserve(size_t(n) * c.n_heads * nTiles *
                                        (hs + 2) * sizeof(float)))
      return s;
    if (kvrt_status s =
            logitsBuf.reserve(size_t(std::max<int64_t>(nLogits, 1)) * 4))
      return s;

    auto wt = [&](int i) {
      float *base = static_cast<float *>(dm.weights.ptr) + dm.off[i];
      return memref1D(base, dm.size[i]);
    };
    auto xr = xBuf.ref1D<float>(n * D);
    auto rmsAtt = wt(0), wq = wt(1), wk = wt(2), wv = wt(3), wo = wt(4),
         rmsFfn = wt(5), w1 = wt(6), w2 = wt(7), w3 = wt(8), rmsFinal = wt(9),
         wcls = wt(10);
    auto kv = dp->arena.ref1D<float>(dp->pages * layout.page_stride);
    auto pg = pagesBuf.ref1D<int32_t>(int64_t(table.pages.size()));
    MemRef<int64_t, 2> runs = rowsRef(table.numRuns());
    MemRef<int64_t, 2> tl = tilesRef(nTiles);
    auto lg = logitsBuf.ref1D<float>(std::max<int64_t>(nLogits, 1));
    auto scratch = scratchBuf.ref1D<float>(n * (3 * D + 2 * KV + 2 * H));
    auto part = partBuf.ref1D<float>(n * c.n_heads * nTiles * (hs + 2));
    dm.kernels->prefill(&xr, &rmsAtt, &wq, &wk, &wv, &wo, &rmsFfn, &w1, &w2,
                        &w3, &rmsFinal, &wcls, &kv, &pg, &runs, &tl, nTiles,
                        layout.page_tokens, pos, n, nLayers, logitsFrom, &lg,
                        &scratch, &part);
    if (kvrt_status s = kvrt_cuda_synchronize())
      return fail(s, str("the GPU prefill of ", n,
                         " tokens failed: ", kvrt_last_error()));
    // The new pages back to the host, which stays the source of truth.
    for (int32_t page : pages->pages) {
      float *host = nullptr;
      if (kvrt_status s = kvrt_pool_page_data(dp->pool, page, &host))
        return s;
      if (kvrt_status s =
              kvrt_cuda_download(host,
                                 static_cast<char *>(dp->arena.ptr) +
                                     int64_t(page) * layout.page_bytes,
                                 layout.page_bytes))
        return s;
    }
    if (logits) {
      logits->resize(nLogits);
      if (kvrt_status s = kvrt_cuda_download(logits->data(), logitsBuf.ptr,
                                             size_t(nLogits) * sizeof(float)))
        return s;
    }
    return KVRT_OK;
  }

  std::mutex mutex;
  std::map<const kvrt_model *, std::unique_ptr<DeviceModel>> models;
  std::map<std::string, std::shared_ptr<Kernels>> kernelsByKey;
  std::map<kvrt_pool *, std::unique_ptr<DevicePool>> pools;
  DeviceBuffer xBuf, scratchBuf, partBuf, logitsBuf, pagesBuf, runsBuf,
      tilesBuf, qBuf, outBuf;
};

} // namespace

std::vector<std::string> kvir::cuda::kernelSearchPath() {
  std::vector<std::string> dirs;
  if (const char *env = std::getenv("KVIR_GPU_KERNELS"); env && *env)
    dirs.push_back(env);
  std::string exe = executableDir();
  if (!exe.empty())
    dirs.push_back(exe + "/../lib/kvir-gpu");
  return dirs;
}

std::unique_ptr<ComputeBackend>
kvir::cuda::createCudaBackend(const kvrt_model *model, std::string *error) {
  auto backend = std::make_unique<CudaBackend>();
  if (!model) {
    if (error)
      *error = "createCudaBackend: no model";
    return nullptr;
  }
  if (backend->load(model) != KVRT_OK) {
    if (error)
      *error = kvrt_last_error();
    return nullptr;
  }
  return backend;
}
