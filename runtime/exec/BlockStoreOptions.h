//===- BlockStoreOptions.h - The block store of a runner --------*- C++ -*-===//
//
// What runners (kv-run, kv-aot-run, kv-bench-store) share about the block
// store: the options of `--kv-store URL` (`--kv-store-prefix`,
// `--kv-store-ttl`, `--kv-store-timeout-ms`, `--kv-store-policy`), opening
// the store, and the report's lines about what each block op did. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_BLOCKSTOREOPTIONS_H
#define KVIR_RUNTIME_EXEC_BLOCKSTOREOPTIONS_H

#include "runtime/exec/Session.h"
#include "runtime/store/KVBlockStore.h"

#include <memory>
#include <string>

namespace kvir::exec {

/// The command line's block store options.
struct StoreOptions {
  /// `memory` or `redis://HOST[:PORT][/DB]`; "" for no store.
  std::string url;
  std::string prefix = "kvir:";
  int64_t ttlSeconds = 0;
  /// Timeout of the connection and of each command.
  int64_t timeoutMs = 2000;
  /// `fallback` or `fail`.
  std::string policy = "fallback";
  /// Which options were given (an option without --kv-store is an error).
  bool prefixGiven = false, ttlGiven = false, timeoutGiven = false,
       policyGiven = false;
};

/// A store handle that releases itself.
using BlockStoreRef =
    std::unique_ptr<kvrt_block_store, void (*)(kvrt_block_store *)>;

/// Opens the store of `options` into `out` (left empty without a URL) and
/// its policy into `binding`; false with `error` for a bad option or URL.
/// Nothing is connected yet: a store that cannot be reached shows at the
/// first block op, where the policy applies.
bool openBlockStore(const StoreOptions &options, BlockStoreRef &out,
                    BlockStoreBinding &binding, std::string &error);

/// `fallback` or `fail`.
const char *storePolicyName(int32_t policy);

/// One line about a block event, e.g. `kv.load_block (96 tokens at 0): hit,
/// 61568 bytes fetched in 0.412 ms, key kvir:blk:v1:...`.
std::string describeBlockEvent(const BlockEvent &event);

/// The counters of a store in one line.
std::string describeStoreStats(const kvrt_block_store_stats &stats);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_BLOCKSTOREOPTIONS_H
