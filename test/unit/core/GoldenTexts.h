//===- GoldenTexts.h - The texts of the tokenizer goldens -------*- C++ -*-===//
//
// Reads test/golden/tokenizer/texts.txt: one text a line, escaped by
// make-texts.py (\n \r \t \\ and \xHH for other control bytes and bytes
// that are not UTF-8).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TEST_UNIT_GOLDENTEXTS_H
#define KVIR_TEST_UNIT_GOLDENTEXTS_H

#include <fstream>
#include <string>
#include <vector>

namespace kvir::test {

/// Reverses make-texts.py's escaping of one line.
inline std::string unescapeGoldenText(const std::string &line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      out += line[i];
      continue;
    }
    char c = line[++i];
    if (c == 'x' && i + 2 < line.size()) {
      out += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
    }
  }
  return out;
}

/// The lines of the file at `path`.
inline std::vector<std::string> readLines(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

/// The texts of texts.txt in `dir`, unescaped.
inline std::vector<std::string> readGoldenTexts(const std::string &dir) {
  std::vector<std::string> texts;
  for (const std::string &line : readLines(dir + "/texts.txt"))
    texts.push_back(unescapeGoldenText(line));
  return texts;
}

} // namespace kvir::test

#endif // KVIR_TEST_UNIT_GOLDENTEXTS_H
