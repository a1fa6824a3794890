//===- BlockStore.cpp - The block store's C ABI -----------------*- C++ -*-===//
//
// kvrt_block_store: a BlockStore, its options and counters, and the load and
// save of blocks (key, lookup, fetch, checks, pages) over it. The in-process
// store lives here too.
//
//===----------------------------------------------------------------------===//

#include "runtime/store/BlockStore.h"

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/store/BlockBlob.h"
#include "runtime/store/ContextBlob.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

using namespace kvir::store;
using kvrt::fail;
using kvrt::str;

namespace {

/// The in-process store: a map with expiry times.
class MemoryStore final : public BlockStore {
public:
  std::string url() const override { return "memory"; }

  StoreStatus lookup(const std::string &key, int64_t &size) override {
    std::lock_guard<std::mutex> lock(mutex);
    const Entry *entry = find(key);
    size = entry ? int64_t(entry->blob.size()) : 0;
    return entry ? StoreStatus::success() : StoreStatus::missing();
  }

  StoreStatus fetch(const std::string &key, int64_t maxBytes,
                    std::string &blob) override {
    std::lock_guard<std::mutex> lock(mutex);
    const Entry *entry = find(key);
    if (!entry)
      return StoreStatus::missing();
    if (int64_t(entry->blob.size()) > maxBytes)
      return StoreStatus::failure(
          KVRT_BLOCK_TOO_LARGE,
          str("memory: the blob has ", entry->blob.size(),
              " bytes, more than the ", maxBytes, " allowed"));
    blob = entry->blob;
    return StoreStatus::success();
  }

  StoreStatus put(const std::string &key, std::string_view blob,
                  int64_t ttlSeconds) override {
    std::lock_guard<std::mutex> lock(mutex);
    Entry &entry = entries[key];
    entry.blob.assign(blob.data(), blob.size());
    entry.expires = ttlSeconds > 0
                        ? Clock::now() + std::chrono::seconds(ttlSeconds)
                        : Clock::time_point::max();
    return StoreStatus::success();
  }

  StoreStatus remove(const std::string &key) override {
    std::lock_guard<std::mutex> lock(mutex);
    entries.erase(key);
    return StoreStatus::success();
  }

private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string blob;
    Clock::time_point expires;
  };
  std::mutex mutex;
  std::map<std::string, Entry> entries;

  const Entry *find(const std::string &key) {
    auto it = entries.find(key);
    if (it == entries.end())
      return nullptr;
    if (Clock::now() >= it->second.expires) {
      entries.erase(it);
      return nullptr;
    }
    return &it->second;
  }
};

constexpr size_t kMaxPrefix = 64;

} // namespace

struct kvrt_block_store {
  std::atomic<int64_t> refs{1};
  std::unique_ptr<BlockStore> store;
  kvrt_block_store_options options{};
  std::string prefix;
  std::string description;
  std::mutex mutex;
  kvrt_block_store_stats stats{};
  /// Fingerprints of the models seen (each retained while cached, so that
  /// its address is not reused by another model).
  std::vector<std::pair<kvrt_model *, Digest>> fingerprints;

  ~kvrt_block_store() {
    for (auto &entry : fingerprints)
      kvrt_model_release(entry.first);
  }

  const Digest &fingerprint(const kvrt_model *model) {
    for (auto &entry : fingerprints)
      if (entry.first == model)
        return entry.second;
    auto *owned = const_cast<kvrt_model *>(model);
    kvrt_model_retain(owned);
    fingerprints.emplace_back(owned, modelFingerprint(model));
    return fingerprints.back().second;
  }

  /// Counts a fault and records its message.
  kvrt_status fault(kvrt_block_result *result, kvrt_block_fault kind,
                    const std::string &message) {
    ++stats.faults[kind];
    if (kind == KVRT_BLOCK_CORRUPT || kind == KVRT_BLOCK_TRUNCATED ||
        kind == KVRT_BLOCK_OTHER_MODEL || kind == KVRT_BLOCK_MISMATCH ||
        kind == KVRT_BLOCK_TOO_LARGE)
      ++stats.rejected;
    if (result)
      result->fault = kind;
    return fail(KVRT_ERR_UNAVAILABLE, message);
  }

  /// Stores `blob` under `key` (the `what`'s: "block" or "context") within
  /// the size limit, counted. Under `mutex`.
  kvrt_status putBlob(const char *what, const std::string &key,
                      const std::string &blob, kvrt_block_result *result) {
    if (int64_t(blob.size()) > options.max_blob_bytes)
      return fault(result, KVRT_BLOCK_TOO_LARGE,
                   str(what, " ", key, ": the blob has ", blob.size(),
                       " bytes, more than the ", options.max_blob_bytes,
                       " allowed"));
    StoreStatus put = store->put(key, blob, options.ttl_seconds);
    if (!put.ok())
      return fault(result, put.fault, put.message);
    ++stats.stores;
    stats.bytes_stored += int64_t(blob.size());
    if (result)
      result->bytes = int64_t(blob.size());
    return KVRT_OK;
  }
};

namespace {

/// Times a call into its result.
struct ResultTimer {
  kvrt_block_result *result;
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  ~ResultTimer() {
    if (result)
      result->seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  }
};

void setKey(kvrt_block_result *result, const std::string &key) {
  if (!result)
    return;
  std::snprintf(result->key, sizeof(result->key), "%s", key.c_str());
}

/// The token ids of every run of `view`, the stored position of its first
/// run (0 for an empty view) and the element type of its pool's pages.
kvrt_status viewTokens(const kvrt_view *view, std::vector<int32_t> &tokens,
                       int64_t &base, kvrt_kv_dtype &dtype) {
  kvrt_page_layout layout;
  if (kvrt_status s = kvrt_pool_get_layout(kvrt_view_pool(view), &layout))
    return s;
  dtype = layout.dtype;
  tokens.clear();
  tokens.reserve(kvrt_view_num_tokens(view));
  base = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_status s = kvrt_view_get_run(view, r, &run))
      return s;
    if (r == 0)
      base = run.base_pos;
    tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
  }
  return KVRT_OK;
}

kvrt_status checkOptions(const kvrt_block_store_options &o) {
  if (!o.key_prefix)
    return fail(KVRT_ERR_INVALID_ARGUMENT, "block store: a NULL key prefix");
  if (std::strlen(o.key_prefix) > kMaxPrefix)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("block store: the key prefix has ",
                    std::strlen(o.key_prefix), " bytes, at most ", kMaxPrefix,
                    " are allowed"));
  if (o.ttl_seconds < 0)
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("block store: the TTL must not be negative, got ", o.ttl_seconds));
  if (o.connect_timeout_ms <= 0 || o.io_timeout_ms <= 0)
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("block store: timeouts must be positive, got ",
                    o.connect_timeout_ms, " and ", o.io_timeout_ms, " ms"));
  if (o.max_blob_bytes <= int64_t(kBlobHeaderBytes))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("block store: the largest blob must exceed the ",
                    kBlobHeaderBytes, "-byte header, got ", o.max_blob_bytes));
  return KVRT_OK;
}

} // namespace

kvrt_block_store *
kvir::store::wrapBlockStore(std::unique_ptr<BlockStore> store,
                            const kvrt_block_store_options *options) {
  kvrt_block_store_options o;
  kvrt_block_store_options_init(&o);
  if (options)
    o = *options;
  if (checkOptions(o) != KVRT_OK)
    return nullptr;
  auto handle = std::make_unique<kvrt_block_store>();
  handle->options = o;
  handle->prefix = o.key_prefix;
  handle->options.key_prefix = handle->prefix.c_str();
  handle->description =
      str(store->url(), " (key prefix \"", handle->prefix, "\", ttl ",
          o.ttl_seconds > 0 ? str(o.ttl_seconds, " s") : "none", ")");
  handle->store = std::move(store);
  return handle.release();
}

BlockStore *kvir::store::unwrapBlockStore(kvrt_block_store *store) {
  return store ? store->store.get() : nullptr;
}

std::unique_ptr<BlockStore> kvir::store::createMemoryStore() {
  return std::make_unique<MemoryStore>();
}

extern "C" {

void kvrt_block_store_options_init(kvrt_block_store_options *options) {
  if (!options)
    return;
  options->key_prefix = "kvir:";
  options->ttl_seconds = 0;
  options->connect_timeout_ms = 1000;
  options->io_timeout_ms = 5000;
  options->max_blob_bytes = int64_t(1) << 30;
}

kvrt_status kvrt_block_store_open(const char *url,
                                  const kvrt_block_store_options *options,
                                  kvrt_block_store **out) {
  if (!url || !out)
    return kvrt::nullArgument("kvrt_block_store_open");
  *out = nullptr;
  return kvrt::guard([&]() -> kvrt_status {
    kvrt_block_store_options o;
    kvrt_block_store_options_init(&o);
    if (options)
      o = *options;
    if (kvrt_status s = checkOptions(o))
      return s;
    std::string text = url;
    std::unique_ptr<BlockStore> store;
    if (text == "memory" || text == "memory://") {
      store = createMemoryStore();
    } else if (text.rfind("redis://", 0) == 0) {
      std::string error;
      store = createRedisStore(text, o, error);
      if (!store)
        return fail(KVRT_ERR_INVALID_ARGUMENT, "block store: " + error);
    } else {
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("unknown block store '", text,
                      "' (expected memory or redis://HOST[:PORT][/DB])"));
    }
    *out = wrapBlockStore(std::move(store), &o);
    return *out ? KVRT_OK : KVRT_ERR_INVALID_ARGUMENT;
  });
}

void kvrt_block_store_retain(kvrt_block_store *store) { kvrt::retain(store); }
void kvrt_block_store_release(kvrt_block_store *store) { kvrt::release(store); }

const char *kvrt_block_store_describe(const kvrt_block_store *store) {
  return store ? store->description.c_str() : "";
}

const char *kvrt_block_fault_name(kvrt_block_fault fault) {
  switch (fault) {
  case KVRT_BLOCK_OK:
    return "ok";
  case KVRT_BLOCK_UNREACHABLE:
    return "unreachable";
  case KVRT_BLOCK_TIMEOUT:
    return "timeout";
  case KVRT_BLOCK_EVICTED:
    return "evicted";
  case KVRT_BLOCK_CORRUPT:
    return "corrupt";
  case KVRT_BLOCK_TRUNCATED:
    return "truncated";
  case KVRT_BLOCK_OTHER_MODEL:
    return "other-model";
  case KVRT_BLOCK_MISMATCH:
    return "mismatch";
  case KVRT_BLOCK_TOO_LARGE:
    return "too-large";
  case KVRT_BLOCK_STORE_ERROR:
    return "store-error";
  }
  return "unknown";
}

kvrt_status kvrt_block_store_key(kvrt_block_store *store,
                                 const kvrt_model *model, kvrt_kv_dtype dtype,
                                 int64_t base, const int32_t *tokens, int64_t n,
                                 char out[KVRT_BLOCK_KEY_MAX]) {
  if (!store || !model || !out || (n > 0 && !tokens) || n < 0)
    return kvrt::nullArgument("kvrt_block_store_key");
  if (std::string why = kvir::describeKvDtypeError(dtype); !why.empty())
    return fail(KVRT_ERR_INVALID_ARGUMENT, "kvrt_block_store_key: " + why);
  return kvrt::guard([&]() -> kvrt_status {
    std::lock_guard<std::mutex> lock(store->mutex);
    BlockId id = makeBlockId(model, store->fingerprint(model), dtype, base,
                             std::vector<int32_t>(tokens, tokens + n));
    std::snprintf(out, KVRT_BLOCK_KEY_MAX, "%s",
                  keyString(store->prefix, id).c_str());
    return KVRT_OK;
  });
}

kvrt_status kvrt_block_store_load(kvrt_block_store *store,
                                  const kvrt_model *model, kvrt_pool *pool,
                                  int64_t base, const int32_t *tokens,
                                  int64_t n, const char *label, kvrt_view **out,
                                  kvrt_block_result *result) {
  if (result)
    *result = kvrt_block_result{};
  if (!store || !model || !pool || !out || (n > 0 && !tokens))
    return kvrt::nullArgument("kvrt_block_store_load");
  *out = nullptr;
  ResultTimer timer{result};
  return kvrt::guard([&]() -> kvrt_status {
    if (n <= 0)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("block store: a block needs tokens, got ", n));
    if (base < 0 || base > KVRT_MAX_POSITION - n)
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("block store: base position ", base, " of ", n,
                      " tokens is outside [0, 2^53)"));
    kvrt_page_layout layout;
    if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
      return s;
    std::lock_guard<std::mutex> lock(store->mutex);
    BlockId id = makeBlockId(model, store->fingerprint(model), layout.dtype,
                             base, std::vector<int32_t>(tokens, tokens + n));
    std::string key = keyString(store->prefix, id);
    setKey(result, key);
    ++store->stats.lookups;
    int64_t size = 0;
    StoreStatus found = store->store->lookup(key, size);
    if (found.notFound) {
      ++store->stats.misses;
      return KVRT_OK;
    }
    if (!found.ok())
      return store->fault(result, found.fault, found.message);
    int64_t max = store->options.max_blob_bytes;
    if (size > max)
      return store->fault(result, KVRT_BLOCK_TOO_LARGE,
                          str("block ", key, ": the blob has ", size,
                              " bytes, more than the ", max, " allowed"));
    // A blob whose size differs from the block's is fetched all the same:
    // the checks then say what it is (another model's, truncated, ...).
    std::string blob;
    StoreStatus fetched = store->store->fetch(key, max, blob);
    if (fetched.notFound)
      return store->fault(result, KVRT_BLOCK_EVICTED,
                          str("block ", key,
                              ": found by the lookup, gone at the fetch "
                              "(evicted or expired in between)"));
    if (!fetched.ok())
      return store->fault(result, fetched.fault, fetched.message);
    store->stats.bytes_fetched += int64_t(blob.size());
    if (result)
      result->bytes = int64_t(blob.size());
    std::string why;
    if (kvrt_block_fault bad = checkBlob(blob, id, why))
      return store->fault(result, bad, str("block ", key, ": rejected ", why));
    if (kvrt_status s = mapBlob(blob, id, pool, label, out))
      return s;
    ++store->stats.hits;
    if (result)
      result->hit = 1;
    return KVRT_OK;
  });
}

kvrt_status kvrt_block_store_save(kvrt_block_store *store,
                                  const kvrt_model *model,
                                  const kvrt_view *block,
                                  kvrt_block_result *result) {
  if (result)
    *result = kvrt_block_result{};
  if (!store || !model || !block)
    return kvrt::nullArgument("kvrt_block_store_save");
  ResultTimer timer{result};
  return kvrt::guard([&]() -> kvrt_status {
    if (kvrt_view_num_tokens(block) == 0)
      return KVRT_OK;
    std::vector<int32_t> tokens;
    int64_t base = 0;
    kvrt_kv_dtype dtype;
    if (kvrt_status s = viewTokens(block, tokens, base, dtype))
      return s;
    std::lock_guard<std::mutex> lock(store->mutex);
    BlockId id = makeBlockId(model, store->fingerprint(model), dtype, base,
                             std::move(tokens));
    std::string key = keyString(store->prefix, id);
    setKey(result, key);
    std::string blob, error;
    if (!encodeBlob(block, id, blob, error))
      return fail(
          KVRT_ERR_INVALID_ARGUMENT,
          str("block store: cannot store the view as a block: ", error));
    return store->putBlob("block", key, blob, result);
  });
}

kvrt_status kvrt_block_store_save_context(kvrt_block_store *store,
                                          const kvrt_model *model,
                                          const char *name,
                                          const kvrt_view *view,
                                          const float *logits, int64_t n_logits,
                                          kvrt_block_result *result) {
  if (result)
    *result = kvrt_block_result{};
  if (!store || !model || !name || !view || n_logits < 0 ||
      (n_logits > 0 && !logits))
    return kvrt::nullArgument("kvrt_block_store_save_context");
  ResultTimer timer{result};
  return kvrt::guard([&]() -> kvrt_status {
    if (std::string why = checkContextName(name); !why.empty())
      return fail(KVRT_ERR_INVALID_ARGUMENT, "block store: " + why);
    std::vector<int32_t> tokens;
    int64_t base = 0;
    kvrt_kv_dtype dtype;
    if (kvrt_status s = viewTokens(view, tokens, base, dtype))
      return s;
    std::lock_guard<std::mutex> lock(store->mutex);
    ContextId id = makeContextId(model, store->fingerprint(model), dtype, name,
                                 std::move(tokens));
    std::string key = contextKeyString(store->prefix, name);
    setKey(result, key);
    std::string blob, error;
    if (!encodeContextBlob(view, id, logits, n_logits, blob, error))
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("block store: cannot store the context: ", error));
    return store->putBlob("context", key, blob, result);
  });
}

kvrt_status
kvrt_block_store_load_context(kvrt_block_store *store, const kvrt_model *model,
                              kvrt_pool *pool, const char *name,
                              const int32_t *tokens, int64_t n, float *logits,
                              int64_t logits_capacity, int64_t *n_logits,
                              kvrt_view **out, kvrt_block_result *result) {
  if (result)
    *result = kvrt_block_result{};
  if (!store || !model || !pool || !name || !out || !n_logits || n < 0 ||
      (n > 0 && !tokens) || logits_capacity < 0 ||
      (logits_capacity > 0 && !logits))
    return kvrt::nullArgument("kvrt_block_store_load_context");
  *out = nullptr;
  *n_logits = 0;
  ResultTimer timer{result};
  return kvrt::guard([&]() -> kvrt_status {
    if (std::string why = checkContextName(name); !why.empty())
      return fail(KVRT_ERR_INVALID_ARGUMENT, "block store: " + why);
    kvrt_page_layout layout;
    if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
      return s;
    std::lock_guard<std::mutex> lock(store->mutex);
    ContextId id =
        makeContextId(model, store->fingerprint(model), layout.dtype, name,
                      std::vector<int32_t>(tokens, tokens + n));
    std::string key = contextKeyString(store->prefix, name);
    setKey(result, key);
    ++store->stats.lookups;
    std::string blob;
    StoreStatus fetched =
        store->store->fetch(key, store->options.max_blob_bytes, blob);
    if (fetched.notFound) {
      ++store->stats.misses;
      return KVRT_OK;
    }
    if (!fetched.ok())
      return store->fault(result, fetched.fault, fetched.message);
    store->stats.bytes_fetched += int64_t(blob.size());
    if (result)
      result->bytes = int64_t(blob.size());
    std::string why;
    if (kvrt_block_fault bad = checkContextBlob(blob, id, why))
      return store->fault(result, bad,
                          str("context ", key, ": rejected ", why));
    std::vector<float> row;
    kvrt_view *view = nullptr;
    if (kvrt_status s = mapContextBlob(blob, id, pool, &view, row))
      return s;
    if (int64_t(row.size()) > logits_capacity) {
      kvrt_view_release(view);
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("context ", key, ": ", row.size(), " logits, room for ",
                      logits_capacity));
    }
    std::copy(row.begin(), row.end(), logits);
    *n_logits = int64_t(row.size());
    *out = view;
    ++store->stats.hits;
    if (result)
      result->hit = 1;
    return KVRT_OK;
  });
}

kvrt_status kvrt_block_store_remove_context(kvrt_block_store *store,
                                            const char *name,
                                            kvrt_block_result *result) {
  if (result)
    *result = kvrt_block_result{};
  if (!store || !name)
    return kvrt::nullArgument("kvrt_block_store_remove_context");
  ResultTimer timer{result};
  return kvrt::guard([&]() -> kvrt_status {
    if (std::string why = checkContextName(name); !why.empty())
      return fail(KVRT_ERR_INVALID_ARGUMENT, "block store: " + why);
    std::lock_guard<std::mutex> lock(store->mutex);
    std::string key = contextKeyString(store->prefix, name);
    setKey(result, key);
    StoreStatus removed = store->store->remove(key);
    if (!removed.ok())
      return store->fault(result, removed.fault, removed.message);
    return KVRT_OK;
  });
}

kvrt_status kvrt_block_store_get_stats(const kvrt_block_store *store,
                                       kvrt_block_store_stats *out) {
  if (!store || !out)
    return kvrt::nullArgument("kvrt_block_store_get_stats");
  std::lock_guard<std::mutex> lock(
      const_cast<kvrt_block_store *>(store)->mutex);
  *out = store->stats;
  return KVRT_OK;
}

kvrt_status kvrt_model_fingerprint(const kvrt_model *model, char out[65]) {
  if (!model || !out)
    return kvrt::nullArgument("kvrt_model_fingerprint");
  return kvrt::guard([&]() -> kvrt_status {
    std::snprintf(out, 65, "%s", toHex(modelFingerprint(model)).c_str());
    return KVRT_OK;
  });
}

} // extern "C"
