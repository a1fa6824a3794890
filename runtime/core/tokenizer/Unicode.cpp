//===- Unicode.cpp - Unicode categories and UTF-8 for tokenizers ----------===//
//
// Lookups in the generated tables of UnicodeTables.inc, with a direct table
// for ASCII (most text), and the UTF-8 codec the tokenizers share.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/tokenizer/Unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

using namespace kvrt::unicode;

namespace {

struct CategoryRange {
  char32_t first;
  Category category;
};

struct CodeRange {
  char32_t first, last;
};

#include "runtime/core/tokenizer/UnicodeTables.inc"

Category lookup(char32_t c) {
  if (c > 0x10FFFF)
    return Cn;
  auto it = std::upper_bound(
      std::begin(kCategoryRanges), std::end(kCategoryRanges), c,
      [](char32_t value, const CategoryRange &r) { return value < r.first; });
  return std::prev(it)->category;
}

/// Categories of ASCII, looked up once.
const std::array<Category, 128> &asciiCategories() {
  static const std::array<Category, 128> table = [] {
    std::array<Category, 128> t{};
    for (char32_t c = 0; c < 128; ++c)
      t[c] = lookup(c);
    return t;
  }();
  return table;
}

} // namespace

const char *kvrt::unicode::version() { return kUnicodeVersion; }

Category kvrt::unicode::category(char32_t c) {
  return c < 128 ? asciiCategories()[c] : lookup(c);
}

bool kvrt::unicode::isWhiteSpace(char32_t c) {
  if (c < 128)
    return c == ' ' || (c >= '\t' && c <= '\r');
  for (const CodeRange &r : kWhiteSpaceRanges)
    if (c >= r.first && c <= r.last)
      return true;
  return false;
}

size_t kvrt::unicode::utf8SequenceLength(std::string_view text) {
  if (text.empty())
    return 0;
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char b0 = byte(0);
  if (b0 < 0x80)
    return 1;
  size_t n;
  // The allowed range of the second byte narrows for E0, ED, F0 and F4
  // (overlong forms, surrogates, past U+10FFFF); the others take 80..BF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0)
      lo = 0xA0;
    if (b0 == 0xED)
      hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < n || byte(1) < lo || byte(1) > hi)
    return 0;
  for (size_t i = 2; i < n; ++i)
    if ((byte(i) & 0xC0) != 0x80)
      return 0;
  return n;
}

std::vector<char32_t> kvrt::unicode::decodeUtf8(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8SequenceLength(text.substr(i, 4));
    if (n == 0) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    auto byte = [&](size_t k) {
      return static_cast<char32_t>(static_cast<unsigned char>(text[i + k]));
    };
    char32_t c = n == 1   ? byte(0)
                 : n == 2 ? (byte(0) & 0x1F) << 6 | (byte(1) & 0x3F)
                 : n == 3 ? (byte(0) & 0x0F) << 12 | (byte(1) & 0x3F) << 6 |
                                (byte(2) & 0x3F)
                          : (byte(0) & 0x07) << 18 | (byte(1) & 0x3F) << 12 |
                                (byte(2) & 0x3F) << 6 | (byte(3) & 0x3F);
    out.push_back(c);
    i += n;
  }
  return out;
}

void kvrt::unicode::appendUtf8(char32_t c, std::string &out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}
