//===- BlockBlobFuzzer.cpp - Fuzzes blobs fetched from a block store ------===//
//
// A blob from a shared store is untrusted input: checkBlob (checkContextBlob)
// must reject whatever is not the block (the context) asked for, before a
// page is allocated, and a blob it accepts must map to exactly the block
// (context) that was stored. The block is 9 tokens prefilled by the oracle
// on a tiny synthetic model; the context is that block and 3 more tokens in
// a labelled run, with the logits of its last token; both are encoded once
// at start-up. The first byte of an input chooses its form:
//   bit 1: 0 a block blob, 1 a context blob;
//   bit 0: 0 the rest is the blob;
//          1 the rest patches the valid blob: a length to cut it to (2 bytes,
//         little-endian; 0xFFFF keeps it whole) then (offset, byte) pairs of
//         3 bytes each XORed into it, so that the fuzzer starts next to a
//         blob that passes and finds every check's edge.
// Properties: no crash or leak; a rejected blob leaves the pool as it was;
// an accepted blob maps to a view that encodes back to the same bytes.
// KVIR_FUZZ_VERBOSE=1 prints each blob's verdict.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/reference/Reference.h"
#include "runtime/store/BlockBlob.h"
#include "runtime/store/ContextBlob.h"
#include "test/fuzz/FuzzSupport.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using kvir::fuzz::fail;
using namespace kvir::store;

namespace {

kvrt_model *model = nullptr;
kvrt_pool *pool = nullptr;
BlockId id;
std::string validBlob;
ContextId contextId;
std::string validContextBlob;

int64_t pagesInUse() {
  kvrt_pool_stats stats;
  kvrt_pool_get_stats(pool, &stats);
  return stats.pages_in_use;
}

void check(std::string_view blob) {
  int64_t before = pagesInUse();
  std::string message;
  kvrt_block_fault fault = checkBlob(blob, id, message);
  if (std::getenv("KVIR_FUZZ_VERBOSE"))
    std::fprintf(stderr, "%zu bytes: %s\n", blob.size(),
                 fault == KVRT_BLOCK_OK ? "accepted" : message.c_str());
  if (fault != KVRT_BLOCK_OK) {
    if (message.empty())
      fail("a rejected blob has no message");
    if (pagesInUse() != before)
      fail("checking a blob allocated pages");
    return;
  }
  kvrt_view *view = nullptr;
  if (mapBlob(blob, id, pool, "fuzz", &view) != KVRT_OK) {
    if (pagesInUse() != before)
      fail("a failed mapping left pages allocated");
    return;
  }
  std::string again, error;
  if (!encodeBlob(view, id, again, error))
    fail("a mapped blob does not encode: " + error);
  if (again != blob)
    fail("an accepted blob maps to a different block");
  kvrt_view_release(view);
  if (pagesInUse() != before)
    fail("a released mapping left pages allocated");
}

void checkContext(std::string_view blob) {
  int64_t before = pagesInUse();
  std::string message;
  kvrt_block_fault fault = checkContextBlob(blob, contextId, message);
  if (std::getenv("KVIR_FUZZ_VERBOSE"))
    std::fprintf(stderr, "context, %zu bytes: %s\n", blob.size(),
                 fault == KVRT_BLOCK_OK ? "accepted" : message.c_str());
  if (fault != KVRT_BLOCK_OK) {
    if (message.empty())
      fail("a rejected context blob has no message");
    if (pagesInUse() != before)
      fail("checking a context blob allocated pages");
    return;
  }
  kvrt_view *view = nullptr;
  std::vector<float> logits;
  if (mapContextBlob(blob, contextId, pool, &view, logits) != KVRT_OK) {
    if (pagesInUse() != before)
      fail("a failed context mapping left pages allocated");
    return;
  }
  std::string again, error;
  if (!encodeContextBlob(view, contextId, logits.data(), int64_t(logits.size()),
                         again, error))
    fail("a mapped context blob does not encode: " + error);
  if (again != blob)
    fail("an accepted context blob maps to a different context");
  kvrt_view_release(view);
  if (pagesInUse() != before)
    fail("a released context mapping left pages allocated");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  kvrt_model_config config;
  kvrt_model_config_init(&config);
  config.dim = 16;
  config.hidden_dim = 32;
  config.n_layers = 2;
  config.n_heads = 2;
  config.n_kv_heads = 1;
  config.vocab_size = 32;
  config.seq_len = 64;
  kvrt_pool_config poolConfig;
  if (kvrt_model_synthetic(&config, 3, &model) != KVRT_OK ||
      kvrt_pool_config_for_model(model, &poolConfig) != KVRT_OK)
    fail(std::string("model: ") + kvrt_last_error());
  poolConfig.page_tokens = 4;
  poolConfig.capacity_pages = 64;
  if (kvrt_pool_create(&poolConfig, &pool) != KVRT_OK)
    fail(std::string("pool: ") + kvrt_last_error());
  kvrt_view *empty = nullptr, *block = nullptr;
  std::vector<int32_t> tokens = {1, 5, 9, 2, 30, 17, 4, 4, 11};
  std::vector<float> logits;
  if (kvrt_view_create(pool, &empty) != KVRT_OK ||
      kvir::reference::prefill(model, empty, tokens.data(),
                               int64_t(tokens.size()), 0, nullptr, &logits,
                               &block) != KVRT_OK)
    fail(std::string("prefill: ") + kvrt_last_error());
  id = makeBlockId(model, modelFingerprint(model), KVRT_KV_F32, 0, tokens);
  std::string error;
  if (!encodeBlob(block, id, validBlob, error))
    fail("encoding the block: " + error);
  kvrt_view *context = nullptr;
  std::vector<int32_t> more = {7, 3, 21};
  if (kvir::reference::prefill(model, block, more.data(), int64_t(more.size()),
                               int64_t(tokens.size()), "turn", &logits,
                               &context) != KVRT_OK)
    fail(std::string("prefill: ") + kvrt_last_error());
  tokens.insert(tokens.end(), more.begin(), more.end());
  contextId = makeContextId(model, modelFingerprint(model), KVRT_KV_F32,
                            "ctx_fuzz", tokens);
  std::vector<float> last(logits.end() - config.vocab_size, logits.end());
  if (!encodeContextBlob(context, contextId, last.data(), int64_t(last.size()),
                         validContextBlob, error))
    fail("encoding the context: " + error);
  kvrt_view_release(context);
  kvrt_view_release(block);
  kvrt_view_release(empty);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  bool context = data[0] & 2;
  auto verify = [&](std::string_view blob) {
    if (context)
      checkContext(blob);
    else
      check(blob);
  };
  if ((data[0] & 1) == 0) {
    verify(
        std::string_view(reinterpret_cast<const char *>(data + 1), size - 1));
    return 0;
  }
  std::string blob = context ? validContextBlob : validBlob;
  if (size >= 3) {
    size_t cut = size_t(data[1]) | size_t(data[2]) << 8;
    if (cut != 0xFFFF && cut < blob.size())
      blob.resize(cut);
  }
  for (size_t i = 3; i + 2 < size; i += 3) {
    size_t offset = size_t(data[i]) | size_t(data[i + 1]) << 8;
    if (!blob.empty())
      blob[offset % blob.size()] ^= char(data[i + 2]);
  }
  verify(blob);
  return 0;
}
