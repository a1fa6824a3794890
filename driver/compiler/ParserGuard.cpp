//===- ParserGuard.cpp - Text the MLIR parser crashes on --------*- C++ -*-===//
//
// A small lexer over MLIR source text: it skips comments and string literals,
// records type alias definitions, and finds the constructs ParserGuard.h
// lists.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/ParserGuard.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;
using llvm::StringRef;

namespace {

/// The largest N of a result use `%name#N` the guard lets through.
constexpr uint64_t kMaxResultNumber = uint64_t(1) << 20;

bool isIdStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool isIdChar(char c) {
  return isIdStart(c) || (c >= '0' && c <= '9') || c == '$' || c == '.';
}
bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

/// The lexer: positions, comments, strings and identifiers of MLIR text.
class Lexer {
public:
  explicit Lexer(StringRef text) : text(text) {}

  /// Skips whitespace and `//` comments from `pos`.
  size_t skipTrivia(size_t pos) const {
    while (pos < text.size()) {
      if (isSpace(text[pos])) {
        ++pos;
      } else if (text.substr(pos).starts_with("//")) {
        size_t end = text.find('\n', pos);
        pos = end == StringRef::npos ? text.size() : end + 1;
      } else {
        break;
      }
    }
    return pos;
  }

  /// The end of the string literal that opens at `pos` (past its quote, or
  /// the end of the text when it is unterminated).
  size_t skipString(size_t pos) const {
    for (++pos; pos < text.size(); ++pos) {
      if (text[pos] == '\\')
        ++pos;
      else if (text[pos] == '"' || text[pos] == '\n')
        return pos + 1;
    }
    return text.size();
  }

  /// The identifier (letters, digits, `_$.`) that starts at `pos`.
  StringRef identifierAt(size_t pos) const {
    size_t end = pos;
    while (end < text.size() && isIdChar(text[end]))
      ++end;
    return text.slice(pos, end);
  }

  /// The type named at `pos`: `!alias` (with its `!`) or a bare keyword.
  StringRef typeTokenAt(size_t pos) const {
    if (pos < text.size() && text[pos] == '!')
      return text.slice(pos, pos + 1 + identifierAt(pos + 1).size());
    return identifierAt(pos);
  }

  /// Whether `pos` is the first non-blank character of its line.
  bool startsLine(size_t pos) const {
    while (pos > 0 && (text[pos - 1] == ' ' || text[pos - 1] == '\t'))
      --pos;
    return pos == 0 || text[pos - 1] == '\n' || text[pos - 1] == '\r';
  }

  StringRef text;
};

/// An `array<TYPE` the scan found: the element type token and its offset.
struct DenseArrayUse {
  StringRef elementType;
  size_t offset;
};

/// Follows type aliases from `type` to the type they name (bounded, so an
/// alias cycle ends).
StringRef resolveAlias(StringRef type,
                       const llvm::StringMap<StringRef> &aliases) {
  for (int depth = 0; depth < 64 && type.starts_with("!"); ++depth) {
    auto it = aliases.find(type);
    if (it == aliases.end())
      break;
    type = it->second;
  }
  return type;
}

} // namespace

std::optional<kvir::compiler::ParserHazard>
kvir::compiler::findParserHazard(StringRef text) {
  Lexer lexer(text);
  llvm::StringMap<StringRef> aliases;
  SmallVector<DenseArrayUse> arrays;
  std::optional<ParserHazard> resultHazard;
  size_t pos = 0;
  while (pos < text.size()) {
    char c = text[pos];
    if (c == '"') {
      pos = lexer.skipString(pos);
      continue;
    }
    if (c == '/' && text.substr(pos).starts_with("//")) {
      pos = lexer.skipTrivia(pos);
      continue;
    }
    // A type alias definition at the start of a line: `!name = TYPE`.
    if (c == '!' && lexer.startsLine(pos)) {
      StringRef name = lexer.typeTokenAt(pos);
      size_t eq = lexer.skipTrivia(pos + name.size());
      if (name.size() > 1 && eq < text.size() && text[eq] == '=') {
        size_t type = lexer.skipTrivia(eq + 1);
        aliases[name] = lexer.typeTokenAt(type);
        pos = type;
        continue;
      }
    }
    // A result use `%name#N`: the parser makes room for N + 1 results of
    // the name before it checks N against the op.
    if (c == '%') {
      size_t end = pos + 1;
      while (end < text.size() && (isIdChar(text[end]) || text[end] == '-'))
        ++end;
      if (end < text.size() && text[end] == '#') {
        size_t digits = end + 1;
        while (digits < text.size() && text[digits] >= '0' &&
               text[digits] <= '9')
          ++digits;
        StringRef number = text.slice(end + 1, digits);
        uint64_t value = 0;
        if (!number.empty() &&
            (number.getAsInteger(10, value) || value > kMaxResultNumber)) {
          resultHazard = ParserHazard{
              end + 1, "result number " + number.str() + " of '" +
                           text.slice(pos, end).str() + "' exceeds " +
                           std::to_string(kMaxResultNumber) +
                           ", more than any op has (the MLIR 22 parser "
                           "allocates a slot for every number below it)"};
          break;
        }
        pos = digits;
        continue;
      }
      pos = end;
      continue;
    }
    if (!isIdStart(c) ||
        (pos > 0 && (isIdChar(text[pos - 1]) ||
                     StringRef("!#%@^").contains(text[pos - 1])))) {
      ++pos;
      continue;
    }
    StringRef word = lexer.identifierAt(pos);
    size_t next = pos + word.size();
    if (word == "array") {
      size_t open = lexer.skipTrivia(next);
      if (open < text.size() && text[open] == '<') {
        size_t type = lexer.skipTrivia(open + 1);
        arrays.push_back({lexer.typeTokenAt(type), type});
      }
    }
    pos = next;
  }
  // The scan stopped at a result hazard, so every array found is before it.
  for (const DenseArrayUse &use : arrays) {
    if (resolveAlias(use.elementType, aliases) != "index")
      continue;
    std::string message = "dense array of 'index' elements is not supported "
                          "(the MLIR 22 parser crashes on it); use 'i64'";
    if (use.elementType != "index")
      message = "type alias '" + use.elementType.str() +
                "' names 'index': " + message;
    return ParserHazard{use.offset, std::move(message)};
  }
  return resultHazard;
}

LogicalResult kvir::compiler::checkParserHazards(StringRef text,
                                                 StringRef bufferName,
                                                 MLIRContext *context) {
  std::optional<ParserHazard> hazard = findParserHazard(text);
  if (!hazard)
    return success();
  StringRef before = text.take_front(hazard->offset);
  unsigned line = 1 + before.count('\n');
  size_t lineStart = before.find_last_of('\n');
  unsigned column =
      hazard->offset - (lineStart == StringRef::npos ? 0 : lineStart + 1) + 1;
  emitError(FileLineColLoc::get(context, bufferName, line, column))
      << hazard->message;
  return failure();
}

LogicalResult kvir::compiler::checkParserHazards(llvm::SourceMgr &sourceMgr,
                                                 unsigned bufferId) {
  StringRef text = sourceMgr.getMemoryBuffer(bufferId)->getBuffer();
  std::optional<ParserHazard> hazard = findParserHazard(text);
  if (!hazard)
    return success();
  sourceMgr.PrintMessage(
      llvm::SMLoc::getFromPointer(text.data() + hazard->offset),
      llvm::SourceMgr::DK_Error, hazard->message);
  return failure();
}
