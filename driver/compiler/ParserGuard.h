//===- ParserGuard.h - Text the MLIR parser crashes on ----------*- C++ -*-===//
//
// MLIR 22's textual parser crashes, instead of reporting an error, on a few
// inputs. Every KVIR entry that parses untrusted text (kv-opt, kv-run,
// kv-aot, the library's parseProgram/loadProgram, the fuzzers) first asks
// this guard, which finds such constructs in the source and reports the first
// one at its line and column, so malformed IR gets a diagnostic, never a
// crash.
//
// Known crashers (each has a lit test in test/Dialect/KV/malformed/ and
// test/Dialect/KV/parser-guard.mlir):
//  - a dense array of `index`, `array<index: ...>` (also through a type
//    alias): the parser accepts the element type, then asks an index type for
//    its bit width (upstream parseDenseArrayAttr);
//  - a result use `%name#N` with a huge N: the parser allocates N + 1 slots
//    before it checks N (2^31 asks for 32 GiB), so N > 2^20 is refused.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_COMPILER_PARSERGUARD_H
#define KVIR_DRIVER_COMPILER_PARSERGUARD_H

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace kvir::compiler {

/// A construct the MLIR parser would crash on.
struct ParserHazard {
  /// Byte offset of the construct in the text.
  size_t offset = 0;
  /// The diagnostic, lowercase, no trailing period.
  std::string message;
};

/// Returns the first construct in `text` that crashes the MLIR parser, if any.
/// Comments and string literals are skipped; the scan is linear in the text.
std::optional<ParserHazard> findParserHazard(llvm::StringRef text);

/// Emits an error for the first hazard in `text` through `context`'s
/// diagnostic handlers, located at `bufferName`:line:column, and fails.
mlir::LogicalResult checkParserHazards(llvm::StringRef text,
                                       llvm::StringRef bufferName,
                                       mlir::MLIRContext *context);

/// Prints an error for the first hazard in buffer `bufferId` of `sourceMgr`
/// (with the source line and a caret) and fails.
mlir::LogicalResult checkParserHazards(llvm::SourceMgr &sourceMgr,
                                       unsigned bufferId);

} // namespace kvir::compiler

#endif // KVIR_DRIVER_COMPILER_PARSERGUARD_H
