//===- BlockStoreTest.cpp - Keys, blobs and the block store -----*- C++ -*-===//
//
// runtime/store without a network: a blob round trip is bit-exact, every
// blob that fails a check is rejected with its fault, counted and never
// mapped, a key changes with every field it is computed from, the
// in-process store hits, misses, expires and prefixes, and faults injected
// into a store leave the caches already built bit-identical under both
// policies of the execution runtime. The Redis store is tested against a
// real server by test/Integration/CPU/block-store-redis.test.
//
//===----------------------------------------------------------------------===//

#include "runtime/store/BlockStore.h"
#include "runtime/core/ComputeBackend.h"
#include "runtime/core/Model.h"
#include "runtime/exec/ExecRuntime.h"
#include "runtime/reference/Reference.h"
#include "runtime/store/BlockBlob.h"
#include "runtime/store/ContextBlob.h"
#include "runtime/store/Hash.h"
#include "test/unit/TestSupport.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace kvir;
using namespace kvir::store;
using namespace kvir::test;

namespace {

struct StoreDeleter {
  void operator()(kvrt_block_store *s) const { kvrt_block_store_release(s); }
};
using StorePtr = std::unique_ptr<kvrt_block_store, StoreDeleter>;
struct ContextDeleter {
  void operator()(kvrt_exec_context *c) const { kvrt_exec_context_destroy(c); }
};
using ContextPtr = std::unique_ptr<kvrt_exec_context, ContextDeleter>;

std::vector<int32_t> ids(int n, int first = 1) {
  std::vector<int32_t> out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

int64_t pagesInUse(const kvrt_pool *pool) {
  kvrt_pool_stats stats;
  EXPECT_EQ(kvrt_pool_get_stats(pool, &stats), KVRT_OK);
  return stats.pages_in_use;
}

/// Rewrites a little-endian header field of a blob and its header checksum,
/// as a writer of another version or model would have.
template <typename T> void setField(std::string &blob, size_t at, T value) {
  std::memcpy(blob.data() + at, &value, sizeof(T));
  uint64_t checksum = xxh64(blob.data(), 120);
  std::memcpy(blob.data() + 120, &checksum, 8);
}

class BlockStoreTest : public ::testing::Test {
protected:
  void SetUp() override {
    config = smallConfig(KVRT_ROPE_INTERLEAVED);
    model = syntheticModel(config, 7);
    ASSERT_TRUE(model);
    pool = poolFor(model.get(), 256, /*pageTokens=*/4);
    backend = createReferenceBackend();
    fingerprint = modelFingerprint(model.get());
  }

  /// The block of `tokens` at `base`, prefilled over nothing.
  ViewPtr prefillBlock(const std::vector<int32_t> &tokens, int64_t base = 0,
                       kvrt_pool *into = nullptr) {
    ViewPtr empty = emptyView(into ? into : pool.get());
    std::vector<float> logits;
    kvrt_view *out = nullptr;
    EXPECT_EQ(backend->prefill(Forward(), model.get(), empty.get(),
                               tokens.data(), int64_t(tokens.size()), base,
                               "block", kvir::LogitRows::last(), &logits, &out),
              KVRT_OK)
        << kvrt_last_error();
    return ViewPtr(out);
  }

  /// The logits of `question` prefilled after `view`.
  std::vector<float> answer(const kvrt_view *view,
                            const std::vector<int32_t> &question) {
    std::vector<float> logits;
    kvrt_view *out = nullptr;
    int64_t position = 0;
    for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
      kvrt_run run;
      EXPECT_EQ(kvrt_view_get_run(view, r, &run), KVRT_OK);
      position = std::max(position, run.base_pos + run.delta + run.n_tokens);
    }
    EXPECT_EQ(backend->prefill(Forward(), model.get(), view, question.data(),
                               int64_t(question.size()), position, "q",
                               kvir::LogitRows::all(), &logits, &out),
              KVRT_OK)
        << kvrt_last_error();
    kvrt_view_release(out);
    return logits;
  }

  /// The blob of `view` as the block `tokens` at `base`.
  std::string blobOf(const kvrt_view *view, const std::vector<int32_t> &tokens,
                     int64_t base = 0) {
    BlockId id =
        makeBlockId(model.get(), fingerprint, KVRT_KV_F32, base, tokens);
    std::string blob, error;
    EXPECT_TRUE(encodeBlob(view, id, blob, error)) << error;
    return blob;
  }

  kvrt_model_config config;
  ModelPtr model;
  PoolPtr pool;
  std::unique_ptr<ComputeBackend> backend;
  Digest fingerprint;
};

//===----------------------------------------------------------------------===//
// Hashes
//===----------------------------------------------------------------------===//

TEST(HashTest, KnownVectors) {
  // FIPS 180-4's "abc" and the empty message; xxHash's reference values.
  EXPECT_EQ(toHex(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(toHex(sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // 56 bytes: the padding spills into a second block.
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(toHex(sha256(two, std::strlen(two))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 incremental;
  for (size_t i = 0; i < std::strlen(two); ++i)
    incremental.update(two + i, 1);
  EXPECT_EQ(toHex(incremental.finish()), toHex(sha256(two, std::strlen(two))));
  EXPECT_EQ(xxh64("", 0, 0), 0xEF46DB3751D8E999ull);
  EXPECT_NE(xxh64("abc", 3, 0), xxh64("abc", 3, 1));
}

//===----------------------------------------------------------------------===//
// Blobs
//===----------------------------------------------------------------------===//

TEST_F(BlockStoreTest, BlobRoundTripIsBitExact) {
  // 10 tokens over pages of 4 at base 5: three pages, the last partly used.
  std::vector<int32_t> tokens = ids(10, 3);
  ViewPtr block = prefillBlock(tokens, 5);
  std::string blob = blobOf(block.get(), tokens, 5);
  BlockId id = makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 5, tokens);
  EXPECT_EQ(blob.size(), id.blobBytes());
  EXPECT_EQ(blob.size(), kBlobHeaderBytes + 10 * 4 +
                             size_t(config.n_layers) * config.n_kv_heads * 2 *
                                 10 * (config.dim / config.n_heads) * 4);
  std::string why;
  EXPECT_EQ(checkBlob(blob, id, why), KVRT_BLOCK_OK) << why;

  // Mapped into a pool of another page size, the K/V encode to the same
  // bytes, and a question after either view has the same logits.
  PoolPtr other = poolFor(model.get(), 64, /*pageTokens=*/16);
  kvrt_view *mapped = nullptr;
  ASSERT_EQ(mapBlob(blob, id, other.get(), "skill", &mapped), KVRT_OK)
      << kvrt_last_error();
  ViewPtr held(mapped);
  EXPECT_EQ(kvrt_view_num_tokens(mapped), 10);
  kvrt_run run;
  ASSERT_EQ(kvrt_view_get_run(mapped, 0, &run), KVRT_OK);
  EXPECT_EQ(run.base_pos, 5);
  EXPECT_EQ(run.delta, 0);
  EXPECT_STREQ(run.label, "skill");
  EXPECT_EQ(std::vector<int32_t>(run.tokens, run.tokens + 10), tokens);
  EXPECT_EQ(blobOf(mapped, tokens, 5), blob);
  EXPECT_EQ(answer(mapped, ids(4, 40)), answer(block.get(), ids(4, 40)));
}

TEST_F(BlockStoreTest, EncodeRefusesViewsThatAreNotTheBlock) {
  std::vector<int32_t> tokens = ids(6);
  ViewPtr block = prefillBlock(tokens);
  std::string blob, error;
  // Shifted: not a block.
  ViewPtr moved = shifted(block.get(), 3);
  EXPECT_FALSE(
      encodeBlob(moved.get(),
                 makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 0, tokens),
                 blob, error));
  EXPECT_NE(error.find("offset 3"), std::string::npos) << error;
  // Other tokens or base than the view holds.
  EXPECT_FALSE(encodeBlob(
      block.get(),
      makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 0, ids(6, 2)), blob,
      error));
  EXPECT_NE(error.find("other tokens"), std::string::npos) << error;
  EXPECT_FALSE(
      encodeBlob(block.get(),
                 makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 1, tokens),
                 blob, error));
  EXPECT_NE(error.find("stored position 0"), std::string::npos) << error;
}

/// One way of spoiling a blob, the fault it must be rejected with, and a
/// word of its message.
struct Spoiler {
  const char *name;
  std::function<void(std::string &)> spoil;
  kvrt_block_fault fault;
  const char *says;
};

TEST_F(BlockStoreTest, EveryBadBlobIsRejectedCountedAndNeverMapped) {
  std::vector<int32_t> tokens = ids(9, 11);
  ViewPtr block = prefillBlock(tokens);
  const std::string good = blobOf(block.get(), tokens);
  const size_t payload = kBlobHeaderBytes + tokens.size() * 4 + 100;

  std::vector<Spoiler> cases = {
      {"bad magic", [](std::string &b) { b[0] = 'X'; }, KVRT_BLOCK_CORRUPT,
       "bad magic"},
      {"header byte", [](std::string &b) { b[41] ^= 1; }, KVRT_BLOCK_CORRUPT,
       "header checksum"},
      {"format version", [](std::string &b) { setField<uint32_t>(b, 8, 2); },
       KVRT_BLOCK_MISMATCH, "format 2"},
      {"layout version", [](std::string &b) { setField<uint32_t>(b, 16, 7); },
       KVRT_BLOCK_MISMATCH, "layout 7"},
      {"other model",
       [](std::string &b) { setField<uint8_t>(b, 64, uint8_t(b[64] ^ 0x80)); },
       KVRT_BLOCK_OTHER_MODEL, "another model"},
      {"dtype", [](std::string &b) { setField<uint32_t>(b, 20, KVRT_KV_F16); },
       KVRT_BLOCK_MISMATCH, "element type 1"},
      {"layers",
       [&](std::string &b) {
         setField<uint32_t>(b, 24, uint32_t(config.n_layers + 1));
       },
       KVRT_BLOCK_MISMATCH, "another shape"},
      {"head size", [](std::string &b) { setField<uint32_t>(b, 32, 4); },
       KVRT_BLOCK_MISMATCH, "another shape"},
      {"base position", [](std::string &b) { setField<int64_t>(b, 40, 3); },
       KVRT_BLOCK_MISMATCH, "another block"},
      {"token count", [](std::string &b) { setField<uint64_t>(b, 48, 8); },
       KVRT_BLOCK_MISMATCH, "another block"},
      {"payload byte", [&](std::string &b) { b[payload] ^= 0x40; },
       KVRT_BLOCK_CORRUPT, "payload checksum"},
      {"token id",
       [](std::string &b) {
         // Another token with the payload checksum recomputed: the key
         // digest in the header still names this block, the ids do not.
         b[kBlobHeaderBytes] ^= 1;
         uint64_t sum =
             xxh64(b.data() + kBlobHeaderBytes, b.size() - kBlobHeaderBytes);
         setField<uint64_t>(b, 112, sum);
       },
       KVRT_BLOCK_MISMATCH, "token ids differ"},
      {"truncated payload", [](std::string &b) { b.resize(b.size() - 1); },
       KVRT_BLOCK_TRUNCATED, "truncated blob"},
      {"truncated header", [](std::string &b) { b.resize(50); },
       KVRT_BLOCK_TRUNCATED, "shorter than the 128-byte header"},
      {"empty", [](std::string &b) { b.clear(); }, KVRT_BLOCK_TRUNCATED,
       "truncated"},
      {"overlong", [](std::string &b) { b += "tail"; }, KVRT_BLOCK_TRUNCATED,
       "overlong"},
  };

  BlockId id = makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 0, tokens);
  std::string why;
  ASSERT_EQ(checkBlob(good, id, why), KVRT_BLOCK_OK) << why;

  // Through the C ABI: each spoiled blob put under the block's key.
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  StorePtr store(wrapBlockStore(createMemoryStore(), &options));
  ASSERT_TRUE(store);
  BlockStore *raw = unwrapBlockStore(store.get());
  char key[KVRT_BLOCK_KEY_MAX];
  ASSERT_EQ(kvrt_block_store_key(store.get(), model.get(), KVRT_KV_F32, 0,
                                 tokens.data(), int64_t(tokens.size()), key),
            KVRT_OK);
  int64_t pages = pagesInUse(pool.get());
  int64_t expectedRejected = 0;
  for (const Spoiler &c : cases) {
    SCOPED_TRACE(c.name);
    std::string bad = good;
    c.spoil(bad);
    EXPECT_EQ(checkBlob(bad, id, why), c.fault) << why;
    EXPECT_NE(why.find(c.says), std::string::npos) << why;

    ASSERT_TRUE(raw->put(key, bad, 0).ok());
    kvrt_view *out = nullptr;
    kvrt_block_result result;
    EXPECT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 0,
                                    tokens.data(), int64_t(tokens.size()),
                                    nullptr, &out, &result),
              KVRT_ERR_UNAVAILABLE);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(result.hit, 0);
    EXPECT_EQ(result.fault, c.fault);
    EXPECT_EQ(result.bytes, int64_t(bad.size()));
    EXPECT_STREQ(result.key, key);
    EXPECT_NE(std::string(kvrt_last_error()).find(c.says), std::string::npos)
        << kvrt_last_error();
    EXPECT_EQ(pagesInUse(pool.get()), pages) << "a rejected blob was mapped";
    ++expectedRejected;
  }
  kvrt_block_store_stats stats;
  ASSERT_EQ(kvrt_block_store_get_stats(store.get(), &stats), KVRT_OK);
  EXPECT_EQ(stats.rejected, expectedRejected);
  EXPECT_EQ(stats.hits, 0);
  EXPECT_EQ(stats.lookups, expectedRejected);
  int64_t byKind = 0;
  for (const Spoiler &c : cases)
    byKind += c.fault == KVRT_BLOCK_CORRUPT;
  EXPECT_EQ(stats.faults[KVRT_BLOCK_CORRUPT], byKind);
  EXPECT_EQ(stats.faults[KVRT_BLOCK_OTHER_MODEL], 1);
  EXPECT_EQ(stats.faults[KVRT_BLOCK_TRUNCATED], 4);

  // The good blob again: a hit.
  ASSERT_TRUE(raw->put(key, good, 0).ok());
  kvrt_view *out = nullptr;
  ASSERT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 0,
                                  tokens.data(), int64_t(tokens.size()),
                                  nullptr, &out, nullptr),
            KVRT_OK);
  ViewPtr hit(out);
  ASSERT_TRUE(hit);
  EXPECT_EQ(blobOf(hit.get(), tokens), good);
}

TEST_F(BlockStoreTest, ABlobLargerThanAllowedIsNotFetched) {
  std::vector<int32_t> tokens = ids(9);
  ViewPtr block = prefillBlock(tokens);
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  options.max_blob_bytes = 1000;
  StorePtr store(wrapBlockStore(createMemoryStore(), &options));
  ASSERT_TRUE(store);
  kvrt_block_result result;
  // Too large to store ...
  EXPECT_EQ(
      kvrt_block_store_save(store.get(), model.get(), block.get(), &result),
      KVRT_ERR_UNAVAILABLE);
  EXPECT_EQ(result.fault, KVRT_BLOCK_TOO_LARGE);
  // ... and to fetch when another writer put it there.
  std::string blob = blobOf(block.get(), tokens);
  ASSERT_TRUE(unwrapBlockStore(store.get())->put(result.key, blob, 0).ok());
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 0,
                                  tokens.data(), 9, nullptr, &out, &result),
            KVRT_ERR_UNAVAILABLE);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(result.fault, KVRT_BLOCK_TOO_LARGE);
  EXPECT_EQ(result.bytes, 0);
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

TEST_F(BlockStoreTest, TheKeyChangesWithEveryKeyedField) {
  std::vector<int32_t> tokens = ids(8, 20);
  auto key = [&](const kvrt_model *m, const Digest &fp, kvrt_kv_dtype dtype,
                 int64_t base, std::vector<int32_t> t) {
    return keyString("", makeBlockId(m, fp, dtype, base, std::move(t)));
  };
  std::string reference = key(model.get(), fingerprint, KVRT_KV_F32, 0, tokens);
  EXPECT_EQ(reference.size(), std::string("blk:v1:").size() + 64);
  EXPECT_EQ(reference.rfind("blk:v1:", 0), 0u);
  // Deterministic: the same fields, the same key (in another handle too).
  EXPECT_EQ(
      key(model.get(), modelFingerprint(model.get()), KVRT_KV_F32, 0, tokens),
      reference);

  // The weights: another seed of the same config.
  ModelPtr reseeded = syntheticModel(config, 8);
  Digest other = modelFingerprint(reseeded.get());
  EXPECT_NE(other, fingerprint);
  EXPECT_NE(key(reseeded.get(), other, KVRT_KV_F32, 0, tokens), reference);
  // The configuration alone (same fingerprint given): theta, the norm's
  // epsilon, the shape.
  kvrt_model_config theta = config;
  theta.rope_theta = 500000.0;
  ModelPtr thetaModel = syntheticModel(theta, 7);
  EXPECT_NE(key(thetaModel.get(), fingerprint, KVRT_KV_F32, 0, tokens),
            reference);
  EXPECT_NE(modelFingerprint(thetaModel.get()), fingerprint);
  kvrt_model_config eps = config;
  eps.rms_eps = 1e-6;
  ModelPtr epsModel = syntheticModel(eps, 7);
  EXPECT_NE(key(epsModel.get(), fingerprint, KVRT_KV_F32, 0, tokens),
            reference);
  // The K/V element type.
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F16, 0, tokens), reference);
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_BF16, 0, tokens), reference);
  // The base position.
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 1, tokens), reference);
  // The tokens: one id, their order, one more, one less.
  std::vector<int32_t> t = tokens;
  t[3] += 1;
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 0, t), reference);
  t = tokens;
  std::swap(t[0], t[1]);
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 0, t), reference);
  t = tokens;
  t.push_back(0);
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 0, t), reference);
  t = tokens;
  t.pop_back();
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 0, t), reference);
  // Token lists are length-delimited: [1, 2] at 0 is not [1] and [2]
  // somewhere else.
  EXPECT_NE(key(model.get(), fingerprint, KVRT_KV_F32, 0, {1, 2}),
            key(model.get(), fingerprint, KVRT_KV_F32, 0, {1}));

  // The store's prefix comes first; the C ABI computes the same key.
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  options.key_prefix = "team-a:";
  StorePtr store(wrapBlockStore(createMemoryStore(), &options));
  char cKey[KVRT_BLOCK_KEY_MAX];
  ASSERT_EQ(kvrt_block_store_key(store.get(), model.get(), KVRT_KV_F32, 0,
                                 tokens.data(), int64_t(tokens.size()), cKey),
            KVRT_OK);
  EXPECT_EQ(std::string(cKey), "team-a:" + reference);
  // The C ABI's element type is checked as an integer before any use.
  EXPECT_EQ(kvrt_block_store_key(store.get(), model.get(), kvrt_kv_dtype(7), 0,
                                 tokens.data(), int64_t(tokens.size()), cKey),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("dtype = 7 is not f32 (0), f16 (1) or bf16 (2)"),
            std::string::npos)
      << kvrt_last_error();
  char hex[65];
  ASSERT_EQ(kvrt_model_fingerprint(model.get(), hex), KVRT_OK);
  EXPECT_EQ(std::string(hex), toHex(fingerprint));
}

//===----------------------------------------------------------------------===//
// The in-process store
//===----------------------------------------------------------------------===//

TEST_F(BlockStoreTest, MemoryStoreSavesLoadsAndExpires) {
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  options.key_prefix = "t:";
  kvrt_block_store *opened = nullptr;
  ASSERT_EQ(kvrt_block_store_open("memory", &options, &opened), KVRT_OK);
  StorePtr store(opened);
  EXPECT_STREQ(kvrt_block_store_describe(store.get()),
               "memory (key prefix \"t:\", ttl none)");

  std::vector<int32_t> tokens = ids(7, 30);
  kvrt_view *out = nullptr;
  kvrt_block_result result;
  // A miss: no view, no fault.
  ASSERT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 2,
                                  tokens.data(), 7, nullptr, &out, &result),
            KVRT_OK);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(result.hit, 0);
  EXPECT_EQ(result.fault, KVRT_BLOCK_OK);
  EXPECT_EQ(std::string(result.key).rfind("t:blk:v1:", 0), 0u);
  std::string missKey = result.key;

  ViewPtr block = prefillBlock(tokens, 2);
  ASSERT_EQ(
      kvrt_block_store_save(store.get(), model.get(), block.get(), &result),
      KVRT_OK)
      << kvrt_last_error();
  EXPECT_EQ(std::string(result.key), missKey);
  BlockId id = makeBlockId(model.get(), fingerprint, KVRT_KV_F32, 2, tokens);
  EXPECT_EQ(result.bytes, int64_t(id.blobBytes()));

  ASSERT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 2,
                                  tokens.data(), 7, "s", &out, &result),
            KVRT_OK);
  ViewPtr loaded(out);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(result.hit, 1);
  EXPECT_EQ(result.bytes, int64_t(id.blobBytes()));
  EXPECT_EQ(answer(loaded.get(), ids(3, 50)), answer(block.get(), ids(3, 50)));
  // Another base position is another block: a miss.
  ASSERT_EQ(kvrt_block_store_load(store.get(), model.get(), pool.get(), 0,
                                  tokens.data(), 7, nullptr, &out, &result),
            KVRT_OK);
  EXPECT_EQ(out, nullptr);

  kvrt_block_store_stats stats;
  ASSERT_EQ(kvrt_block_store_get_stats(store.get(), &stats), KVRT_OK);
  EXPECT_EQ(stats.lookups, 3);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.stores, 1);
  EXPECT_EQ(stats.bytes_stored, int64_t(id.blobBytes()));
  EXPECT_EQ(stats.bytes_fetched, int64_t(id.blobBytes()));
  EXPECT_EQ(stats.rejected, 0);

  // A TTL: stored with 1 s, gone after it.
  options.ttl_seconds = 1;
  ASSERT_EQ(kvrt_block_store_open("memory", &options, &opened), KVRT_OK);
  StorePtr expiring(opened);
  ASSERT_EQ(
      kvrt_block_store_save(expiring.get(), model.get(), block.get(), nullptr),
      KVRT_OK);
  int64_t size = 0;
  EXPECT_TRUE(unwrapBlockStore(expiring.get())->lookup(missKey, size).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_EQ(kvrt_block_store_load(expiring.get(), model.get(), pool.get(), 2,
                                  tokens.data(), 7, nullptr, &out, &result),
            KVRT_OK);
  EXPECT_EQ(out, nullptr);
}

TEST_F(BlockStoreTest, OpeningChecksTheUrlAndOptions) {
  kvrt_block_store *store = nullptr;
  EXPECT_EQ(kvrt_block_store_open("s3://bucket", nullptr, &store),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("unknown block store"),
            std::string::npos);
  EXPECT_EQ(
      kvrt_block_store_open("redis://127.0.0.1:notaport", nullptr, &store),
      KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(store, nullptr);
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  options.ttl_seconds = -1;
  EXPECT_EQ(kvrt_block_store_open("memory", &options, &store),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("TTL"), std::string::npos);
  kvrt_block_store_options_init(&options);
  std::string longPrefix(65, 'p');
  options.key_prefix = longPrefix.c_str();
  EXPECT_EQ(kvrt_block_store_open("memory", &options, &store),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("prefix"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Contexts
//===----------------------------------------------------------------------===//

/// A context as kv-serve holds one: runs of several shapes. @a prefilled at
/// 0; @b a block prefilled at 0 and relocated after @a (offset 6); @c
/// prefilled over both; then the first two tokens cut off, so that the first
/// run starts inside a page.
class ContextBlobTest : public BlockStoreTest {
protected:
  void SetUp() override {
    BlockStoreTest::SetUp();
    ViewPtr a = prefillBlock(ids(6, 20));
    kvrt_view *labelled = nullptr;
    ViewPtr b = prefillBlock(ids(5, 40));
    ViewPtr moved = shifted(b.get(), 6);
    ViewPtr ab = concat(a.get(), moved.get());
    std::vector<float> scratch;
    ASSERT_EQ(backend->prefill(Forward(), model.get(), ab.get(),
                               ids(3, 60).data(), 3, 11, "c",
                               kvir::LogitRows::last(), &scratch, &labelled),
              KVRT_OK)
        << kvrt_last_error();
    ViewPtr abc(labelled);
    view = slice(abc.get(), 2, 14);
    for (int64_t r = 0; r < kvrt_view_num_runs(view.get()); ++r) {
      kvrt_run run;
      ASSERT_EQ(kvrt_view_get_run(view.get(), r, &run), KVRT_OK);
      tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
    }
    logits.assign(size_t(config.vocab_size), 0.f);
    for (size_t i = 0; i < logits.size(); ++i)
      logits[i] = float(i) * 0.25f - 3;
  }

  ContextId idOf(const std::string &name, std::vector<int32_t> t) {
    return makeContextId(model.get(), fingerprint, KVRT_KV_F32, name,
                         std::move(t));
  }
  std::string encode(const kvrt_view *v) {
    std::string blob, error;
    EXPECT_TRUE(encodeContextBlob(v, idOf("ctx_1", tokens), logits.data(),
                                  int64_t(logits.size()), blob, error))
        << error;
    return blob;
  }

  ViewPtr view;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

/// The runs of a view: tokens, positions, offsets and labels.
std::vector<std::string> runsOf(const kvrt_view *view) {
  std::vector<std::string> out;
  for (int64_t r = 0; r < kvrt_view_num_runs(view); ++r) {
    kvrt_run run;
    EXPECT_EQ(kvrt_view_get_run(view, r, &run), KVRT_OK);
    std::string text = std::to_string(run.n_tokens) + "@" +
                       std::to_string(run.base_pos) + "+" +
                       std::to_string(run.delta) + " " +
                       (run.label ? run.label : "(none)") + ":";
    for (int64_t i = 0; i < run.n_tokens; ++i)
      text += " " + std::to_string(run.tokens[i]);
    out.push_back(text);
  }
  return out;
}

TEST_F(ContextBlobTest, RoundTripIsBitExact) {
  std::vector<std::string> runs = runsOf(view.get());
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0], "4@2+0 block: 22 23 24 25");
  EXPECT_EQ(runs[1], "5@0+6 block: 40 41 42 43 44");
  EXPECT_EQ(runs[2], "3@11+0 c: 60 61 62");
  std::string blob = encode(view.get());
  ContextId id = idOf("ctx_1", tokens);
  std::string why;
  ASSERT_EQ(checkContextBlob(blob, id, why), KVRT_BLOCK_OK) << why;
  // Into a pool of another page size: the same runs, the same K/V (the
  // blob again) and the same answer to a question after it.
  PoolPtr other = poolFor(model.get(), 64, /*pageTokens=*/16);
  kvrt_view *mapped = nullptr;
  std::vector<float> row;
  ASSERT_EQ(mapContextBlob(blob, id, other.get(), &mapped, row), KVRT_OK)
      << kvrt_last_error();
  ViewPtr held(mapped);
  EXPECT_EQ(runsOf(mapped), runs);
  EXPECT_EQ(row, logits);
  EXPECT_EQ(encode(mapped), blob);
  EXPECT_EQ(answer(mapped, ids(4, 50)), answer(view.get(), ids(4, 50)));
  // Without logits.
  std::string bare, error;
  ASSERT_TRUE(encodeContextBlob(view.get(), id, nullptr, 0, bare, error));
  ASSERT_EQ(checkContextBlob(bare, id, why), KVRT_BLOCK_OK) << why;
  ASSERT_EQ(mapContextBlob(bare, id, pool.get(), &mapped, row), KVRT_OK);
  kvrt_view_release(mapped);
  EXPECT_TRUE(row.empty());
  // What cannot be encoded.
  EXPECT_FALSE(encodeContextBlob(view.get(), idOf("ctx_1", ids(12)), nullptr, 0,
                                 bare, error));
  EXPECT_NE(error.find("other tokens"), std::string::npos) << error;
  EXPECT_FALSE(
      encodeContextBlob(view.get(), id, logits.data(), 3, bare, error));
  EXPECT_NE(error.find("no logits or a row"), std::string::npos) << error;
}

/// Rewrites the payload checksum and the header checksum of a context blob
/// after its payload changed.
void resealContext(std::string &b) {
  uint64_t sum =
      xxh64(b.data() + kContextHeaderBytes, b.size() - kContextHeaderBytes);
  setField<uint64_t>(b, 112, sum);
}

TEST_F(ContextBlobTest, EveryBadBlobIsRejectedCountedAndNeverMapped) {
  const std::string good = encode(view.get());
  std::vector<Spoiler> cases = {
      {"bad magic", [](std::string &b) { b[0] = 'X'; }, KVRT_BLOCK_CORRUPT,
       "bad magic"},
      {"block magic", [](std::string &b) { b[4] = 'B'; }, KVRT_BLOCK_CORRUPT,
       "not a KVIR context"},
      {"header byte", [](std::string &b) { b[45] ^= 1; }, KVRT_BLOCK_CORRUPT,
       "header checksum"},
      {"format version", [](std::string &b) { setField<uint32_t>(b, 8, 2); },
       KVRT_BLOCK_MISMATCH, "format 2"},
      {"other model",
       [](std::string &b) { setField<uint8_t>(b, 72, uint8_t(b[72] ^ 0x80)); },
       KVRT_BLOCK_OTHER_MODEL, "another model"},
      {"layers",
       [&](std::string &b) {
         setField<uint32_t>(b, 24, uint32_t(config.n_layers + 1));
       },
       KVRT_BLOCK_MISMATCH, "another shape"},
      {"other name",
       [](std::string &b) { setField<uint8_t>(b, 104, uint8_t(b[104] ^ 1)); },
       KVRT_BLOCK_MISMATCH, "another context"},
      {"token count", [](std::string &b) { setField<uint64_t>(b, 48, 11); },
       KVRT_BLOCK_MISMATCH, "another context"},
      {"logit count", [](std::string &b) { setField<uint64_t>(b, 56, 3); },
       KVRT_BLOCK_MISMATCH, "3 logits"},
      {"payload byte", [](std::string &b) { b[b.size() - 9] ^= 0x40; },
       KVRT_BLOCK_CORRUPT, "payload checksum"},
      {"empty run",
       [](std::string &b) {
         setField<int64_t>(b, kContextHeaderBytes, 0);
         resealContext(b);
       },
       KVRT_BLOCK_MISMATCH, "run 0 holds 0 tokens"},
      {"run beyond the positions",
       [](std::string &b) {
         setField<int64_t>(b, kContextHeaderBytes + 8, int64_t(1) << 53);
         resealContext(b);
       },
       KVRT_BLOCK_MISMATCH, "outside [0, 2^53)"},
      {"negative position",
       [](std::string &b) {
         setField<int64_t>(b, kContextHeaderBytes + 32 + 16, -1);
         resealContext(b);
       },
       KVRT_BLOCK_MISMATCH, "outside [0, 2^53)"},
      {"label longer than the blob",
       [](std::string &b) {
         setField<uint32_t>(b, kContextHeaderBytes + 24, 1000000);
         resealContext(b);
       },
       KVRT_BLOCK_MISMATCH, "its sections take"},
      {"token id",
       [](std::string &b) {
         // Labels "block", "block", "c" follow the 3 runs' table.
         b[kContextHeaderBytes + 3 * 32 + 11] ^= 1;
         resealContext(b);
       },
       KVRT_BLOCK_MISMATCH, "token ids differ"},
      {"truncated payload", [](std::string &b) { b.resize(b.size() - 1); },
       KVRT_BLOCK_TRUNCATED, "truncated blob"},
      {"truncated header", [](std::string &b) { b.resize(50); },
       KVRT_BLOCK_TRUNCATED, "shorter than the 128-byte header"},
      {"overlong", [](std::string &b) { b += "tail"; }, KVRT_BLOCK_TRUNCATED,
       "overlong"},
  };
  ContextId id = idOf("ctx_1", tokens);
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  StorePtr store(wrapBlockStore(createMemoryStore(), &options));
  ASSERT_TRUE(store);
  BlockStore *raw = unwrapBlockStore(store.get());
  std::string key = contextKeyString("kvir:", "ctx_1"), why;
  EXPECT_EQ(key, "kvir:ctx:v1:ctx_1");
  int64_t pages = pagesInUse(pool.get()), rejected = 0;
  for (const Spoiler &c : cases) {
    SCOPED_TRACE(c.name);
    std::string bad = good;
    c.spoil(bad);
    EXPECT_EQ(checkContextBlob(bad, id, why), c.fault) << why;
    EXPECT_NE(why.find(c.says), std::string::npos) << why;
    ASSERT_TRUE(raw->put(key, bad, 0).ok());
    kvrt_view *out = nullptr;
    std::vector<float> row(logits.size());
    int64_t n = -1;
    kvrt_block_result result;
    EXPECT_EQ(kvrt_block_store_load_context(
                  store.get(), model.get(), pool.get(), "ctx_1", tokens.data(),
                  int64_t(tokens.size()), row.data(), int64_t(row.size()), &n,
                  &out, &result),
              KVRT_ERR_UNAVAILABLE);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(n, 0);
    EXPECT_EQ(result.fault, c.fault);
    EXPECT_STREQ(result.key, key.c_str());
    EXPECT_EQ(pagesInUse(pool.get()), pages) << "a rejected blob was mapped";
    ++rejected;
  }
  kvrt_block_store_stats stats;
  ASSERT_EQ(kvrt_block_store_get_stats(store.get(), &stats), KVRT_OK);
  EXPECT_EQ(stats.rejected, rejected);
  EXPECT_EQ(stats.hits, 0);
}

TEST_F(ContextBlobTest, StoreSavesLoadsAndRemovesContexts) {
  kvrt_block_store_options options;
  kvrt_block_store_options_init(&options);
  options.key_prefix = "t:alice:";
  kvrt_block_store *opened = nullptr;
  ASSERT_EQ(kvrt_block_store_open("memory", &options, &opened), KVRT_OK);
  StorePtr store(opened);
  kvrt_block_result result;
  ASSERT_EQ(kvrt_block_store_save_context(store.get(), model.get(), "ctx_1",
                                          view.get(), logits.data(),
                                          int64_t(logits.size()), &result),
            KVRT_OK)
      << kvrt_last_error();
  EXPECT_STREQ(result.key, "t:alice:ctx:v1:ctx_1");
  EXPECT_EQ(result.bytes, int64_t(encode(view.get()).size()));

  auto load = [&](const char *name, const std::vector<int32_t> &t,
                  std::vector<float> &row, kvrt_view **out) {
    row.assign(logits.size(), 0.f);
    int64_t n = 0;
    kvrt_status s = kvrt_block_store_load_context(
        store.get(), model.get(), pool.get(), name, t.data(), int64_t(t.size()),
        row.data(), int64_t(row.size()), &n, out, &result);
    row.resize(size_t(n));
    return s;
  };
  std::vector<float> row;
  kvrt_view *out = nullptr;
  ASSERT_EQ(load("ctx_1", tokens, row, &out), KVRT_OK) << kvrt_last_error();
  ViewPtr loaded(out);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(result.hit, 1);
  EXPECT_EQ(runsOf(loaded.get()), runsOf(view.get()));
  EXPECT_EQ(row, logits);
  EXPECT_EQ(answer(loaded.get(), ids(3, 10)), answer(view.get(), ids(3, 10)));
  // The tokens the caller expects are checked.
  std::vector<int32_t> other = tokens;
  other.back() ^= 1;
  EXPECT_EQ(load("ctx_1", other, row, &out), KVRT_ERR_UNAVAILABLE);
  EXPECT_EQ(result.fault, KVRT_BLOCK_MISMATCH);
  // Another name misses; a removed context misses.
  EXPECT_EQ(load("ctx_2", tokens, row, &out), KVRT_OK);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(result.hit, 0);
  ASSERT_EQ(kvrt_block_store_remove_context(store.get(), "ctx_1", &result),
            KVRT_OK);
  EXPECT_EQ(load("ctx_1", tokens, row, &out), KVRT_OK);
  EXPECT_EQ(out, nullptr);
  // Removing what is not there is no fault.
  EXPECT_EQ(kvrt_block_store_remove_context(store.get(), "ctx_1", nullptr),
            KVRT_OK);
  // Names are checked, and room for the logits.
  EXPECT_EQ(kvrt_block_store_save_context(store.get(), model.get(), "a b",
                                          view.get(), nullptr, 0, nullptr),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("letters, digits"),
            std::string::npos);
  ASSERT_EQ(kvrt_block_store_save_context(store.get(), model.get(), "ctx_1",
                                          view.get(), logits.data(),
                                          int64_t(logits.size()), nullptr),
            KVRT_OK);
  int64_t n = 0;
  float small[2];
  int64_t pages = pagesInUse(pool.get());
  EXPECT_EQ(kvrt_block_store_load_context(
                store.get(), model.get(), pool.get(), "ctx_1", tokens.data(),
                int64_t(tokens.size()), small, 2, &n, &out, nullptr),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(pagesInUse(pool.get()), pages);
  kvrt_block_store_stats stats;
  ASSERT_EQ(kvrt_block_store_get_stats(store.get(), &stats), KVRT_OK);
  EXPECT_EQ(stats.stores, 2);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.misses, 2);
}

//===----------------------------------------------------------------------===//
// Faults through the execution runtime
//===----------------------------------------------------------------------===//

/// A memory store whose next operations fail as told.
class FaultyStore final : public BlockStore {
public:
  std::string url() const override { return "faulty"; }
  StoreStatus lookup(const std::string &key, int64_t &size) override {
    if (lookupFault)
      return StoreStatus::failure(lookupFault, "injected lookup fault");
    return inner->lookup(key, size);
  }
  StoreStatus fetch(const std::string &key, int64_t maxBytes,
                    std::string &blob) override {
    if (evictBeforeFetch)
      return StoreStatus::missing();
    if (fetchFault)
      return StoreStatus::failure(fetchFault, "injected fetch fault");
    return inner->fetch(key, maxBytes, blob);
  }
  StoreStatus put(const std::string &key, std::string_view blob,
                  int64_t ttl) override {
    if (putFault)
      return StoreStatus::failure(putFault, "injected put fault");
    return inner->put(key, blob, ttl);
  }
  StoreStatus remove(const std::string &key) override {
    if (putFault)
      return StoreStatus::failure(putFault, "injected remove fault");
    return inner->remove(key);
  }

  std::unique_ptr<BlockStore> inner = createMemoryStore();
  kvrt_block_fault lookupFault = KVRT_BLOCK_OK, fetchFault = KVRT_BLOCK_OK,
                   putFault = KVRT_BLOCK_OK;
  bool evictBeforeFetch = false;
};

class BlockFaultTest : public BlockStoreTest {
protected:
  void SetUp() override {
    BlockStoreTest::SetUp();
    auto owned = std::make_unique<FaultyStore>();
    faulty = owned.get();
    store.reset(wrapBlockStore(std::move(owned), nullptr));
    ASSERT_TRUE(store);
  }

  ContextPtr context(int32_t policy) {
    ContextPtr ctx(createExecContext(*backend, model.get(), pool.get()));
    kvrt_exec_set_block_store(ctx.get(), store.get(), policy);
    return ctx;
  }

  kvrt_view *loadBlock(kvrt_exec_context *ctx,
                       const std::vector<int32_t> &tokens) {
    kvrt_exec_tokens *t =
        kvrt_exec_tokens_constant(ctx, 0, tokens.data(), tokens.size());
    return kvrt_exec_load_block(ctx, 3, nullptr, nullptr, model.get(), t, 0, 0,
                                "blk");
  }

  kvrt_exec_block_event event(kvrt_exec_context *ctx, int64_t i) {
    kvrt_exec_block_event e;
    kvrt_exec_get_block_event(ctx, i, &e);
    return e;
  }

  FaultyStore *faulty = nullptr;
  StorePtr store;
};

TEST_F(BlockFaultTest, HitMissAndStoreThroughTheExecRuntime) {
  std::vector<int32_t> tokens = ids(6, 9);
  ContextPtr first = context(KVRT_EXEC_STORE_FAIL);
  kvrt_view *prefilled = loadBlock(first.get(), tokens);
  ASSERT_NE(prefilled, nullptr) << kvrt_exec_error_message(first.get());
  ASSERT_EQ(kvrt_exec_num_block_events(first.get()), 2);
  EXPECT_EQ(event(first.get(), 0).outcome, KVRT_EXEC_BLOCK_MISS);
  EXPECT_EQ(event(first.get(), 1).outcome, KVRT_EXEC_BLOCK_STORED);
  kvrt_exec_work setup;
  kvrt_exec_get_work(first.get(), 0, &setup);
  EXPECT_EQ(setup.prefill_tokens, 6);

  ContextPtr second = context(KVRT_EXEC_STORE_FAIL);
  kvrt_view *fetched = loadBlock(second.get(), tokens);
  ASSERT_NE(fetched, nullptr) << kvrt_exec_error_message(second.get());
  ASSERT_EQ(kvrt_exec_num_block_events(second.get()), 1);
  kvrt_exec_block_event hit = event(second.get(), 0);
  EXPECT_EQ(hit.outcome, KVRT_EXEC_BLOCK_HIT);
  EXPECT_GT(hit.bytes, 0);
  kvrt_exec_get_work(second.get(), 0, &setup);
  EXPECT_EQ(setup.prefill_tokens, 0);
  EXPECT_EQ(blobOf(fetched, tokens), blobOf(prefilled, tokens));

  // kv.store_block of a block, and the refusal of a shifted view.
  std::vector<int32_t> more = ids(5, 45);
  kvrt_view *empty = kvrt_exec_empty(second.get(), 0);
  kvrt_view *other = nullptr;
  kvrt_exec_tokens *t =
      kvrt_exec_tokens_constant(second.get(), 0, more.data(), more.size());
  kvrt_exec_prefill(second.get(), 1, nullptr, nullptr, model.get(), &empty,
                    nullptr, 1, t, 0, 0, "b", 0, -1, &other);
  ASSERT_NE(other, nullptr) << kvrt_exec_error_message(second.get());
  kvrt_exec_store_block(second.get(), 4, model.get(), other);
  ASSERT_FALSE(kvrt_exec_failed(second.get()))
      << kvrt_exec_error_message(second.get());
  EXPECT_EQ(event(second.get(), 1).outcome, KVRT_EXEC_BLOCK_STORED);
  kvrt_view *moved = kvrt_exec_rope_shift(second.get(), 5, other, 2);
  ASSERT_NE(moved, nullptr);
  kvrt_exec_store_block(second.get(), 6, model.get(), moved);
  EXPECT_TRUE(kvrt_exec_failed(second.get()));
  EXPECT_NE(std::string(kvrt_exec_error_message(second.get()))
                .find("the cache is not a block"),
            std::string::npos);
}

/// One injected fault and the fault kind the runtime must report.
struct Injected {
  const char *name;
  std::function<void(FaultyStore &)> inject;
  kvrt_block_fault fault;
};

TEST_F(BlockFaultTest, FaultsFollowThePolicyAndLeaveCachesIntact) {
  std::vector<int32_t> tokens = ids(6, 9);
  std::vector<Injected> cases = {
      {"unreachable",
       [](FaultyStore &s) { s.lookupFault = KVRT_BLOCK_UNREACHABLE; },
       KVRT_BLOCK_UNREACHABLE},
      {"timeout", [](FaultyStore &s) { s.fetchFault = KVRT_BLOCK_TIMEOUT; },
       KVRT_BLOCK_TIMEOUT},
      {"evicted", [](FaultyStore &s) { s.evictBeforeFetch = true; },
       KVRT_BLOCK_EVICTED},
      {"store error",
       [](FaultyStore &s) { s.fetchFault = KVRT_BLOCK_STORE_ERROR; },
       KVRT_BLOCK_STORE_ERROR},
      {"corrupt",
       [&](FaultyStore &s) {
         char key[KVRT_BLOCK_KEY_MAX];
         ASSERT_EQ(kvrt_block_store_key(store.get(), model.get(), KVRT_KV_F32,
                                        0, tokens.data(), 6, key),
                   KVRT_OK);
         std::string blob;
         ASSERT_TRUE(s.inner->fetch(key, 1 << 30, blob).ok());
         blob[blob.size() - 3] ^= 0x10;
         ASSERT_TRUE(s.inner->put(key, blob, 0).ok());
       },
       KVRT_BLOCK_CORRUPT},
  };

  for (int32_t policy : {KVRT_EXEC_STORE_FALLBACK, KVRT_EXEC_STORE_FAIL})
    for (const Injected &c : cases) {
      SCOPED_TRACE(std::string(c.name) +
                   (policy == KVRT_EXEC_STORE_FAIL ? ", fail" : ", fallback"));
      // A fresh store holding the good block.
      auto owned = std::make_unique<FaultyStore>();
      faulty = owned.get();
      store.reset(wrapBlockStore(std::move(owned), nullptr));
      ViewPtr good = prefillBlock(tokens);
      ASSERT_EQ(
          kvrt_block_store_save(store.get(), model.get(), good.get(), nullptr),
          KVRT_OK);
      std::string goodBlob = blobOf(good.get(), tokens);

      ContextPtr ctx = context(policy);
      // A cache built before the fault, and what it holds.
      std::vector<int32_t> history = ids(11, 20);
      kvrt_view *empty = kvrt_exec_empty(ctx.get(), 0);
      kvrt_view *built = nullptr;
      kvrt_exec_tokens *t = kvrt_exec_tokens_constant(
          ctx.get(), 0, history.data(), history.size());
      kvrt_exec_prefill(ctx.get(), 1, nullptr, nullptr, model.get(), &empty,
                        nullptr, 1, t, 0, 0, "h", 0, -1, &built);
      ASSERT_NE(built, nullptr) << kvrt_exec_error_message(ctx.get());
      std::string before = blobOf(built, history);
      std::vector<float> answerBefore = answer(built, ids(3, 40));
      int64_t pages = pagesInUse(pool.get());

      c.inject(*faulty);
      kvrt_view *block = loadBlock(ctx.get(), tokens);
      ASSERT_GE(kvrt_exec_num_block_events(ctx.get()), 1);
      kvrt_exec_block_event e = event(ctx.get(), 0);
      EXPECT_EQ(e.outcome, KVRT_EXEC_BLOCK_FAULT);
      EXPECT_EQ(e.fault, c.fault);
      EXPECT_NE(std::string(e.message), "");

      if (policy == KVRT_EXEC_STORE_FALLBACK) {
        // Prefilled locally: the same K/V as the good block.
        ASSERT_NE(block, nullptr) << kvrt_exec_error_message(ctx.get());
        EXPECT_FALSE(kvrt_exec_failed(ctx.get()));
        EXPECT_EQ(e.fell_back, 1);
        EXPECT_EQ(blobOf(block, tokens), goodBlob);
        kvrt_exec_work setup;
        kvrt_exec_get_work(ctx.get(), 0, &setup);
        EXPECT_EQ(setup.prefill_tokens, 11 + 6);
      } else {
        EXPECT_EQ(block, nullptr);
        EXPECT_TRUE(kvrt_exec_failed(ctx.get()));
        EXPECT_EQ(kvrt_exec_error_status(ctx.get()), KVRT_ERR_UNAVAILABLE);
        std::string message = kvrt_exec_error_message(ctx.get());
        EXPECT_NE(message.find("the policy is to fail"), std::string::npos)
            << message;
        EXPECT_EQ(kvrt_exec_error_site(ctx.get()), 3);
        // Nothing was mapped.
        EXPECT_EQ(pagesInUse(pool.get()), pages);
      }
      // The cache built before is bit-identical and answers the same.
      EXPECT_EQ(blobOf(built, history), before);
      EXPECT_EQ(answer(built, ids(3, 40)), answerBefore);
    }
}

TEST_F(BlockFaultTest, AFailedStoreFollowsThePolicy) {
  std::vector<int32_t> tokens = ids(6, 9);
  faulty->putFault = KVRT_BLOCK_STORE_ERROR;
  ContextPtr lenient = context(KVRT_EXEC_STORE_FALLBACK);
  kvrt_view *block = loadBlock(lenient.get(), tokens);
  ASSERT_NE(block, nullptr);
  ASSERT_EQ(kvrt_exec_num_block_events(lenient.get()), 2);
  EXPECT_EQ(event(lenient.get(), 0).outcome, KVRT_EXEC_BLOCK_MISS);
  kvrt_exec_block_event put = event(lenient.get(), 1);
  EXPECT_EQ(put.outcome, KVRT_EXEC_BLOCK_FAULT);
  EXPECT_EQ(put.fault, KVRT_BLOCK_STORE_ERROR);
  EXPECT_EQ(put.fell_back, 1);

  ContextPtr strict = context(KVRT_EXEC_STORE_FAIL);
  EXPECT_EQ(loadBlock(strict.get(), tokens), nullptr);
  EXPECT_TRUE(kvrt_exec_failed(strict.get()));
  EXPECT_NE(std::string(kvrt_exec_error_message(strict.get()))
                .find("injected put fault"),
            std::string::npos);

  // An unreachable store is not asked again to store the block it failed
  // to look up.
  faulty->putFault = KVRT_BLOCK_OK;
  faulty->lookupFault = KVRT_BLOCK_UNREACHABLE;
  ContextPtr down = context(KVRT_EXEC_STORE_FALLBACK);
  ASSERT_NE(loadBlock(down.get(), tokens), nullptr);
  ASSERT_EQ(kvrt_exec_num_block_events(down.get()), 2);
  EXPECT_EQ(event(down.get(), 1).outcome, KVRT_EXEC_BLOCK_SKIPPED);
}

} // namespace
