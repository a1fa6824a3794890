//===- ProgramLibrary.h - Compiled code loaded with dlopen ------*- C++ -*-===//
//
// A kv program compiled ahead of time (kv-aot: libNAME.so, each entry's
// manifest embedded) or one model's forward alone (kv-aot --forward), loaded
// into a runner without LLVM: kv-aot-run, and kv-run from its compile cache.
// The library's calls into the runtime resolve against the loading
// executable's symbols.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_RUNNER_PROGRAMLIBRARY_H
#define KVIR_DRIVER_RUNNER_PROGRAMLIBRARY_H

#include "runtime/core/ForwardABI.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/exec/Session.h"

#include <string>

namespace kvir::run {

/// The entry points of the forward `prefix` (ModelConfig.h's forwardPrefix)
/// in the loaded library `handle`, with `key` as its key; null members where
/// the library lacks them.
Forward bindForward(void *handle, const std::string &prefix, const char *key);

/// A loaded program library: its manifest and entry.
struct ProgramLibrary {
  void *handle = nullptr;
  exec::EntryManifest manifest;
  exec::EntryFn entry = nullptr;

  /// The library's forward of `config` on pages of the manifest's type and
  /// weights in the manifest's formats (null members if it holds none).
  Forward forward(const kvrt_model_config &config);

  /// Why `model`'s weights cannot run on the library's forwards, or "": the
  /// library was compiled for the formats its manifest names.
  std::string checkFormats(const kvrt_model *model) const;

private:
  std::string key;
};

/// Opens the library at `path` (never closed) and reads the manifest of
/// `entry`; false with `error`.
bool openProgramLibrary(const std::string &path, const std::string &entry,
                        ProgramLibrary &out, std::string &error);

} // namespace kvir::run

#endif // KVIR_DRIVER_RUNNER_PROGRAMLIBRARY_H
