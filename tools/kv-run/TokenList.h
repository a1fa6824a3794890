//===- TokenList.h - kv-run's token-list form -------------------*- C++ -*-===//
//
// `kv-run --model M (--tokens IDS | --tokens-file F | --text S | --text-file
// F) [--greedy N]`: prefill a token list from position 0, then generate
// greedily. Both kv-run executables run it; they differ in where the
// forward's code comes from (a shared library in the compile cache, or the
// JIT), which the caller passes in. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_RUN_TOKENLIST_H
#define KVIR_TOOLS_KV_RUN_TOKENLIST_H

#include "driver/runner/Runner.h"
#include "tools/kv-run/CommandLine.h"

#include <functional>
#include <string>

namespace kvir::run {

/// Gives the forward of the runner's model (its config, weight formats and
/// page type); false with `error`. Called once the pool is prepared, only
/// for a backend that runs generated code.
using ForwardSource =
    std::function<bool(Runner &runner, Forward &out, std::string &error)>;

/// The token-list form: false with `error` (printed by the caller as
/// kv-run's error).
bool runTokenList(const KvRunOptions &options, const ForwardSource &forward,
                  std::string &error);

/// Warns (on stderr) when a run of `tokens` went beyond the context the
/// model was trained on.
void warnBeyondTraining(const Runner &runner, int64_t tokens);

/// The runner the options ask for; without --backend, the cpu one. Null
/// with `error`.
std::unique_ptr<Runner> makeRunner(const RunnerOptions &given,
                                   std::string &error);

} // namespace kvir::run

#endif // KVIR_TOOLS_KV_RUN_TOKENLIST_H
