//===- golden-maker.cpp - Token ids from llama.cpp, the reference ---------===//
//
// Not part of the build: make-goldens.sh compiles it against llama.cpp's
// prebuilt library (libllama, from the npm package @node-llama-cpp/linux-x64)
// and its header (llama.h, from the llama.cpp source in node-llama-cpp).
//
//   golden-maker VOCAB.gguf TEXTS.txt > VOCAB.golden
//
// Loads the vocabulary alone (vocab_only) and prints, for each text of
// TEXTS.txt (one per line, escaped as make-texts.py writes them), one line:
// the ids of llama_tokenize without special handling (add_special and
// parse_special false), a tab, and the ids with both (BOS/EOS as the
// vocabulary says, special tokens written in the text recognised); the
// second list is written "=" where it equals the first and "B=" where it is
// the first after BOS, which is most texts.
//
//===----------------------------------------------------------------------===//

#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

/// Reverses make-texts.py's escaping.
std::string unescape(const std::string &line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      out += line[i];
      continue;
    }
    char c = line[++i];
    if (c == 'n')
      out += '\n';
    else if (c == 'r')
      out += '\r';
    else if (c == 't')
      out += '\t';
    else if (c == 'x' && i + 2 < line.size()) {
      out += static_cast<char>(std::stoi(line.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else
      out += c;
  }
  return out;
}

std::string idsOf(const llama_vocab *vocab, const std::string &text,
                  bool special) {
  std::vector<llama_token> ids(text.size() * 3 + 8);
  int32_t n = llama_tokenize(vocab, text.data(), int32_t(text.size()),
                             ids.data(), int32_t(ids.size()), special, special);
  if (n < 0) {
    std::fprintf(stderr, "golden-maker: llama_tokenize failed (%d)\n", n);
    std::exit(1);
  }
  std::string out;
  for (int32_t i = 0; i < n; ++i)
    out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

void quiet(ggml_log_level level, const char *text, void *) {
  if (level == GGML_LOG_LEVEL_ERROR)
    std::fputs(text, stderr);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: golden-maker VOCAB.gguf TEXTS.txt\n");
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model *model = llama_model_load_from_file(argv[1], params);
  if (!model) {
    std::fprintf(stderr, "golden-maker: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab *vocab = llama_model_get_vocab(model);
  std::ifstream texts(argv[2]);
  for (std::string line; std::getline(texts, line);) {
    std::string text = unescape(line);
    std::string plain = idsOf(vocab, text, false),
                special = idsOf(vocab, text, true);
    std::string bos = std::to_string(llama_vocab_bos(vocab));
    if (special == plain)
      special = "=";
    else if (special == bos + (plain.empty() ? "" : " ") + plain)
      special = "B=";
    std::printf("%s\t%s\n", plain.c_str(), special.c_str());
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
