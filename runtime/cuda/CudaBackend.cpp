//===- CudaBackend.cpp - The generated-code CUDA backend --------*- C++ -*-===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/core/ViewRebuild.h"
#include "runtime/cuda/CudaRuntime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

using namespace kvir;
using namespace kvir::cuda;
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

  kvrt_memref_f32 f32(int64_t size) const {
    return memrefF32(static_cast<float *>(ptr), size);
  }
  kvrt_memref_kv kv(int64_t size) const { return memrefKV(ptr, size); }
  kvrt_memref_i32 i32(int64_t size) const {
    return memrefI32(static_cast<int32_t *>(ptr), size);
  }
  kvrt_memref_i64x2 table(int64_t rows, int64_t columns) const {
    return memrefTable(static_cast<int64_t *>(ptr), rows, columns);
  }
};

/// A model's weights on the device, one buffer.
struct DeviceModel {
  kvrt_model *model = nullptr;
  kvrt_model_config config{};
  DeviceBuffer weights;
  /// Where the slices of the weights the forward reads are in `weights`.
  WeightUpload upload;
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
    // page_bytes is page_stride elements of the pool's type (f32, f16, bf16).
    const void *data = nullptr;
    if (kvrt_status s = kvrt_pool_page_cbytes(pool, page, &data))
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

class CudaBackend final : public CudaComputeBackend {
public:
  const char *name() const override { return "cuda"; }
  bool runsGeneratedCode() const override { return true; }

  kvrt_status prefill(const Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, const char *label, LogitRows rows,
                      std::vector<float> *logits, kvrt_view **out) override {
    if (!model || !view || !out)
      return kvrt::nullArgument("cuda prefill");
    *out = nullptr;
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s =
              preparePrefill(forward, model, tokens, n, pos, "prefill", &dm))
        return s;
      std::unique_ptr<kvrt::PageRefs> pages;
      std::vector<float> result;
      if (kvrt_status s =
              run(forward, *dm, view, tokens, n, pos, dm->config.n_layers,
                  logitsFrom(n, rows, logits), &result, pages))
        return s;
      if (kvrt_status s =
              kvrt::appendPrefilled(view, *pages, tokens, n, pos, label, out))
        return s;
      holdWritten(kvrt_view_pool(view), pages->pages);
      if (logits)
        *logits = std::move(result);
      return KVRT_OK;
    });
  }

  kvrt_status layerKV(const Forward &forward, const kvrt_model *model,
                      const kvrt_view *view, const int32_t *tokens, int64_t n,
                      int64_t pos, int32_t layer, std::vector<float> *k,
                      std::vector<float> *v) override {
    if (!model || !view || !k || !v)
      return kvrt::nullArgument("cuda layerKV");
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s =
              preparePrefill(forward, model, tokens, n, pos, "layerKV", &dm))
        return s;
      if (layer < 0 || layer >= dm->config.n_layers)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("layerKV: layer ", layer, " is outside [0, ",
                        dm->config.n_layers, ")"));
      std::unique_ptr<kvrt::PageRefs> pages;
      if (kvrt_status s = run(forward, *dm, view, tokens, n, pos, layer + 1, n,
                              nullptr, pages))
        return s;
      k->resize(n * kvDim(dm->config));
      v->resize(n * kvDim(dm->config));
      return kvrt_pool_read_kv(pages->pool, pages->pages.data(), 0, n, layer,
                               k->data(), v->data());
    });
  }

  kvrt_status attention(const Forward &forward, const kvrt_model *model,
                        const kvrt_view *view, const float *q, int64_t n,
                        int64_t pos, int32_t layer,
                        std::vector<float> *out) override {
    if (!model || !view || (n > 0 && !q) || !out)
      return kvrt::nullArgument("cuda attention");
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s = prepare(forward, model, ForwardEntry::Attention, &dm))
        return s;
      const kvrt_model_config &c = dm->config;
      if (layer < 0 || layer >= c.n_layers)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("attention: layer ", layer, " is outside [0, ",
                        c.n_layers, ")"));
      if (n < 0 || pos < 0 || pos > KVRT_MAX_POSITION - n)
        return fail(KVRT_ERR_INVALID_ARGUMENT,
                    str("attention: ", n, " queries at position ", pos,
                        " are outside [0, 2^53)"));
      out->assign(n * c.dim, 0.0f);
      if (n == 0)
        return KVRT_OK;
      kvrt_attention_args args{};
      DevicePool *dp;
      int64_t nTiles = 0;
      if (kvrt_status s = attentionArgs(forward, view, c, q, n, pos, layer, &dp,
                                        &nTiles, args))
        return s;
      // No key at all (an empty view): zeros, as on the CPU; an empty grid
      // would be a launch error.
      if (nTiles == 0)
        return KVRT_OK;
      forward.attention(&args);
      if (kvrt_status s = kvrt_cuda_synchronize())
        return fail(s, str("the GPU attention of ", n,
                           " queries failed: ", kvrt_last_error()));
      return kvrt_cuda_download(out->data(), outBuf.ptr,
                                out->size() * sizeof(float));
    });
  }

  kvrt_status materialize(const Forward &forward, const kvrt_model *model,
                          const kvrt_view *view, kvrt_view **out) override {
    if (!model || !view || !out)
      return kvrt::nullArgument("cuda materialize");
    *out = nullptr;
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s =
              prepare(forward, model, ForwardEntry::Materialize, &dm))
        return s;
      kvrt_pool *pool = kvrt_view_pool(view);
      DevicePool *dp;
      RunTable all;
      if (kvrt_status s = residentTable(forward, view, dm->config, &dp, &all))
        return s;
      // The shifted runs go through the kernel, into new pages parallel to
      // their page lists; the others are shared as they are.
      kvrt::ShiftedRuns shifts;
      if (kvrt_status s = shifts.collect(view, kvrt::RewriteSlots::Same))
        return s;
      const std::vector<int32_t> &dst = shifts.pages();
      if (!dst.empty()) {
        RunTable shifted;
        for (const kvrt::ShiftedRuns::Shift &shift : shifts.shifts())
          shifted.append(shift.from.pages, shift.from.n_pages,
                         shift.from.slot_begin, shift.from.n_tokens,
                         shift.from.base_pos, shift.from.delta);
        for (int32_t page : dst)
          if (kvrt_status s = dp->cover(page))
            return s;
        if (kvrt_status s = pagesBuf.upload(shifted.pages))
          return s;
        if (kvrt_status s = runsBuf.upload(shifted.rows))
          return s;
        if (kvrt_status s = dstBuf.upload(dst))
          return s;
        kvrt_materialize_args args{};
        args.kv = dp->arena.kv(dp->pages * dp->layout.page_stride);
        args.pages = pagesBuf.i32(int64_t(shifted.pages.size()));
        args.runs = runsBuf.table(shifted.numRuns(), KVRT_RUN_WIDTH);
        args.dst_pages = dstBuf.i32(int64_t(dst.size()));
        args.page_tokens = dp->layout.page_tokens;
        forward.materialize(&args);
        if (kvrt_status s = kvrt_cuda_synchronize())
          return fail(s,
                      str("the GPU materialize failed: ", kvrt_last_error()));
        if (kvrt_status s = downloadPages(*dp, dst))
          return s;
      }
      if (kvrt_status s = shifts.rebuild(out))
        return s;
      holdWritten(pool, dst);
      return KVRT_OK;
    });
  }

  kvrt_status timeAttention(const Forward &forward, const kvrt_model *model,
                            const kvrt_view *view, int64_t pos, int32_t layer,
                            int iters, double *seconds) override {
    if (!model || !view || !seconds)
      return kvrt::nullArgument("cuda timeAttention");
    return kvrt::guard([&]() -> kvrt_status {
      std::lock_guard<std::mutex> lock(mutex);
      DeviceModel *dm;
      if (kvrt_status s = prepare(forward, model, ForwardEntry::Attention, &dm))
        return s;
      const kvrt_model_config &c = dm->config;
      std::vector<float> q(c.dim);
      for (int64_t i = 0; i < c.dim; ++i)
        q[i] = float((i * 37) % 17) / 17.0f - 0.5f;
      kvrt_attention_args args{};
      DevicePool *dp;
      int64_t nTiles = 0;
      if (kvrt_status s = attentionArgs(forward, view, c, q.data(), 1, pos,
                                        layer, &dp, &nTiles, args))
        return s;
      forward.attention(&args);
      if (kvrt_status s = kvrt_cuda_synchronize())
        return s;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i)
        forward.attention(&args);
      if (kvrt_status s = kvrt_cuda_synchronize())
        return s;
      std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - start;
      *seconds = elapsed.count() / std::max(iters, 1);
      return KVRT_OK;
    });
  }

  /// Opens the driver and uploads the weights of `model`.
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
    kvrt_model_weights w;
    if (kvrt_status s = kvrt_model_get_weights(model, &w))
      return s;
    dm->upload = planWeightUpload(dm->config, w);
    if (kvrt_status s = dm->weights.reserve(size_t(dm->upload.bytes)))
      return s;
    for (const WeightUpload::Piece &piece : dm->upload.pieces)
      if (kvrt_status s =
              kvrt_cuda_upload(static_cast<char *>(dm->weights.ptr) + piece.at,
                               piece.src, size_t(piece.bytes)))
        return s;
    kvrt_model_retain(const_cast<kvrt_model *>(model));
    dm->model = const_cast<kvrt_model *>(model);
    *out = dm.get();
    models.emplace(model, std::move(dm));
    return KVRT_OK;
  }

  kvrt_status prepare(const Forward &forward, const kvrt_model *model,
                      ForwardEntry entry, DeviceModel **out) {
    if (kvrt_status s = deviceModel(model, out))
      return s;
    return checkForward(forward, model, entry);
  }

  /// prepare() for a prefill of the tokens at `pos` (prefill, layerKV), with
  /// the arguments checked; messages start with `what`.
  kvrt_status preparePrefill(const Forward &forward, const kvrt_model *model,
                             const int32_t *tokens, int64_t n, int64_t pos,
                             const char *what, DeviceModel **out) {
    if (kvrt_status s = prepare(forward, model, ForwardEntry::Prefill, out))
      return s;
    return kvrt::checkPrefillArguments((*out)->config, tokens, n, pos, what);
  }

  /// The device pool of `view` with every page of its runs resident, and
  /// the view's run table.
  kvrt_status residentTable(const Forward &forward, const kvrt_view *view,
                            const kvrt_model_config &c, DevicePool **out,
                            RunTable *table) {
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
    if (kvrt_status s = checkForwardLayout(forward, c, dp.layout))
      return s;
    dp.sweep();
    if (kvrt_status s = table->appendView(view))
      return s;
    for (int32_t page : table->pages)
      if (kvrt_status s = dp.ensure(page))
        return s;
    *out = &dp;
    return KVRT_OK;
  }

  /// The arguments of one attention call of `n` queries over `view`, with
  /// the queries, tables and tiles uploaded.
  kvrt_status attentionArgs(const Forward &forward, const kvrt_view *view,
                            const kvrt_model_config &c, const float *q,
                            int64_t n, int64_t pos, int32_t layer,
                            DevicePool **dp, int64_t *nTiles,
                            kvrt_attention_args &args) {
    RunTable table;
    if (kvrt_status s = residentTable(forward, view, c, dp, &table))
      return s;
    std::vector<int64_t> tiles =
        attentionTiles(table, n, c.n_heads, headSize(c));
    *nTiles = int64_t(tiles.size()) / KVRT_TILE_WIDTH;
    std::vector<float> queries(q, q + n * c.dim);
    if (kvrt_status s = upload(table, tiles))
      return s;
    if (kvrt_status s = qBuf.upload(queries))
      return s;
    int64_t partFloats = attentionPartialFloats(c, n, *nTiles);
    if (kvrt_status s = partBuf.reserve(size_t(partFloats) * sizeof(float)))
      return s;
    if (kvrt_status s = outBuf.reserve(size_t(n) * c.dim * sizeof(float)))
      return s;
    args.q = qBuf.f32(n * c.dim);
    args.kv = (*dp)->arena.kv((*dp)->pages * (*dp)->layout.page_stride);
    args.pages = pagesBuf.i32(int64_t(table.pages.size()));
    args.runs = runsBuf.table(table.numRuns(), KVRT_RUN_WIDTH);
    args.tiles = tilesBuf.table(*nTiles, KVRT_TILE_WIDTH);
    args.part = partBuf.f32(partFloats);
    args.out = outBuf.f32(n * c.dim);
    args.page_tokens = (*dp)->layout.page_tokens;
    args.pos = pos;
    args.n = n;
    args.layer = layer;
    return KVRT_OK;
  }

  kvrt_status upload(RunTable &table, const std::vector<int64_t> &tiles) {
    if (kvrt_status s = pagesBuf.upload(table.pages))
      return s;
    if (kvrt_status s = runsBuf.upload(table.rows))
      return s;
    return tilesBuf.upload(tiles);
  }

  /// Copies `pages` back to the host, which stays the source of truth.
  kvrt_status downloadPages(DevicePool &dp, const std::vector<int32_t> &pages) {
    for (int32_t page : pages) {
      void *host = nullptr;
      if (kvrt_status s = kvrt_pool_page_bytes(dp.pool, page, &host))
        return s;
      if (kvrt_status s =
              kvrt_cuda_download(host,
                                 static_cast<char *>(dp.arena.ptr) +
                                     int64_t(page) * dp.layout.page_bytes,
                                 dp.layout.page_bytes))
        return s;
    }
    return KVRT_OK;
  }

  /// Pages just written on the device (and now sealed in a view) are held
  /// there, so later calls do not upload them again.
  void holdWritten(kvrt_pool *pool, const std::vector<int32_t> &pages) {
    DevicePool &dp = *pools[pool];
    for (int32_t page : pages)
      if (kvrt_pool_retain_page(dp.pool, page) == KVRT_OK)
        dp.held[page] = 1;
  }

  /// Layers 0 .. nLayers-1 of the forward of the tokens over `view` into
  /// fresh pages (returned in `pages`, not sealed, copied back to the host),
  /// and the logits of positions logitsFrom .. n-1 into `logits`.
  kvrt_status run(const Forward &forward, DeviceModel &dm,
                  const kvrt_view *view, const int32_t *tokens, int64_t n,
                  int64_t pos, int64_t nLayers, int64_t logitsFrom,
                  std::vector<float> *logits,
                  std::unique_ptr<kvrt::PageRefs> &pages) {
    const kvrt_model_config &c = dm.config;
    DevicePool *dp;
    RunTable table;
    if (kvrt_status s = residentTable(forward, view, c, &dp, &table))
      return s;
    const kvrt_page_layout &layout = dp->layout;
    int64_t nPages = (n + layout.page_tokens - 1) / layout.page_tokens;
    std::vector<int32_t> fresh(nPages);
    if (kvrt_status s = kvrt_pool_alloc_pages(dp->pool, nPages, fresh.data()))
      return s;
    pages.reset(new kvrt::PageRefs{dp->pool, std::move(fresh)});
    for (int32_t page : pages->pages)
      if (kvrt_status s = dp->cover(page))
        return s;
    table.append(pages->pages.data(), nPages, 0, n, pos, 0);

    std::vector<int64_t> tiles =
        attentionTiles(table, n, c.n_heads, headSize(c));
    int64_t nTiles = int64_t(tiles.size()) / KVRT_TILE_WIDTH;
    kvrt_model_weights w;
    if (kvrt_status s = kvrt_model_get_weights(dm.model, &w))
      return s;
    std::vector<float> x = embedTokens(c, w, tokens, n);
    int64_t nLogits = (n - logitsFrom) * c.vocab_size;
    int64_t scratchFloats = prefillScratchFloats(c, n);
    int64_t partFloats = attentionPartialFloats(c, n, nTiles);
    if (kvrt_status s = upload(table, tiles))
      return s;
    if (kvrt_status s = xBuf.upload(x))
      return s;
    if (kvrt_status s = scratchBuf.reserve(size_t(scratchFloats) * 4))
      return s;
    if (kvrt_status s = partBuf.reserve(size_t(partFloats) * 4))
      return s;
    if (kvrt_status s =
            logitsBuf.reserve(size_t(std::max<int64_t>(nLogits, 1)) * 4))
      return s;

    kvrt_prefill_args args{};
    args.x = xBuf.f32(n * c.dim);
    WeightTable weights = dm.upload.table(dm.weights.ptr);
    weights.fill(args);
    args.kv = dp->arena.kv(dp->pages * layout.page_stride);
    args.pages = pagesBuf.i32(int64_t(table.pages.size()));
    args.runs = runsBuf.table(table.numRuns(), KVRT_RUN_WIDTH);
    args.tiles = tilesBuf.table(nTiles, KVRT_TILE_WIDTH);
    args.scratch = scratchBuf.f32(scratchFloats);
    args.part = partBuf.f32(partFloats);
    args.logits = logitsBuf.f32(nLogits);
    args.page_tokens = layout.page_tokens;
    args.pos = pos;
    args.n = n;
    args.n_layers = nLayers;
    args.logits_from = logitsFrom;
    forward.prefill(&args);
    if (kvrt_status s = kvrt_cuda_synchronize())
      return fail(s, str("the GPU prefill of ", n,
                         " tokens failed: ", kvrt_last_error()));
    if (kvrt_status s = downloadPages(*dp, pages->pages))
      return s;
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
  std::map<kvrt_pool *, std::unique_ptr<DevicePool>> pools;
  DeviceBuffer xBuf, scratchBuf, partBuf, logitsBuf, pagesBuf, runsBuf,
      tilesBuf, qBuf, outBuf, dstBuf;
};

} // namespace

std::unique_ptr<CudaComputeBackend>
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
