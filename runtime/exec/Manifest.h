//===- Manifest.h - The signature of a compiled program's entry -*- C++ -*-===//
//
// An entry's signature as a runner needs it (an EntryManifest, written by the
// compiler): its arguments and results, where its code runs, the element
// type of its pages and the location of every site; a line-based text form
// that kv-aot embeds in a program library; and the symbols a compiled
// program exports for an entry. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_MANIFEST_H
#define KVIR_RUNTIME_EXEC_MANIFEST_H

#include "runtime/exec/ExecRuntime.h"
#include "runtime/exec/Values.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::exec {

/// One argument of an entry.
struct ArgSpec {
  ValueKind kind = ValueKind::Index;
  /// The argument's `kv.name`, or `argN`.
  std::string name;
  /// Static sizes (-1: dynamic): tokens [dims[0]], tensors [dims[0]][dims[1]]
  /// [dims[2]].
  int64_t dims[3] = {-1, -1, -1};
  /// The `kv.sample_length` of a dynamic argument (-1: none).
  int64_t sampleLength = -1;
  /// For a model: the architecture its `!kv.model` type has.
  kvrt_model_config model{};
};

/// The signature of an entry and what a runner needs to report errors.
struct EntryManifest {
  std::string entry;
  /// Where the program's generated code runs: "cpu" or "gpu".
  std::string target = "cpu";
  /// The element type of the program's K/V pages (its !kv.cache values);
  /// a runner creates its pool with it. A manifest without the line is f32.
  kvrt_kv_dtype kvDtype = KVRT_KV_F32;
  /// The formats of the weights the program's forwards were built for
  /// (kvir::WeightFormats::spec, runtime/core/WeightFormat.h): "" for all
  /// f32; a runner refuses a model of other formats. A manifest without the
  /// line is all f32.
  std::string weightFormats;
  std::vector<ArgSpec> args;
  std::vector<ValueKind> results;
  /// The location of every site (the `site` of the exec ABI), as text.
  std::vector<std::string> sites;
  /// Whether the program held kv.edit, kv.compose or kv.logits ops (else all
  /// of it counts as plan work).
  bool hasPlanOps = false;

  /// A line-based text form, stable across versions of the compiler that
  /// write the same manifest version.
  std::string serialize() const;
  /// Parses serialize()'s output; false with `error` on malformed text.
  static bool parse(const std::string &text, EntryManifest &out,
                    std::string &error);
};

/// The symbols a compiled program exports for an entry.
std::string entrySymbol(const std::string &entry);
std::string manifestSymbol(const std::string &entry);

/// The entry wrapper convert-kv-to-runtime emits: arguments and results as
/// arrays of 64-bit slots.
using EntryFn = void (*)(kvrt_exec_context *ctx, int64_t *args,
                         int64_t *results);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_MANIFEST_H
