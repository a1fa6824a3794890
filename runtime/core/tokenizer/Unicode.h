//===- Unicode.h - Unicode categories and UTF-8 for tokenizers --*- C++ -*-===//
//
// What the byte-level BPE pre-tokenizers need from Unicode: the general
// category and the White_Space property of a code point (from the committed
// table UnicodeTables.inc, generated from the Unicode Character Database by
// gen-unicode-tables.py), UTF-8 decoding with U+FFFD for what is not UTF-8,
// and UTF-8 encoding. Internal to runtime/core.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_TOKENIZER_UNICODE_H
#define KVIR_RUNTIME_CORE_TOKENIZER_UNICODE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvrt::unicode {

/// The 30 general categories of the Unicode Character Database.
// clang-format off
enum Category : uint8_t {
  Lu, Ll, Lt, Lm, Lo,         // letters, \p{L}
  Mn, Mc, Me,                 // marks, \p{M}
  Nd, Nl, No,                 // numbers, \p{N}
  Pc, Pd, Ps, Pe, Pi, Pf, Po, // punctuation, \p{P}
  Sm, Sc, Sk, So,             // symbols, \p{S}
  Zs, Zl, Zp,                 // separators, \p{Z}
  Cc, Cf, Cs, Co, Cn          // other, \p{C} (Cn: unassigned)
};
// clang-format on

/// The Unicode version the tables were generated from ("15.0.0").
const char *version();

/// The general category of `c` (Cn past U+10FFFF).
Category category(char32_t c);

/// Whether `c` has the White_Space property (the \s of the HF tokenizers'
/// regular expressions).
bool isWhiteSpace(char32_t c);

inline bool isLetter(Category k) { return k <= Lo; }
inline bool isMark(Category k) { return k >= Mn && k <= Me; }
inline bool isNumber(Category k) { return k >= Nd && k <= No; }
inline bool isPunctuation(Category k) { return k >= Pc && k <= Po; }
inline bool isSymbol(Category k) { return k >= Sm && k <= So; }

inline bool isLetter(char32_t c) { return isLetter(category(c)); }
inline bool isMark(char32_t c) { return isMark(category(c)); }
inline bool isNumber(char32_t c) { return isNumber(category(c)); }
inline bool isPunctuation(char32_t c) { return isPunctuation(category(c)); }

/// The code point U+FFFD that stands for bytes that are not UTF-8.
constexpr char32_t kReplacement = 0xFFFD;

/// Decodes `text` into code points. A byte that does not begin a
/// well-formed UTF-8 sequence (Unicode's table 3-7: no overlong forms, no
/// surrogates, nothing past U+10FFFF, no cut sequence) becomes one U+FFFD,
/// and decoding goes on at the next byte.
std::vector<char32_t> decodeUtf8(std::string_view text);

/// The length of the well-formed UTF-8 sequence at the start of `text`, or 0
/// when it does not begin with one.
size_t utf8SequenceLength(std::string_view text);

/// Appends the UTF-8 encoding of `c` (a scalar value) to `out`.
void appendUtf8(char32_t c, std::string &out);

} // namespace kvrt::unicode

#endif // KVIR_RUNTIME_CORE_TOKENIZER_UNICODE_H
