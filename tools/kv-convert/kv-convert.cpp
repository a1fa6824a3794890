//===- kv-convert.cpp - Convert models between llama2.c and GGUF ---------===//
//
//   kv-convert IN OUT [--to gguf|llama2c] [--type TYPE] [--tokenizer FILE]
//
// IN is a llama2.c checkpoint or a GGUF file (told by its magic, as
// kv-run --model does), or `synthetic:dim=256,hidden=512,...`, a seeded
// synthetic model of that shape (tests and benchmarks make their files from
// it). OUT is written as GGUF when --to gguf or OUT ends in .gguf, else as a
// llama2.c checkpoint. GGUF output takes --type for its matrices (default
// f32; docs/models.md: f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, and the
// q4_k_m and q5_k_m mixes), reports the quantisation error of the matrices
// (the written file read back against IN), and takes the tokenizer of
// --tokenizer (a llama2.c tokenizer.bin, or a GGUF file's), else the one
// inside a GGUF IN, else none. Exit status: 0 success, 1 a failed
// conversion, 2 a usage error.
//
//===----------------------------------------------------------------------===//

#include "driver/runner/Options.h"
#include "driver/version/Version.h"
#include "runtime/core/GGUF.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
#include "runtime/core/WeightFormat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char *kUsage =
    "kv-convert: convert a model between llama2.c checkpoints and GGUF v3 "
    "(llama\nand qwen2 architectures); IN's format is told by its first bytes "
    "(docs/models.md)\n"
    "\n"
    "usage: kv-convert IN OUT [--to gguf|llama2c] [--type TYPE]\n"
    "                  [--tokenizer FILE]\n"
    "\n"
    "IN may be synthetic:dim=D,hidden=H,layers=L,heads=N,kv_heads=K,vocab=V"
    "[,seed=S]\n"
    "[,shared=0|1][,arch=llama|llama3|qwen2]: a seeded synthetic model of\n"
    "that shape; arch sets what the rest of the config is (default llama:\n"
    "interleaved RoPE, theta 10000; llama3: theta 500000 and Llama 3.1's\n"
    "RoPE frequency factors, written as rope_freqs; qwen2: half (neox)\n"
    "RoPE, theta 1000000, eps 1e-6, biases on Q, K and V, written as GGUF's\n"
    "qwen2 architecture).\n"
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

/// A seeded synthetic model from `dim=256,hidden=512,...` (docs/models.md);
/// false with `problem` for a malformed spec or an invalid config.
bool syntheticModel(const std::string &spec, kvrt_model **out,
                    std::string &problem) {
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  c.seq_len = 2048;
  uint64_t seed = 1;
  std::string arch = "llama";
  struct Field {
    const char *name;
    int32_t *value;
  } fields[] = {{"dim", &c.dim},
                {"hidden", &c.hidden_dim},
                {"layers", &c.n_layers},
                {"heads", &c.n_heads},
                {"kv_heads", &c.n_kv_heads},
                {"vocab", &c.vocab_size},
                {"shared", &c.shared_classifier}};
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    char *end = nullptr;
    unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    bool number = !value.empty() && *end == '\0' && v <= INT32_MAX;
    bool known = false;
    for (const Field &f : fields)
      if (key == f.name) {
        known = true;
        *f.value = int32_t(v);
      }
    if (key == "seed") {
      known = true;
      seed = v;
    }
    if (key == "arch") {
      if (value != "llama" && value != "llama3" && value != "qwen2") {
        problem = "bad synthetic model '" + item +
                  "' (arch = llama, llama3 or qwen2)";
        return false;
      }
      arch = value;
      continue;
    }
    if (!known || !number) {
      problem = "bad synthetic model '" + item +
                "' (dim, hidden, layers, heads, kv_heads, vocab, seed, "
                "shared = an integer)";
      return false;
    }
  }
  if (arch == "llama3") {
    // Llama 3.1's RoPE: base 500000, factor 8 over an original context of
    // 8192, low and high frequency factors 1 and 4.
    c.rope_theta = 500000.0;
    if (c.n_heads > 0 && c.dim % c.n_heads == 0 &&
        (c.dim / c.n_heads) % 2 == 0 &&
        c.dim / c.n_heads / 2 <= KVRT_MAX_ROPE_PAIRS) {
      std::vector<float> factors = kvir::llama3RopeFreqFactors(
          c.dim / c.n_heads, c.rope_theta, 8.0, 1.0, 4.0, 8192.0);
      c.n_rope_freq_factors = int32_t(factors.size());
      std::copy(factors.begin(), factors.end(), c.rope_freq_factors);
    }
  } else if (arch == "qwen2") {
    c.rope_layout = KVRT_ROPE_HALF;
    c.rope_theta = 1000000.0;
    c.rms_eps = 1e-6;
    c.qkv_bias = 1;
  }
  if (kvrt_model_synthetic(&c, seed, out)) {
    problem = kvrt_last_error();
    return false;
  }
  return true;
}

/// The error of a model's matrices against another's (the same config).
struct ErrorStats {
  double sumSquares = 0, sumReference = 0, max = 0;
  uint64_t count = 0;
  /// The formats the matrices have, with how many slices each.
  std::string formats;
  double rms() const { return count ? std::sqrt(sumSquares / count) : 0; }
  double scale() const { return count ? std::sqrt(sumReference / count) : 0; }
};

/// The error of `model`'s matrices against `reference`'s (the same config),
/// `model`'s rows dequantised one at a time: a dequantised copy of a
/// quantised model of ~1e9 weights would take gigabytes.
ErrorStats matrixError(const kvrt_model &reference, const kvrt_model &model) {
  const std::vector<float> &a = kvrt::f32Weights(reference);
  ErrorStats stats;
  std::map<std::string, int> slices;
  const float *pa = a.data();
  std::vector<float> row;
  for (const kvrt::TensorSpec &spec : kvrt::specsOf(model.config)) {
    const kvrt_weight &w = model.weights.*spec.decl->member;
    // Matrices only: vectors (norms, biases) are written f32.
    if (spec.kind == kvrt::TensorKind::Matrix ||
        spec.kind == kvrt::TensorKind::Embedding) {
      row.resize(size_t(w.cols));
      const float *ref = pa;
      for (int64_t s = 0; s < w.n_slices; ++s) {
        const kvrt_weight_slice &slice = w.slices[s];
        ++slices[kvrt::weightFormatName(slice.format)];
        int64_t rowBytes = kvrt::weightRowBytes(slice.format, w.cols);
        for (int64_t r = 0; r < w.rows; ++r, ref += w.cols) {
          kvrt::dequantizeRow(slice.format,
                              static_cast<const uint8_t *>(slice.data) +
                                  r * rowBytes,
                              row.data(), w.cols);
          for (int64_t i = 0; i < w.cols; ++i) {
            double d = double(row[i]) - double(ref[i]);
            stats.sumSquares += d * d;
            stats.sumReference += double(ref[i]) * ref[i];
            stats.max = std::max(stats.max, std::fabs(d));
          }
        }
      }
      stats.count += spec.count;
    }
    pa += spec.count;
  }
  for (auto &[name, n] : slices)
    stats.formats +=
        (stats.formats.empty() ? "" : ", ") + std::to_string(n) + " " + name;
  return stats;
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
              "GGUF only: the matrices' format: f32 (default), f16, bf16, "
              "q8_0, q4_0, q4_k, q5_k, q6_k, or llama.cpp's mixes q4_k_m and "
              "q5_k_m (Q6_K for the classifier and some layers' attn_v and "
              "ffn_down); norms stay f32, and rows that are not whole "
              "blocks fall back to q8_0 (K-quants) or f16 (docs/models.md)",
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
  struct Type {
    const char *name;
    kvrt_gguf_type type;
  } types[] = {{"f32", KVRT_GGUF_F32},       {"f16", KVRT_GGUF_F16},
               {"bf16", KVRT_GGUF_BF16},     {"q8_0", KVRT_GGUF_Q8_0},
               {"q4_0", KVRT_GGUF_Q4_0},     {"q4_k", KVRT_GGUF_Q4_K},
               {"q5_k", KVRT_GGUF_Q5_K},     {"q6_k", KVRT_GGUF_Q6_K},
               {"q4_k_m", KVRT_GGUF_Q4_K_M}, {"q5_k_m", KVRT_GGUF_Q5_K_M}};
  const Type *chosen = nullptr;
  for (const Type &t : types)
    if (type == t.name)
      chosen = &t;
  if (!chosen)
    return usageError("--type must be f32, f16, bf16, q8_0, q4_0, q4_k, "
                      "q5_k, q6_k, q4_k_m or q5_k_m, got '" +
                      type + "'");
  kvrt_gguf_type ggufType = chosen->type;
  if (to == "llama2c" && (typeGiven || tokenizerGiven))
    return usageError("--type and --tokenizer apply to GGUF output only");

  kvrt_model *rawModel = nullptr;
  if (in.rfind("synthetic:", 0) == 0) {
    std::string problem;
    if (!syntheticModel(in.substr(10), &rawModel, problem))
      return usageError(problem);
  } else if (kvrt_model_load(in.c_str(), &rawModel)) {
    return failure(kvrt_last_error());
  }
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
  // The error of the matrices as written: the file read back, dequantised,
  // against the model converted.
  kvrt_model *rawBack = nullptr;
  if (kvrt_model_load(out.c_str(), &rawBack))
    return failure(kvrt_last_error());
  std::unique_ptr<kvrt_model, void (*)(kvrt_model *)> back(rawBack,
                                                           kvrt_model_release);
  ErrorStats stats = matrixError(*model, *back);
  std::printf("matrices: %s; error vs IN: RMS %.3e (%.2f%% of their RMS "
              "%.3e), max %.3e over %llu weights\n",
              stats.formats.c_str(), stats.rms(),
              100.0 * stats.rms() / stats.scale(), stats.scale(), stats.max,
              static_cast<unsigned long long>(stats.count));
  return 0;
}
