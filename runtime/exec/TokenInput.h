//===- TokenInput.h - Token lists and numbers from text ---------*- C++ -*-===//
//
// What runners read from files and the command line: whole input files
// (bounded, regular files only), whitespace-separated token ids and floats,
// and the single words manifests are made of. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_TOKENINPUT_H
#define KVIR_RUNTIME_EXEC_TOKENINPUT_H

#include <cstdint>
#include <string>
#include <vector>

namespace kvir::exec {

/// Parses whitespace-separated token ids (non-negative int32); false with a
/// message naming the first bad item, or an empty list, and `source`.
bool parseTokenList(const std::string &text, const std::string &source,
                    std::vector<int32_t> &out, std::string &error);

/// Appends whitespace-separated finite floats to `out`; false with a message
/// naming the first bad item and `source`. An empty text is no error.
bool parseFloatList(const std::string &text, const std::string &source,
                    std::vector<float> &out, std::string &error);

/// One decimal integer that is the whole of `word`; false otherwise
/// (empty, trailing characters, out of range).
bool parseIntWord(const std::string &word, int64_t &out);

/// One floating-point number (decimal or hexadecimal) that is the whole of
/// `word`; false otherwise.
bool parseFloatWord(const std::string &word, double &out);

/// The largest input file a runner reads (token lists, texts, manifests):
/// 256 MiB, far beyond any context, and a bound on the memory a file costs.
constexpr uint64_t kMaxInputFileBytes = uint64_t(256) << 20;

/// Reads a whole regular file of at most `maxBytes`; false with a message
/// naming it as `what` (e.g. "cannot open token file 'x': No such file or
/// directory"; a FIFO, a device or a directory is refused, not read).
bool readFile(const std::string &path, std::string &out, std::string &error,
              const char *what = "file",
              uint64_t maxBytes = kMaxInputFileBytes);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_TOKENINPUT_H
