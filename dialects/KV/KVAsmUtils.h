//===- KVAsmUtils.h - Shared printing helpers of the kv dialect -*- C++ -*-===//

#ifndef KVIR_DIALECTS_KV_KVASMUTILS_H
#define KVIR_DIALECTS_KV_KVASMUTILS_H

#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/StringRef.h"

#include <charconv>
#include <string>
#include <type_traits>

namespace mlir::kv {

/// Formats a double (or a float) in its shortest form that parses back to
/// the same value of its type, always as an MLIR float literal (with a '.'):
/// 10000.0, 1.0e-05, 0.15 (a float 0.1 prints as 0.1, not as the double
/// nearest to it).
template <typename T> inline std::string formatShortestFloat(T value) {
  static_assert(std::is_floating_point_v<T>);
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, ec == std::errc() ? end : buffer);
  if (text.find_first_of(".en") == std::string::npos) // n: inf, nan
    text += ".0";
  else if (size_t e = text.find('e');
           e != std::string::npos && text.find('.') == std::string::npos)
    text.insert(e, ".0");
  return text;
}

/// Prints a float attribute parameter with formatShortestFloat.
inline void printShortestFloat(AsmPrinter &printer,
                               const llvm::APFloat &value) {
  printer << formatShortestFloat(value.convertToDouble());
}

} // namespace mlir::kv

#endif // KVIR_DIALECTS_KV_KVASMUTILS_H
