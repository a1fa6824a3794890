//===- TokenInput.cpp - Token lists and numbers from text -------*- C++ -*-===//

#include "runtime/exec/TokenInput.h"
#include "runtime/core/Support.h"
#include "runtime/exec/Text.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

using namespace kvir;
using kvrt::str;

namespace {

/// Parses whitespace-separated numbers; false with a message naming the
/// first bad item.
template <typename T, typename Parse>
bool parseList(const std::string &text, const std::string &source,
               const char *what, Parse parse, std::vector<T> &out,
               std::string &error) {
  std::istringstream in(text);
  std::string word;
  for (size_t i = 1; in >> word; ++i) {
    T value;
    if (!parse(word, value)) {
      // Escaped and cut short: a binary file is not echoed to the terminal.
      constexpr size_t kShown = 24;
      std::string quoted = exec::quoteText(word.substr(0, kShown));
      std::string shown = "'" + quoted.substr(1, quoted.size() - 2) + "'";
      if (word.size() > kShown)
        shown += str(" (the first ", kShown, " of ", word.size(), " bytes)");
      error = str("malformed ", what, " list in ", source, ": item ", i, " ",
                  shown, " is not ",
                  what == std::string("token") ? "a non-negative int32 token id"
                                               : "a finite float");
      return false;
    }
    out.push_back(value);
  }
  return true;
}

} // namespace

bool kvir::exec::parseIntWord(const std::string &word, int64_t &out) {
  if (word.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(word.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = value;
  return true;
}

bool kvir::exec::parseFloatWord(const std::string &word, double &out) {
  if (word.empty())
    return false;
  char *end = nullptr;
  out = std::strtod(word.c_str(), &end);
  return !*end;
}

bool kvir::exec::parseTokenList(const std::string &text,
                                const std::string &source,
                                std::vector<int32_t> &out, std::string &error) {
  out.clear();
  if (!parseList<int32_t>(
          text, source, "token",
          [](const std::string &w, int32_t &v) {
            int64_t x;
            if (!parseIntWord(w, x) || x < 0 ||
                x > std::numeric_limits<int32_t>::max())
              return false;
            v = int32_t(x);
            return true;
          },
          out, error))
    return false;
  if (out.empty()) {
    error = "no token ids in " + source;
    return false;
  }
  return true;
}

bool kvir::exec::parseFloatList(const std::string &text,
                                const std::string &source,
                                std::vector<float> &out, std::string &error) {
  return parseList<float>(
      text, source, "float",
      [](const std::string &w, float &v) {
        double d;
        if (!parseFloatWord(w, d) || !std::isfinite(d))
          return false;
        v = float(d);
        return true;
      },
      out, error);
}

bool kvir::exec::readFile(const std::string &path, std::string &out,
                          std::string &error, const char *what,
                          uint64_t maxBytes) {
  kvrt::File file;
  uint64_t bytes = 0;
  bool regular = false;
  if (kvrt::openInputFile(path.c_str(), what, file, &bytes, &regular)) {
    error = kvrt_last_error();
    return false;
  }
  auto tooLong = [&](uint64_t size, const char *qualifier) {
    error = str(what, " '", path, "' has ", qualifier, size,
                " bytes, more than the ", maxBytes, " a runner reads");
    out.clear();
    return false;
  };
  if (regular && bytes > maxBytes)
    return tooLong(bytes, "");
  // A pipe or a device has no size: read until its end, or past the bound.
  out.clear();
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    if (out.size() + n > maxBytes)
      return tooLong(out.size() + n, "at least ");
    out.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    error = str("cannot read ", what, " '", path, "': ", std::strerror(errno));
    out.clear();
    return false;
  }
  return true;
}
