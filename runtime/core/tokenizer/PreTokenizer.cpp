//===- PreTokenizer.cpp - Splitting rules of byte-level BPE -----*- C++ -*-===//
//
// Each rule set is a list of stages; each stage is one regular expression of
// the reference tokenizer, written as a matcher: given a piece of text and a
// position, the length of the match the expression finds there (leftmost
// alternative first, as the regex engines of HF and llama.cpp choose), or 0.
// A stage scans each piece left to right as a regex search does and cuts it
// into matches and the text between them.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/tokenizer/PreTokenizer.h"
#include "runtime/core/tokenizer/Unicode.h"

#include <algorithm>
#include <iterator>

using namespace kvrt;
using namespace kvrt::tok;
namespace u = kvrt::unicode;

namespace {

/// What a code point is, as the expressions ask.
enum Class : uint8_t {
  kLetter = 1,
  kNumber = 2,
  kMark = 4,
  kPunct = 8,
  kWhite = 16,
};

/// A piece of text being matched: code points and their classes.
struct Span {
  const char32_t *c;
  const uint8_t *k;
  size_t n;

  bool is(size_t i, uint8_t cls) const { return i < n && (k[i] & cls); }
  bool at(size_t i, char32_t ch) const { return i < n && c[i] == ch; }
  bool newline(size_t i) const { return at(i, '\r') || at(i, '\n'); }
  /// [^\s\p{L}\p{N}]
  bool other(size_t i) const {
    return i < n && !(k[i] & (kWhite | kLetter | kNumber));
  }
  /// Length of the run from `i` of code points satisfying `pred`.
  template <typename Pred> size_t run(size_t i, Pred pred) const {
    size_t j = i;
    while (j < n && pred(j))
      ++j;
    return j - i;
  }
};

using Matcher = size_t (*)(const Span &s, size_t pos);

/// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive or (Llama 3, Qwen 2) not.
size_t contraction(const Span &s, size_t pos, bool anyCase) {
  if (!s.at(pos, '\''))
    return 0;
  auto letter = [&](size_t i) -> char32_t {
    if (i >= s.n)
      return 0;
    char32_t c = s.c[i];
    return anyCase && c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
  };
  char32_t a = letter(pos + 1), b = letter(pos + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
      (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

/// \s+(?!\S)|\s+ : a run of white space, less its last character when a
/// non-space follows and the run has more than one (that last one then
/// begins the next word, as " word" or " 123").
size_t whiteSpace(const Span &s, size_t pos) {
  size_t k = s.run(pos, [&](size_t i) { return s.is(i, kWhite); });
  if (k == 0)
    return 0;
  return pos + k < s.n && k > 1 ? k - 1 : k;
}

/// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
/// \s+(?!\S)|\s+
size_t gpt2(const Span &s, size_t pos) {
  if (size_t m = contraction(s, pos, false))
    return m;
  size_t p = pos + (s.at(pos, ' ') ? 1 : 0);
  if (s.is(p, kLetter))
    return p - pos + s.run(p, [&](size_t i) { return s.is(i, kLetter); });
  if (s.is(p, kNumber))
    return p - pos + s.run(p, [&](size_t i) { return s.is(i, kNumber); });
  if (s.other(p))
    return p - pos + s.run(p, [&](size_t i) { return s.other(i); });
  return whiteSpace(s, pos);
}

/// Llama 3 (maxDigits 3) and Qwen 2 (maxDigits 1):
/// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <size_t maxDigits> size_t llama3(const Span &s, size_t pos) {
  if (size_t m = contraction(s, pos, true))
    return m;
  auto letters = [&](size_t i) {
    return s.run(i, [&](size_t j) { return s.is(j, kLetter); });
  };
  if (s.is(pos, kLetter))
    return letters(pos);
  if (!s.newline(pos) && !s.is(pos, kNumber) && s.is(pos + 1, kLetter))
    return 1 + letters(pos + 1);
  if (s.is(pos, kNumber))
    return std::min(maxDigits,
                    s.run(pos, [&](size_t i) { return s.is(i, kNumber); }));
  size_t p = pos + (s.at(pos, ' ') ? 1 : 0);
  if (s.other(p)) {
    p += s.run(p, [&](size_t i) { return s.other(i); });
    p += s.run(p, [&](size_t i) { return s.newline(i); });
    return p - pos;
  }
  // \s*[\r\n]+ : up to the last line break of the run of white space.
  size_t k = s.run(pos, [&](size_t i) { return s.is(i, kWhite); });
  for (size_t i = k; i > 0; --i)
    if (s.newline(pos + i - 1))
      return i;
  return whiteSpace(s, pos);
}

/// [\p{P}$+<=>^~|`]+ (Falcon, with the backquote) and [\p{P}$+<=>^~|]+
/// (default, without).
template <bool backquote> size_t punctuationRun(const Span &s, size_t pos) {
  auto in = [&](size_t i) {
    if (s.is(i, kPunct))
      return true;
    char32_t c = s.c[i];
    return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|' || (backquote && c == '`');
  };
  return s.run(pos, [&](size_t i) { return i < s.n && in(i); });
}

/// [0-9][0-9][0-9]
size_t threeDigits(const Span &s, size_t pos) {
  for (size_t i = 0; i < 3; ++i)
    if (pos + i >= s.n || s.c[pos + i] < '0' || s.c[pos + i] > '9')
      return 0;
  return 3;
}

/// \p{N}
size_t oneNumber(const Span &s, size_t pos) { return s.is(pos, kNumber); }

/// \p{N}+
size_t numbers(const Span &s, size_t pos) {
  return s.run(pos, [&](size_t i) { return s.is(i, kNumber); });
}

/// [\r\n]
size_t lineBreak(const Span &s, size_t pos) { return s.newline(pos); }

struct Range {
  char32_t first, last;
};

template <size_t N> bool inRanges(const Range (&ranges)[N], char32_t c) {
  auto it = std::upper_bound(
      std::begin(ranges), std::end(ranges), c,
      [](char32_t value, const Range &r) { return value < r.first; });
  return it != std::begin(ranges) && c <= std::prev(it)->last;
}

/// The letters of DeepSeek LLM's second expression, as its tokenizer spells
/// them (A-Za-zµÀ-ÖØ-öø-ƺ...: cased letters of Latin, Greek, Cyrillic,
/// Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret, ... by code
/// point range, not a Unicode category).
constexpr Range kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},
    {0xC0, 0xD6},       {0xD8, 0xF6},       {0xF8, 0x1BA},
    {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},
    {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},
    {0x3F7, 0x481},     {0x48A, 0x52F},     {0x531, 0x556},
    {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},
    {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},
    {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},
    {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},
    {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},
    {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

/// DeepSeek LLM's third expression: [!-/:-~！-／：-～‘-‟　-。]. U+3000 is
/// listed but never matches: llama.cpp, the reference, matches white space
/// as U+000B (its std::wregex knows only ASCII space), and U+3000 is white
/// space.
constexpr Range kDeepseekPunctuation[] = {
    {0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
    {0x3001, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};

/// [一-龥ࠀ-一가-퟿]: CJK ideographs, U+0800 to U+4E00, Hangul syllables
/// and jamo; less white space, for the same reason as above.
constexpr Range kDeepseekCjk[] = {
    {0x800, 0x9FA5},
    {0xAC00, 0xD7FF},
};

/// \s?[class]+
template <const auto &ranges> size_t spaceThenRun(const Span &s, size_t pos) {
  auto in = [&](size_t i) { return i < s.n && inRanges(ranges, s.c[i]); };
  size_t p = pos + (s.is(pos, kWhite) && in(pos + 1) ? 1 : 0);
  return in(p) ? p - pos + s.run(p, in) : 0;
}

/// [class]+, white space excepted.
template <const auto &ranges> size_t runOf(const Span &s, size_t pos) {
  return s.run(pos, [&](size_t i) {
    return i < s.n && !s.is(i, kWhite) && inRanges(ranges, s.c[i]);
  });
}

/// \s?\p{L}+ and \s?\p{P}+
template <uint8_t cls> size_t spaceThenClass(const Span &s, size_t pos) {
  size_t p = pos + (s.is(pos, kWhite) && s.is(pos + 1, cls) ? 1 : 0);
  return s.is(p, cls)
             ? p - pos + s.run(p, [&](size_t i) { return s.is(i, cls); })
             : 0;
}

/// \s+$
size_t trailingWhiteSpace(const Span &s, size_t pos) {
  size_t k = s.run(pos, [&](size_t i) { return s.is(i, kWhite); });
  return k && pos + k == s.n ? k : 0;
}

struct RuleSet {
  PreRules rules;
  std::vector<Matcher> stages;
};

const std::vector<Matcher> &stagesOf(PreRules rules) {
  static const std::vector<Matcher>
      llama3Stages = {llama3<3>},
      qwen2Stages = {llama3<1>}, gpt2Stages = {gpt2},
      deepseekLlm = {lineBreak,
                     spaceThenRun<kDeepseekLetters>,
                     spaceThenRun<kDeepseekPunctuation>,
                     trailingWhiteSpace,
                     runOf<kDeepseekCjk>,
                     numbers},
      deepseekCoder = {lineBreak, spaceThenClass<kLetter>,
                       spaceThenClass<kPunct>, runOf<kDeepseekCjk>, oneNumber},
      falcon = {punctuationRun<true>, gpt2, threeDigits},
      starcoder = {oneNumber, gpt2},
      fallback = {punctuationRun<false>, gpt2, numbers, threeDigits};
  switch (rules) {
  case PreRules::Llama3:
    return llama3Stages;
  case PreRules::Qwen2:
    return qwen2Stages;
  case PreRules::Gpt2:
    return gpt2Stages;
  case PreRules::DeepseekLlm:
    return deepseekLlm;
  case PreRules::DeepseekCoder:
    return deepseekCoder;
  case PreRules::Falcon:
    return falcon;
  case PreRules::Starcoder:
    return starcoder;
  case PreRules::Default:
    break;
  }
  return fallback;
}

struct Name {
  const char *name;
  PreTokenizerSpec spec;
};

/// The canonical names first, then other names llama.cpp gives the same
/// rules.
constexpr Name kNames[] = {
    {"llama-bpe", {PreRules::Llama3, true}},
    {"qwen2", {PreRules::Qwen2, false}},
    {"gpt-2", {PreRules::Gpt2, false}},
    {"deepseek-llm", {PreRules::DeepseekLlm, false}},
    {"deepseek-coder", {PreRules::DeepseekCoder, false}},
    {"falcon", {PreRules::Falcon, false}},
    {"starcoder", {PreRules::Starcoder, false}},
    {"default", {PreRules::Default, false}},
    {"llama3", {PreRules::Llama3, true}},
    {"llama-v3", {PreRules::Llama3, true}},
    {"falcon3", {PreRules::Llama3, true}},
    {"smaug-bpe", {PreRules::Llama3, false}},
    {"dbrx", {PreRules::Llama3, false}},
    {"deepseek-r1-qwen", {PreRules::Qwen2, false}},
    {"stablelm2", {PreRules::Qwen2, false}},
    {"mpt", {PreRules::Gpt2, false}},
    {"olmo", {PreRules::Gpt2, false}},
    {"phi-2", {PreRules::Gpt2, false}},
    {"refact", {PreRules::Starcoder, false}},
    {"smollm", {PreRules::Starcoder, false}},
    {"codeshell", {PreRules::Starcoder, false}},
};

} // namespace

std::optional<PreTokenizerSpec>
kvrt::tok::findPreTokenizer(std::string_view name) {
  for (const Name &n : kNames)
    if (name == n.name)
      return n.spec;
  return std::nullopt;
}

std::string kvrt::tok::supportedPreTokenizers() {
  std::string out;
  for (const Name &n : kNames)
    out += std::string(out.empty() ? "" : ", ") + n.name;
  return out;
}

void kvrt::tok::preTokenize(PreRules rules, const char32_t *text, size_t n,
                            std::vector<size_t> &ends) {
  std::vector<uint8_t> classes(n);
  for (size_t i = 0; i < n; ++i) {
    u::Category k = u::category(text[i]);
    classes[i] = (u::isLetter(k) ? kLetter : 0) |
                 (u::isNumber(k) ? kNumber : 0) | (u::isMark(k) ? kMark : 0) |
                 (u::isPunctuation(k) ? kPunct : 0) |
                 (u::isWhiteSpace(text[i]) ? kWhite : 0);
  }
  // Piece boundaries, as end offsets; each stage refines them.
  std::vector<size_t> pieces = {n}, next;
  for (Matcher match : stagesOf(rules)) {
    next.clear();
    size_t begin = 0;
    for (size_t end : pieces) {
      Span s{text + begin, classes.data() + begin, end - begin};
      size_t gap = 0;
      for (size_t pos = 0; pos < s.n;) {
        size_t m = match(s, pos);
        if (m == 0) {
          ++pos;
          continue;
        }
        if (pos > gap)
          next.push_back(begin + pos);
        pos += m;
        next.push_back(begin + pos);
        gap = pos;
      }
      if (gap < s.n)
        next.push_back(end);
      begin = end;
    }
    pieces.swap(next);
  }
  ends.insert(ends.end(), pieces.begin(), pieces.end());
}
