//===- TokenizerGoldenTest.cpp - Byte-level BPE against llama.cpp ---------===//
//
// KVIR's token ids against llama.cpp's, the reference implementation:
//   - on the small vocabularies of test/golden/tokenizer/ (one per
//     pre-tokenizer, vocabulary-only GGUF files the build writes from the
//     committed merges), for every text of texts.txt, with and without
//     special handling; the goldens are llama.cpp's ids (make-goldens.sh);
//   - on llama.cpp's own test vocabularies (models/ggml-vocab-*.gguf with
//     their .inp/.out cases, made by the HF tokenizers) when
//     KVIR_LLAMA_VOCAB_DIR names a folder holding them: skipped otherwise.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "test/unit/core/GoldenTexts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using TokenizerRef =
    std::unique_ptr<kvrt_tokenizer, void (*)(kvrt_tokenizer *)>;

TokenizerRef load(const std::string &path) {
  kvrt_tokenizer *raw = nullptr;
  kvrt_status status = kvrt_tokenizer_load(path.c_str(), &raw);
  EXPECT_EQ(status, KVRT_OK) << kvrt_last_error();
  return TokenizerRef(raw, kvrt_tokenizer_release);
}

using kvir::test::readGoldenTexts;
using kvir::test::readLines;

std::vector<int32_t> parseIds(const std::string &text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  for (int32_t id; in >> id;)
    ids.push_back(id);
  return ids;
}

std::string show(const std::vector<int32_t> &ids) {
  std::string out;
  for (int32_t id : ids)
    out += (out.empty() ? "" : " ") + std::to_string(id);
  return "[" + out + "]";
}

class GoldenTest : public testing::TestWithParam<const char *> {};

TEST_P(GoldenTest, IdsAreLlamaCpps) {
  std::string name = GetParam();
  TokenizerRef tok =
      load(std::string(KVIR_GOLDEN_VOCAB_DIR "/") + name + ".gguf");
  ASSERT_TRUE(tok);
  EXPECT_EQ(kvrt_tokenizer_get_kind(tok.get()), KVRT_TOKENIZER_BYTE_BPE);
  EXPECT_EQ(std::string(kvrt_tokenizer_pre_tokenizer(tok.get())), name);
  std::vector<std::string> texts = readGoldenTexts(KVIR_GOLDEN_DIR);
  std::vector<std::string> goldens =
      readLines(KVIR_GOLDEN_DIR "/goldens/" + name + ".golden");
  ASSERT_EQ(texts.size(), goldens.size());
  ASSERT_GE(texts.size(), 500u);
  size_t same[2] = {0, 0}, shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string &text = texts[i];
    size_t tab = goldens[i].find('\t');
    ASSERT_NE(tab, std::string::npos) << "golden line " << i + 1;
    std::vector<int32_t> expected[2] = {parseIds(goldens[i].substr(0, tab)),
                                        {}};
    std::string second = goldens[i].substr(tab + 1);
    if (second == "=" || second == "B=") {
      if (second == "B=")
        expected[1].push_back(kvrt_tokenizer_bos_id(tok.get()));
      expected[1].insert(expected[1].end(), expected[0].begin(),
                         expected[0].end());
    } else {
      expected[1] = parseIds(second);
    }
    uint32_t flags[2] = {0, KVRT_ENCODE_ADD_SPECIAL | KVRT_ENCODE_SPECIAL};
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<int32_t> ids;
      ASSERT_EQ(kvir::encode(tok.get(), text, flags[mode], ids), KVRT_OK)
          << kvrt_last_error();
      if (ids == expected[mode])
        ++same[mode];
      else if (shown++ < 10)
        ADD_FAILURE() << name << " text " << i + 1 << " '" << text << "' ("
                      << (mode ? "special" : "plain") << "): KVIR " << show(ids)
                      << ", llama.cpp " << show(expected[mode]);
    }
  }
  std::cout << "[ golden   ] " << name << ": " << same[0] << "/" << texts.size()
            << " texts identical, " << same[1] << "/" << texts.size()
            << " with special tokens and BOS/EOS\n";
  EXPECT_EQ(same[0], texts.size());
  EXPECT_EQ(same[1], texts.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, GoldenTest,
                         testing::Values("llama-bpe", "qwen2", "gpt-2",
                                         "deepseek-llm", "deepseek-coder",
                                         "falcon", "starcoder", "default"),
                         [](const testing::TestParamInfo<const char *> &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

/// The cases of one llama.cpp test vocabulary: texts of NAME.gguf.inp
/// (separated by "\n__ggml_vocab_test__\n") and ids of NAME.gguf.out.
struct LlamaCases {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

bool readLlamaCases(const std::string &base, LlamaCases &out) {
  std::ifstream inp(base + ".inp", std::ios::binary);
  if (!inp)
    return false;
  std::string raw((std::istreambuf_iterator<char>(inp)),
                  std::istreambuf_iterator<char>());
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.texts.push_back(raw.substr(pos));
      break;
    }
    out.texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  for (const std::string &line : readLines(base + ".out"))
    out.ids.push_back(parseIds(line));
  return out.texts.size() == out.ids.size();
}

TEST(LlamaVocabTest, RealVocabulariesMatchTheirCases) {
  std::string dir = KVIR_LLAMA_VOCAB_DIR;
  if (dir.empty() || !std::filesystem::is_directory(dir))
    GTEST_SKIP() << "llama.cpp's test vocabularies not found (configure with "
                    "-DKVIR_LLAMA_VOCAB_DIR=<llama.cpp>/models); looked in '"
                 << dir << "'";
  const char *names[] = {"llama-bpe",    "qwen2",          "gpt-2",
                         "deepseek-llm", "deepseek-coder", "falcon",
                         "starcoder",    "refact",         "mpt"};
  size_t vocabularies = 0;
  for (const char *name : names) {
    std::string base = dir + "/ggml-vocab-" + name + ".gguf";
    LlamaCases cases;
    if (!std::filesystem::exists(base) || !readLlamaCases(base, cases))
      continue;
    ++vocabularies;
    TokenizerRef tok = load(base);
    ASSERT_TRUE(tok) << base;
    size_t same = 0;
    for (size_t i = 0; i < cases.texts.size(); ++i) {
      std::vector<int32_t> ids;
      ASSERT_EQ(kvir::encode(tok.get(), cases.texts[i], 0u, ids), KVRT_OK)
          << kvrt_last_error();
      if (ids == cases.ids[i])
        ++same;
      else
        ADD_FAILURE() << name << " case " << i + 1 << " '" << cases.texts[i]
                      << "': KVIR " << show(ids) << ", expected "
                      << show(cases.ids[i]);
    }
    std::cout << "[ llama    ] ggml-vocab-" << name << ": " << same << "/"
              << cases.texts.size() << " cases identical\n";
  }
  if (vocabularies == 0)
    GTEST_SKIP() << "no ggml-vocab-*.gguf with .inp/.out cases in " << dir;
}

} // namespace
