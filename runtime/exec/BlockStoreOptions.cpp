//===- BlockStoreOptions.cpp - The block store of a runner ------*- C++ -*-===//

#include "runtime/exec/BlockStoreOptions.h"

#include "runtime/core/Support.h"

#include <climits>

using namespace kvir::exec;
using kvrt::str;

bool kvir::exec::openBlockStore(const StoreOptions &options, BlockStoreRef &out,
                                BlockStoreBinding &binding,
                                std::string &error) {
  out = BlockStoreRef(nullptr, kvrt_block_store_release);
  binding = BlockStoreBinding{};
  if (options.url.empty()) {
    const char *orphan = options.prefixGiven    ? "--kv-store-prefix"
                         : options.ttlGiven     ? "--kv-store-ttl"
                         : options.timeoutGiven ? "--kv-store-timeout-ms"
                         : options.policyGiven  ? "--kv-store-policy"
                                                : nullptr;
    if (orphan) {
      error = str(orphan, " needs --kv-store (memory or redis://HOST:PORT)");
      return false;
    }
    return true;
  }
  if (options.policy == "fallback") {
    binding.policy = KVRT_EXEC_STORE_FALLBACK;
  } else if (options.policy == "fail") {
    binding.policy = KVRT_EXEC_STORE_FAIL;
  } else {
    error = str("--kv-store-policy: unknown policy '", options.policy,
                "' (expected fallback or fail)");
    return false;
  }
  if (options.ttlSeconds < 0) {
    error =
        str("--kv-store-ttl must not be negative, got ", options.ttlSeconds);
    return false;
  }
  if (options.timeoutMs <= 0 || options.timeoutMs > INT32_MAX) {
    error = str("--kv-store-timeout-ms must be in [1, 2^31), got ",
                options.timeoutMs);
    return false;
  }
  kvrt_block_store_options o;
  kvrt_block_store_options_init(&o);
  o.key_prefix = options.prefix.c_str();
  o.ttl_seconds = options.ttlSeconds;
  o.connect_timeout_ms = int32_t(options.timeoutMs);
  o.io_timeout_ms = int32_t(options.timeoutMs);
  kvrt_block_store *store = nullptr;
  if (kvrt_block_store_open(options.url.c_str(), &o, &store) != KVRT_OK) {
    error = str("--kv-store: ", kvrt_last_error());
    return false;
  }
  out.reset(store);
  binding.store = store;
  return true;
}

const char *kvir::exec::storePolicyName(int32_t policy) {
  return policy == KVRT_EXEC_STORE_FAIL ? "fail" : "fallback";
}

std::string kvir::exec::describeBlockEvent(const BlockEvent &e) {
  const kvrt_exec_block_event &v = e.event;
  std::string what =
      str(v.op == KVRT_EXEC_BLOCK_LOAD ? "kv.load_block" : "kv.store_block",
          " (", v.tokens, " tokens at ", v.base, "): ");
  auto ms = [](double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f ms", seconds * 1e3);
    return std::string(buf);
  };
  switch (v.outcome) {
  case KVRT_EXEC_BLOCK_HIT:
    what += str("hit, ", v.bytes, " bytes fetched in ", ms(v.seconds),
                ", no prefill");
    break;
  case KVRT_EXEC_BLOCK_MISS:
    what += "miss, prefilled";
    break;
  case KVRT_EXEC_BLOCK_STORED:
    what += str("stored, ", v.bytes, " bytes in ", ms(v.seconds));
    break;
  case KVRT_EXEC_BLOCK_FAULT:
    what +=
        str("store fault (", kvrt_block_fault_name(v.fault), "): ", e.message);
    if (v.fell_back)
      what +=
          v.op == KVRT_EXEC_BLOCK_LOAD ? "; prefilled locally" : "; not stored";
    break;
  case KVRT_EXEC_BLOCK_SKIPPED:
    what += "not stored: the store failed on this block's lookup";
    break;
  case KVRT_EXEC_BLOCK_NO_STORE:
    what += v.op == KVRT_EXEC_BLOCK_LOAD ? "no block store, prefilled"
                                         : "no block store, not stored";
    break;
  }
  if (!e.key.empty())
    what += ", key " + e.key;
  return what;
}

std::string kvir::exec::describeStoreStats(const kvrt_block_store_stats &s) {
  std::string faults;
  for (int f = 1; f < KVRT_BLOCK_NUM_FAULTS; ++f)
    if (s.faults[f])
      faults += str(faults.empty() ? "" : ", ", s.faults[f], " ",
                    kvrt_block_fault_name(kvrt_block_fault(f)));
  return str(s.lookups, " lookups, ", s.hits, " hits, ", s.misses, " misses, ",
             s.stores, " stores, ", s.bytes_fetched, " bytes fetched, ",
             s.bytes_stored, " bytes stored, ", s.rejected, " blobs rejected",
             faults.empty() ? "" : "; faults: " + faults);
}
