//===- Binding.h - The arguments of an entry --------------------*- C++ -*-===//
//
// Binding the arguments of a compiled program's entry: the model (checked
// against the program's `!kv.model`), token lists and query tensors from
// files, from text a runner encoded, or from seeded samples. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_BINDING_H
#define KVIR_RUNTIME_EXEC_BINDING_H

#include "runtime/exec/Manifest.h"
#include "runtime/exec/Values.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvir::exec {

/// How a runner builds the arguments.
struct InputOptions {
  /// Inputs by argument name (`argN` or the argument's kv.name): the text of
  /// a file of whitespace-separated token ids (tokens) or floats (tensors),
  /// and where it came from (for messages).
  std::map<std::string, std::pair<std::string, std::string>> given;
  /// Token lists a runner encoded from text (`--text NAME=STRING`,
  /// `--text-file NAME=FILE`: runtime/exec/Text.h), by argument name as
  /// `given`. Unlike a file of ids, the list may be empty (text "" encodes
  /// to 0 tokens), which a static size then rejects.
  struct Encoded {
    std::vector<int32_t> tokens;
    /// The option that gave it and where it came from (for messages).
    std::string option, source;
    /// The text, and whether BOS was put in front of its encoding.
    std::string text;
    bool bos = false;
  };
  std::map<std::string, Encoded> givenTokens;
  /// Synthesize the inputs not given (else they are an error): seeded
  /// tokens, seeded uniform floats in [-1, 1) for tensors.
  bool synthesize = false;
  uint64_t seed = 1;
  /// Length of a synthesized dynamic input without a `kv.sample_length`.
  int64_t dynamicLength = 16;
  /// The longest input that is synthesized (tokens, or query rows); a
  /// longer one is an error, not an allocation (runners pass their context
  /// limit).
  int64_t maxSynthesized = int64_t(1) << 20;
  /// What sets maxSynthesized, for the message: "the KV pool holds
  /// (--pool-pages ...)", "the run's context may hold (--max-context)".
  std::string maxSynthesizedBy = "the runner synthesizes";
};

/// One bound argument, for the report.
struct BoundInput {
  std::string name;
  /// Tokens or rows bound (-1 for the model).
  int64_t size = -1;
  bool synthesized = false;
  /// Bound from text (InputOptions::givenTokens): the text, and whether BOS
  /// was put in front.
  bool fromText = false;
  std::string text{};
  bool bos = false;
};

/// Binds the arguments of `manifest`'s entry: the model (whose !kv.model
/// must match `config`; the message names the first field that differs),
/// token lists and tensors from `options`. False with `error` otherwise.
bool bindArguments(const EntryManifest &manifest,
                   const kvrt_model_config &config, const InputOptions &options,
                   std::vector<Value> &args, std::vector<BoundInput> *bound,
                   std::string &error);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_BINDING_H
