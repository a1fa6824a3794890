//===- kv-convert.cpp - Convert models between llama2.c and GGUF ---------===//
//
//   kv-convert IN OUT [--to gguf|llama2c] [--type f32|f16|bf16|q8_0]
//              [--tokenizer FILE]
//
// IN is a llama2.c checkpoint or a GGUF file (told by its magic, as
// kv-run --model does). OUT is written as GGUF when --to gguf or OUT ends in
// .gguf, else as a llama2.c checkpoint. GGUF output takes --type for its
// matrices (default f32) and the tokenizer of --tokenizer (a llama2.c
// tokenizer.bin, or a GGUF file's), else the one inside a GGUF IN, else
// none. Exit status: 0 success, 1 a failed conversion, 2 a usage error.
//
//===----------------------------------------------------------------------===//

#include "driver/runner/Options.h"
#include "driver/version/Version.h"
#include "runtime/core/GGUF.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const char *kUsage =
    "kv-convert: convert a model between llama2.c checkpoints and GGUF v3 "
    "(llama\narchitecture); IN's format is told by its first bytes "
    "(docs/models.md)\n"
    "\n"
    "usage: kv-convert IN OUT [--to gguf|llama2c] [--type f32|f16|bf16|q8_0]\n"
    "                  [--tokenizer FILE]\n"
    "\n"
    "A GGUF model converts to llama2.c only where that format can hold it:\n"
    "interleaved RoPE over the whole head, theta 10000, eps 1e-5, no RoPE\n"
    "scaling. Every weight is read as f32, so a quantised GGUF converts\n"
    "with its dequantised values.\n";

/// A usage error: the message and where the options are listed, not the
/// whole help.
int usageError(const std::string &message) {
  std::fprintf(stderr, "kv-convert: error: %s (kv-convert --help)\n",
               message.c_str());
  return 2;
}

int failure(const std::string &message) {
  std::fprintf(stderr, "kv-convert: error: %s\n", message.c_str());
  return 1;
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string to, type = "f32", tokenizerPath;
  bool typeGiven = false, tokenizerGiven = false;
  kvir::run::OptionParser parser("kv-convert");
  parser.section("options");
  parser.text("to", "FORMAT",
              "gguf or llama2c (default: gguf when OUT ends in .gguf, else "
              "llama2c)",
              to);
  parser.text("type", "TYPE",
              "GGUF only: f32 (default), f16, bf16 or q8_0 for the matrices; "
              "norms stay f32, and q8_0 matrices whose rows are not a "
              "multiple of 32 are written f16",
              type, &typeGiven);
  parser.text("tokenizer", "FILE",
              "GGUF only: the vocabulary to embed (a llama2.c tokenizer.bin "
              "or a GGUF file); by default a GGUF IN's own, else none",
              tokenizerPath, &tokenizerGiven);
  std::vector<std::string> files;
  std::string problem;
  if (!parser.parse(argc, argv, 1, files, problem))
    return usageError(problem);
  if (parser.helpRequested()) {
    parser.printHelp(stdout, kUsage);
    return 0;
  }
  if (parser.versionRequested()) {
    std::fputs(kvir::versionText("kv-convert").c_str(), stdout);
    return 0;
  }
  if (files.size() > 2)
    return usageError("unexpected argument '" + files[2] + "'");
  if (files.size() < 2)
    return usageError("expected IN and OUT files");
  const std::string &in = files[0], &out = files[1];
  if (tokenizerGiven && tokenizerPath.empty())
    return usageError("--tokenizer needs a file name");
  if (to.empty())
    to = endsWith(out, ".gguf") ? "gguf" : "llama2c";
  if (to != "gguf" && to != "llama2c")
    return usageError("--to must be gguf or llama2c, got '" + to + "'");
  kvrt_gguf_type ggufType;
  if (type == "f32")
    ggufType = KVRT_GGUF_F32;
  else if (type == "f16")
    ggufType = KVRT_GGUF_F16;
  else if (type == "bf16")
    ggufType = KVRT_GGUF_BF16;
  else if (type == "q8_0")
    ggufType = KVRT_GGUF_Q8_0;
  else
    return usageError("--type must be f32, f16, bf16 or q8_0, got '" + type +
                      "'");
  if (to == "llama2c" && (typeGiven || tokenizerGiven))
    return usageError("--type and --tokenizer apply to GGUF output only");

  kvrt_model *rawModel = nullptr;
  if (kvrt_model_load(in.c_str(), &rawModel))
    return failure(kvrt_last_error());
  std::unique_ptr<kvrt_model, void (*)(kvrt_model *)> model(rawModel,
                                                            kvrt_model_release);

  if (to == "llama2c") {
    if (kvrt_model_save(model.get(), out.c_str()))
      return failure(kvrt_last_error());
    std::printf("wrote %s (llama2.c)\n", out.c_str());
    return 0;
  }
  std::unique_ptr<kvrt_tokenizer, void (*)(kvrt_tokenizer *)> tokenizer(
      nullptr, kvrt_tokenizer_release);
  std::string source = tokenizerPath;
  if (source.empty() && kvrt::gguf::fileHasMagic(in.c_str())) {
    kvrt_tokenizer *raw = nullptr;
    std::string error = kvrt::gguf::readFile(in.c_str(), nullptr, &raw);
    if (!error.empty())
      return failure(error);
    tokenizer.reset(raw);
    if (raw)
      source = in;
  } else if (!source.empty()) {
    kvrt_tokenizer *raw = nullptr;
    if (kvrt_tokenizer_load(source.c_str(), &raw))
      return failure(kvrt_last_error());
    tokenizer.reset(raw);
  }
  if (kvrt_model_save_gguf(model.get(), tokenizer.get(), ggufType, out.c_str()))
    return failure(kvrt_last_error());
  std::printf("wrote %s (GGUF, %s matrices, %s)\n", out.c_str(), type.c_str(),
              tokenizer ? ("tokenizer from " + source).c_str()
                        : "no tokenizer");
  return 0;
}
