//===- GGUFTest.cpp - GGUF models and tokenizers ----------------*- C++ -*-===//
//
// stories260K converted to GGUF at test time (in the build directory) by
// kv-convert: F32 gives llama2.c's logits to 1e-4; F16, BF16 and Q8_0 give,
// bit for bit, the weights of the llama2.c model rounded the same way (the
// rounding is written here independently of the runtime's) and its logits to
// 1e-4; GGUF to llama2.c gives back the weights; the embedded tokenizer is
// tok512.bin's. A malformed-GGUF corpus, made here from a small valid file,
// checks each problem's message, and every prefix and seeded byte flips of a
// valid file parse without a crash.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
#include "runtime/reference/Reference.h"
#include "test/unit/TestSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <unistd.h>

using namespace kvir::test;

namespace {

constexpr double kLogitTolerance = 1e-4;

std::string tokenizerPath() {
  return (std::filesystem::path(testModelPath()).parent_path() / "tok512.bin")
      .string();
}

/// A file name of this test process in the working directory (ctest runs
/// each test in its own process, in parallel), removed when it exits.
std::string scratch(const std::string &name) {
  struct Files {
    std::vector<std::string> paths;
    ~Files() {
      for (const std::string &path : paths)
        std::remove(path.c_str());
    }
  };
  static Files files;
  std::string path = "gguf-test-" + std::to_string(::getpid()) + "-" + name;
  files.paths.push_back(path);
  return path;
}

/// Writes `model` in `type` to the scratch file `name`; its path, or ""
/// (after a test failure naming the error) where the write fails.
std::string saveGGUF(const kvrt_model *model, kvrt_gguf_type type,
                     const std::string &name) {
  std::string path = scratch(name);
  kvrt_status status = kvrt_model_save_gguf(model, nullptr, type, path.c_str());
  EXPECT_EQ(status, KVRT_OK) << kvrt_last_error();
  return status == KVRT_OK ? path : "";
}

/// Runs kv-convert; its exit status.
int convert(const std::string &args) {
  std::string command =
      std::string(KVIR_KV_CONVERT_PATH) + " " + args + " > /dev/null";
  return std::system(command.c_str());
}

/// stories260K converted to GGUF with `type` and the tokenizer, once per
/// type per test binary; the path of the file.
std::string storiesGGUF(const std::string &type) {
  static std::map<std::string, std::string> made;
  auto [it, fresh] = made.try_emplace(type, "");
  std::string &path = it->second;
  if (fresh) {
    path = scratch("stories260K-" + type + ".gguf");
    EXPECT_EQ(convert(testModelPath() + " " + path + " --type " + type +
                      " --tokenizer " + tokenizerPath()),
              0)
        << "kv-convert failed";
  }
  return path;
}

/// Every weight of a model as f32 (dequantised where it is not).
std::vector<float> weightsOf(const kvrt_model *model) {
  return kvrt::f32Weights(*model);
}

/// IEEE binary16 rounding through the compiler's _Float16 (an independent
/// implementation of the runtime's).
float roundF16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

/// bfloat16 rounding: round to nearest even on the upper 16 bits.
float roundBF16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  uint32_t lsb = (bits >> 16) & 1;
  bits = (bits + 0x7fff + lsb) & 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

/// llama.cpp's quantize_row_q8_0_ref then dequantize_row_q8_0 on 32 values.
void roundQ8Block(float *x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j)
    amax = std::max(amax, std::fabs(x[j]));
  float d = amax / 127.0f;
  float id = d != 0 ? 1.0f / d : 0.0f;
  float dh = roundF16(d);
  for (int j = 0; j < 32; ++j)
    x[j] = dh * static_cast<float>(static_cast<int8_t>(roundf(x[j] * id)));
}

/// The llama2.c model's weights as the GGUF writer of `type` rounds them:
/// vectors kept, matrices rounded, Q8_0 matrices with rows of other than a
/// multiple of 32 as F16.
std::vector<float> roundedWeights(const kvrt_model *model,
                                  const std::string &type) {
  std::vector<float> data = weightsOf(model);
  float *p = data.data();
  std::vector<kvrt::TensorSpec> specs = *kvrt::tensorSpecs(model->config);
  for (const kvrt::TensorSpec &spec : specs) {
    if (spec.kind != kvrt::TensorKind::Norm) {
      bool q8 = type == "q8_0" && spec.fanIn % 32 == 0;
      for (uint64_t i = 0; i < spec.count; i += q8 ? 32 : 1) {
        if (q8)
          roundQ8Block(p + i);
        else
          p[i] = type == "bf16" ? roundBF16(p[i]) : roundF16(p[i]);
      }
    }
    p += spec.count;
  }
  return data;
}

/// The bytes of the file at `path`.
std::string fileBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> oracleLogits(const kvrt_model *model,
                                const std::vector<int32_t> &tokens) {
  PoolPtr pool = poolFor(model, 8);
  ViewPtr empty = emptyView(pool.get());
  std::vector<float> logits;
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvir::reference::prefill(model, empty.get(), tokens.data(),
                                     tokens.size(), 0, "t", &logits, &out),
            KVRT_OK)
      << kvrt_last_error();
  kvrt_view_release(out);
  return logits;
}

//===----------------------------------------------------------------------===//
// stories260K through GGUF
//===----------------------------------------------------------------------===//

TEST(GGUFTest, F32GivesLlama2cLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  ModelPtr original = loadModel(testModelPath());
  ModelPtr gguf = loadModel(storiesGGUF("f32"));
  kvrt_model_config a = original->config, b = gguf->config;
  EXPECT_EQ(b.dim, a.dim);
  EXPECT_EQ(b.hidden_dim, a.hidden_dim);
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.n_heads, a.n_heads);
  EXPECT_EQ(b.n_kv_heads, a.n_kv_heads);
  EXPECT_EQ(b.vocab_size, a.vocab_size);
  EXPECT_EQ(b.seq_len, a.seq_len);
  EXPECT_EQ(b.shared_classifier, a.shared_classifier);
  EXPECT_EQ(b.rope_layout, KVRT_ROPE_INTERLEAVED);
  EXPECT_EQ(b.rope_dim, 0);
  // f32 keys read back as their shortest decimal: exactly llama2.c's values.
  EXPECT_EQ(b.rope_theta, 10000.0);
  EXPECT_EQ(b.rms_eps, 1e-5);
  EXPECT_EQ(weightsOf(gguf.get()), weightsOf(original.get()));
  std::vector<int32_t> tokens = readTokenFile(greedyTokensPath());
  std::vector<float> expected = readFloats(greedyLogitsPath());
  std::vector<float> got = oracleLogits(gguf.get(), tokens);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LT(maxAbsDiff(got.data(), expected.data(), got.size()),
            kLogitTolerance);
}

void checkRounded(const std::string &type) {
  ModelPtr original = loadModel(testModelPath());
  ModelPtr gguf = loadModel(storiesGGUF(type));
  std::vector<float> rounded = roundedWeights(original.get(), type);
  std::vector<float> got = weightsOf(gguf.get());
  ASSERT_EQ(got.size(), rounded.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i)
    differ += std::memcmp(&got[i], &rounded[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "weights that differ from the rounded llama2.c";
  // The rounding is real: the weights are not the original ones.
  EXPECT_NE(got, weightsOf(original.get()));
  ModelPtr reference(kvrt::makeModel(original->config, rounded));
  std::vector<int32_t> tokens = readTokenFile(greedyTokensPath());
  std::vector<float> expected = oracleLogits(reference.get(), tokens);
  std::vector<float> logits = oracleLogits(gguf.get(), tokens);
  ASSERT_EQ(logits.size(), expected.size());
  EXPECT_LT(maxAbsDiff(logits.data(), expected.data(), logits.size()),
            kLogitTolerance);
}

TEST(GGUFTest, F16GivesTheRoundedModelsLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  checkRounded("f16");
}

TEST(GGUFTest, BF16GivesTheRoundedModelsLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  checkRounded("bf16");
}

TEST(GGUFTest, Q8_0GivesTheRoundedModelsLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  checkRounded("q8_0");
}

TEST(GGUFTest, ConvertsBackToLlama2c) {
  KVIR_REQUIRE_TEST_MODEL();
  std::string backPath = scratch("back.bin"), q8Path = scratch("q8.bin");
  ASSERT_EQ(convert(storiesGGUF("f32") + " " + backPath), 0);
  ModelPtr back = loadModel(backPath);
  ModelPtr original = loadModel(testModelPath());
  EXPECT_EQ(weightsOf(back.get()), weightsOf(original.get()));
  EXPECT_EQ(back->config.seq_len, original->config.seq_len);
  // A quantised GGUF converts with its dequantised weights.
  ASSERT_EQ(convert(storiesGGUF("q8_0") + " " + q8Path), 0);
  ModelPtr q8 = loadModel(q8Path);
  EXPECT_EQ(weightsOf(q8.get()), roundedWeights(original.get(), "q8_0"));
}

TEST(GGUFTest, TokenizerIsTok512) {
  KVIR_REQUIRE_TEST_MODEL();
  std::string path = storiesGGUF("f32");
  kvrt_tokenizer *rawA = nullptr, *rawB = nullptr;
  ASSERT_EQ(kvrt_tokenizer_load(tokenizerPath().c_str(), &rawA), KVRT_OK)
      << kvrt_last_error();
  ASSERT_EQ(kvrt_tokenizer_load(path.c_str(), &rawB), KVRT_OK)
      << kvrt_last_error();
  std::unique_ptr<kvrt_tokenizer, void (*)(kvrt_tokenizer *)> a(
      rawA, kvrt_tokenizer_release),
      b(rawB, kvrt_tokenizer_release);
  ASSERT_EQ(kvrt_tokenizer_vocab_size(b.get()), 512);
  EXPECT_EQ(kvrt_tokenizer_unk_id(b.get()), 0);
  EXPECT_EQ(kvrt_tokenizer_bos_id(b.get()), 1);
  EXPECT_EQ(kvrt_tokenizer_eos_id(b.get()), 2);
  for (int32_t id = 0; id < 512; ++id) {
    const char *pa, *pb;
    size_t la, lb;
    float sa, sb;
    ASSERT_EQ(kvrt_tokenizer_get_piece(a.get(), id, &pa, &la, &sa), KVRT_OK);
    ASSERT_EQ(kvrt_tokenizer_get_piece(b.get(), id, &pb, &lb, &sb), KVRT_OK);
    EXPECT_EQ(std::string(pa, la), std::string(pb, lb)) << id;
    EXPECT_EQ(sa, sb) << id;
  }
  // The file holds U+2581 for spaces, not ' ' (the reader turns them back).
  std::string bytes = fileBytes(path);
  EXPECT_NE(bytes.find("\xe2\x96\x81"
                       "Once"),
            std::string::npos);
  for (const char *text :
       {"Once upon a time, there was a little girl named Lily.",
        "Zo\xc3\xab saw a \xf0\x9f\x90\x89 and said \"hi\"\nbye", ""}) {
    std::vector<int32_t> ta, tb;
    ASSERT_EQ(kvir::encode(a.get(), text, true, false, ta), KVRT_OK);
    ASSERT_EQ(kvir::encode(b.get(), text, true, false, tb), KVRT_OK);
    EXPECT_EQ(ta, tb) << text;
    std::string da, db;
    ASSERT_EQ(kvir::decode(b.get(), tb, db), KVRT_OK);
    ASSERT_EQ(kvir::decode(a.get(), ta, da), KVRT_OK);
    EXPECT_EQ(da, db);
    EXPECT_EQ(db, text);
  }
}

TEST(GGUFTest, RopeVariantsRoundTrip) {
  // Linear scaling and Llama 3 factors go into keys and a rope_freqs tensor
  // and come back; partial rotary into rope.dimension_count.
  for (const RopeVariant &variant : ropeVariants()) {
    if (variant.config.rope_layout != KVRT_ROPE_INTERLEAVED)
      continue;
    SCOPED_TRACE(variant.name);
    ModelPtr model = syntheticModel(variant.config, 3);
    std::string path =
        saveGGUF(model.get(), KVRT_GGUF_F32, variant.name + ".gguf");
    ASSERT_FALSE(path.empty());
    ModelPtr back = loadModel(path);
    ASSERT_TRUE(back);
    const kvrt_model_config &a = model->config, &b = back->config;
    EXPECT_EQ(b.rope_dim, a.rope_dim);
    EXPECT_EQ(kvir::ropeScale(b), kvir::ropeScale(a));
    ASSERT_EQ(b.n_rope_freq_factors, a.n_rope_freq_factors);
    for (int32_t i = 0; i < a.n_rope_freq_factors; ++i)
      EXPECT_EQ(b.rope_freq_factors[i], a.rope_freq_factors[i]);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(weightsOf(back.get()), weightsOf(model.get()));
  }
  // Half RoPE is qwen2's, which rotates whole heads without factors:
  // partial rotary with half RoPE is refused, not written wrong.
  kvrt_model_config partialHalf = smallConfig(KVRT_ROPE_HALF);
  partialHalf.rope_dim = 8;
  ModelPtr half = syntheticModel(partialHalf, 3);
  EXPECT_EQ(kvrt_model_save_gguf(half.get(), nullptr, KVRT_GGUF_F32,
                                 scratch("half.gguf").c_str()),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("qwen2 architecture"),
            std::string::npos);
}

TEST(GGUFTest, QkvBiasesRoundTrip) {
  // The biases are written as attn_{q,k,v}.bias (F32 vectors, whatever the
  // matrices' type); a file that has them loads with qkv_bias, and gives the
  // oracle's logits of the model it was written from.
  kvrt_model_config c = smallConfig(KVRT_ROPE_INTERLEAVED);
  c.qkv_bias = 1;
  ModelPtr model = syntheticModel(c, 11);
  std::string path = saveGGUF(model.get(), KVRT_GGUF_F32, "bias.gguf");
  ASSERT_FALSE(path.empty());
  ModelPtr back = loadModel(path);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->config.qkv_bias, 1);
  EXPECT_EQ(weightsOf(back.get()), weightsOf(model.get()));
  std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
  EXPECT_EQ(oracleLogits(back.get(), tokens),
            oracleLogits(model.get(), tokens));
  // The biases change the logits: the same weights without them differ.
  kvrt_model_config plain = c;
  plain.qkv_bias = 0;
  ModelPtr unbiased = syntheticModel(plain, 11);
  EXPECT_NE(oracleLogits(unbiased.get(), tokens),
            oracleLogits(model.get(), tokens));
  // Q8_0 keeps the bias vectors F32.
  std::string q8 = saveGGUF(model.get(), KVRT_GGUF_Q8_0, "bias-q8.gguf");
  ASSERT_FALSE(q8.empty());
  ModelPtr backQ8 = loadModel(q8);
  ASSERT_TRUE(backQ8);
  kvrt_model_weights w0, w1;
  kvrt_model_get_weights(model.get(), &w0);
  kvrt_model_get_weights(backQ8.get(), &w1);
  ASSERT_EQ(w1.bk.n_slices, w0.bk.n_slices);
  for (int64_t l = 0; l < w0.bk.n_slices; ++l) {
    EXPECT_EQ(w1.bk.slices[l].format, KVRT_WEIGHT_F32);
    ASSERT_EQ(w1.bk.slices[l].bytes, w0.bk.slices[l].bytes);
    EXPECT_EQ(std::memcmp(w0.bk.slices[l].data, w1.bk.slices[l].data,
                          size_t(w0.bk.slices[l].bytes)),
              0);
  }
}

TEST(GGUFTest, Qwen2RoundTrip) {
  // Half (neox) RoPE with biases is written as GGUF's qwen2 architecture
  // (qwen2.* keys), tied or with its own output.weight, and comes back
  // with the same config, weights and oracle logits.
  for (int32_t shared : {0, 1}) {
    SCOPED_TRACE(shared ? "tied classifier" : "output.weight");
    kvrt_model_config c = smallConfig(KVRT_ROPE_HALF);
    c.qkv_bias = 1;
    c.rope_theta = 1000000.0;
    c.shared_classifier = shared;
    ModelPtr model = syntheticModel(c, 5);
    std::string path = saveGGUF(model.get(), KVRT_GGUF_F32, "qwen2.gguf");
    ASSERT_FALSE(path.empty());
    std::string bytes = fileBytes(path);
    EXPECT_NE(bytes.find("qwen2.embedding_length"), std::string::npos);
    EXPECT_EQ(bytes.find("llama."), std::string::npos);
    // The name as GGUF stores it, after its u64 length (not attn_output's).
    std::string output("\x0d\0\0\0\0\0\0\0output.weight", 21);
    EXPECT_EQ(bytes.find(output) != std::string::npos, shared == 0);
    ModelPtr back = loadModel(path);
    ASSERT_TRUE(back);
    const kvrt_model_config &b = back->config;
    EXPECT_EQ(b.rope_layout, KVRT_ROPE_HALF);
    EXPECT_EQ(b.qkv_bias, 1);
    EXPECT_EQ(b.shared_classifier, shared);
    EXPECT_EQ(b.rope_theta, 1000000.0);
    EXPECT_EQ(weightsOf(back.get()), weightsOf(model.get()));
    std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9};
    EXPECT_EQ(oracleLogits(back.get(), tokens),
              oracleLogits(model.get(), tokens));
    // Another architecture's name: an error naming the supported ones.
    std::string other = bytes;
    for (size_t at = other.find("qwen2"); at != std::string::npos;
         at = other.find("qwen2", at))
      other.replace(at, 5, "qwen9");
    kvrt_model *bad = nullptr;
    EXPECT_NE(kvrt_model_load_gguf_buffer(other.data(), other.size(), &bad),
              KVRT_OK);
    EXPECT_EQ(std::string(kvrt_last_error()),
              "bad GGUF model: architecture 'qwen9' is not supported (llama "
              "and qwen2 are)");
  }
}

//===----------------------------------------------------------------------===//
// A malformed-GGUF corpus
//===----------------------------------------------------------------------===//

/// A GGUF file assembled field by field, so that each can be made wrong.
struct Builder {
  struct Key {
    std::string name;
    uint32_t type;
    std::string value; // encoded
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
    std::optional<uint64_t> offset; // default: packed, aligned
  };
  uint32_t magic = 0x46554747, version = 3;
  std::optional<uint64_t> tensorCount, keyCount;
  std::vector<Key> keys;
  std::vector<Tensor> tensors;

  template <typename T> static std::string raw(T v) {
    return std::string(reinterpret_cast<const char *>(&v), sizeof(T));
  }
  static std::string string(const std::string &s) {
    return raw<uint64_t>(s.size()) + s;
  }
  void u32(const std::string &name, uint32_t v) {
    keys.push_back({name, 4, raw(v)});
  }
  void f32(const std::string &name, float v) {
    keys.push_back({name, 6, raw(v)});
  }
  void text(const std::string &name, const std::string &v) {
    keys.push_back({name, 8, string(v)});
  }
  Key *key(const std::string &name) {
    for (Key &k : keys)
      if (k.name == name)
        return &k;
    return nullptr;
  }
  Tensor *tensor(const std::string &name) {
    for (Tensor &t : tensors)
      if (t.name == name)
        return &t;
    return nullptr;
  }
  void erase(const std::string &name) {
    keys.erase(std::remove_if(keys.begin(), keys.end(),
                              [&](const Key &k) { return k.name == name; }),
               keys.end());
    tensors.erase(
        std::remove_if(tensors.begin(), tensors.end(),
                       [&](const Tensor &t) { return t.name == name; }),
        tensors.end());
  }

  std::string bytes() const {
    std::string out = raw(magic) + raw(version) +
                      raw<uint64_t>(tensorCount.value_or(tensors.size())) +
                      raw<uint64_t>(keyCount.value_or(keys.size()));
    for (const Key &k : keys)
      out += string(k.name) + raw(k.type) + k.value;
    std::string data;
    for (const Tensor &t : tensors) {
      uint64_t offset = t.offset.value_or(data.size());
      out += string(t.name) + raw<uint32_t>(t.dims.size());
      for (uint64_t d : t.dims)
        out += raw(d);
      out += raw(t.type) + raw(offset);
      if (data.size() < offset + t.data.size())
        data.resize(offset + t.data.size());
      data.replace(offset, t.data.size(), t.data);
      data.resize((data.size() + 31) / 32 * 32);
    }
    out.resize((out.size() + 31) / 32 * 32);
    return out + data;
  }
};

/// A valid model: dim 32, hidden 64, 1 layer, 2 heads on 1 KV head, vocab
/// 16, matrices in Q8_0 (the embedding in F32), a 16-token tokenizer.
Builder validModel() {
  Builder b;
  b.text("general.architecture", "llama");
  b.u32("llama.context_length", 64);
  b.u32("llama.embedding_length", 32);
  b.u32("llama.block_count", 1);
  b.u32("llama.feed_forward_length", 64);
  b.u32("llama.attention.head_count", 2);
  b.u32("llama.attention.head_count_kv", 1);
  b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.f32("llama.rope.freq_base", 10000.0f);
  b.u32("llama.rope.dimension_count", 16);
  b.text("tokenizer.ggml.model", "llama");
  const char *pieces[16] = {"<unk>",
                            "<s>",
                            "</s>",
                            "\xe2\x96\x81",
                            "a",
                            "b",
                            "c",
                            "d",
                            "e",
                            "\xe2\x96\x81"
                            "a",
                            "\xe2\x96\x81"
                            "b",
                            "\xe2\x96\x81"
                            "c",
                            "\xe2\x96\x81"
                            "d",
                            "\xe2\x96\x81"
                            "e",
                            "ab",
                            "<0x0A>"};
  std::string tokens = Builder::raw<uint32_t>(8) + Builder::raw<uint64_t>(16);
  std::string scores = Builder::raw<uint32_t>(6) + Builder::raw<uint64_t>(16);
  std::string types = Builder::raw<uint32_t>(5) + Builder::raw<uint64_t>(16);
  for (int i = 0; i < 16; ++i) {
    tokens += Builder::string(pieces[i]);
    scores += Builder::raw<float>(-float(i));
    types += Builder::raw<int32_t>(i == 0 ? 2 : i < 3 ? 3 : i == 15 ? 6 : 1);
  }
  b.keys.push_back({"tokenizer.ggml.tokens", 9, tokens});
  b.keys.push_back({"tokenizer.ggml.scores", 9, scores});
  b.keys.push_back({"tokenizer.ggml.token_type", 9, types});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  auto f32 = [&](uint64_t n) {
    std::string s;
    for (uint64_t i = 0; i < n; ++i)
      s += Builder::raw(uniform(rng) + (n <= 64 ? 1.0f : 0.0f));
    return s;
  };
  auto q8 = [&](uint64_t n) {
    std::string s;
    for (uint64_t i = 0; i < n; i += 32) {
      float x[32];
      for (float &v : x)
        v = uniform(rng);
      uint8_t block[34];
      kvrt::quantizeRow(KVRT_WEIGHT_Q8_0, x, block, 32);
      s.append(reinterpret_cast<const char *>(block), 34);
    }
    return s;
  };
  b.tensors.push_back({"token_embd.weight", {32, 16}, 0, f32(512), {}});
  b.tensors.push_back({"blk.0.attn_norm.weight", {32}, 0, f32(32), {}});
  b.tensors.push_back({"blk.0.attn_q.weight", {32, 32}, 8, q8(1024), {}});
  b.tensors.push_back({"blk.0.attn_k.weight", {32, 16}, 8, q8(512), {}});
  b.tensors.push_back({"blk.0.attn_v.weight", {32, 16}, 8, q8(512), {}});
  b.tensors.push_back({"blk.0.attn_output.weight", {32, 32}, 8, q8(1024), {}});
  b.tensors.push_back({"blk.0.ffn_norm.weight", {32}, 0, f32(32), {}});
  b.tensors.push_back({"blk.0.ffn_gate.weight", {32, 64}, 8, q8(2048), {}});
  b.tensors.push_back({"blk.0.ffn_down.weight", {64, 32}, 8, q8(2048), {}});
  b.tensors.push_back({"blk.0.ffn_up.weight", {32, 64}, 8, q8(2048), {}});
  b.tensors.push_back({"output_norm.weight", {32}, 0, f32(32), {}});
  return b;
}

/// What reading `bytes` says ("" for success).
std::string problemOf(const std::string &bytes) {
  kvrt_model *model = nullptr;
  kvrt_tokenizer *tokenizer = nullptr;
  std::string error =
      kvrt::gguf::readBuffer(reinterpret_cast<const uint8_t *>(bytes.data()),
                             bytes.size(), &model, &tokenizer);
  EXPECT_EQ(error.empty(), model != nullptr) << error;
  kvrt_model_release(model);
  kvrt_tokenizer_release(tokenizer);
  return error;
}

TEST(GGUFTest, TheCorpusBaseIsValid) {
  std::string bytes = validModel().bytes();
  kvrt_model *model = nullptr;
  kvrt_tokenizer *tokenizer = nullptr;
  ASSERT_EQ(
      kvrt::gguf::readBuffer(reinterpret_cast<const uint8_t *>(bytes.data()),
                             bytes.size(), &model, &tokenizer),
      "");
  ModelPtr owned(model);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(kvrt_tokenizer_vocab_size(tokenizer), 16);
  std::vector<int32_t> ids;
  ASSERT_EQ(kvir::encode(tokenizer, "d e", true, false, ids), KVRT_OK);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 12, 13}));
  std::string text;
  ASSERT_EQ(kvir::decode(tokenizer, {1, 12, 13, 15}, text), KVRT_OK);
  EXPECT_EQ(text, "d e\n");
  kvrt_tokenizer_release(tokenizer);
  EXPECT_EQ(model->config.dim, 32);
  EXPECT_EQ(model->config.n_kv_heads, 1);
  EXPECT_EQ(model->config.shared_classifier, 1);
  // The C entry point on the same bytes.
  kvrt_model *again = nullptr;
  EXPECT_EQ(kvrt_model_load_gguf_buffer(bytes.data(), bytes.size(), &again),
            KVRT_OK)
      << kvrt_last_error();
  kvrt_model_release(again);
}

struct Case {
  const char *name;
  std::function<void(Builder &)> edit;
  const char *message;
};

TEST(GGUFTest, MalformedFilesAreNamed) {
  uint64_t huge = uint64_t(1) << 63;
  std::vector<Case> cases = {
      {"wrong magic", [](Builder &b) { b.magic = 0x46554746; },
       "bad magic: not a GGUF file"},
      {"wrong version", [](Builder &b) { b.version = 2; },
       "unsupported GGUF version 2 (only version 3 is read)"},
      {"tensor count beyond the file",
       [](Builder &b) { b.tensorCount = 1u << 30; },
       "tensor count 1073741824 exceeds what the"},
      {"metadata count beyond the file", [&](Builder &b) { b.keyCount = huge; },
       "metadata count 9223372036854775808 exceeds what the"},
      {"string length of 2^63",
       [&](Builder &b) {
         b.key("general.architecture")->value =
             Builder::raw<uint64_t>(huge) + "llama";
       },
       "string length 9223372036854775808 of metadata "
       "'general.architecture' at byte"},
      {"array count beyond the file",
       [&](Builder &b) {
         std::string &v = b.key("tokenizer.ggml.scores")->value;
         v.replace(4, 8, Builder::raw<uint64_t>(huge / 2));
       },
       "metadata 'tokenizer.ggml.scores' claims 4611686018427387904 "
       "elements of type f32"},
      {"overlapping tensors",
       [](Builder &b) { b.tensor("blk.0.ffn_norm.weight")->offset = 64; },
       "tensors 'token_embd.weight' and 'blk.0.ffn_norm.weight' overlap"},
      {"unaligned tensor",
       [](Builder &b) { b.tensor("output_norm.weight")->offset = 20004; },
       "tensor 'output_norm.weight' offset 20004 is not aligned to "
       "general.alignment = 32"},
      {"tensor beyond the file",
       [](Builder &b) { b.tensor("output_norm.weight")->dims = {1 << 20}; },
       "tensor 'output_norm.weight' (4194304 bytes at data offset"},
      {"more layers than tensors",
       [](Builder &b) {
         b.key("llama.block_count")->value = Builder::raw<uint32_t>(1 << 30);
       },
       "missing tensor 'blk.1.attn_norm.weight'"},
      {"missing key", [](Builder &b) { b.erase("llama.block_count"); },
       "missing key 'llama.block_count'"},
      {"missing architecture",
       [](Builder &b) { b.erase("general.architecture"); },
       "missing key 'general.architecture'"},
      {"other architecture",
       [](Builder &b) {
         b.key("general.architecture")->value = Builder::string("gpt2");
       },
       "architecture 'gpt2' is not supported (llama and qwen2 are)"},
      {"key of the wrong type",
       [](Builder &b) {
         Builder::Key *k = b.key("llama.embedding_length");
         k->type = 8;
         k->value = Builder::string("32");
       },
       "key 'llama.embedding_length' has type string, expected an integer "
       "(u32 or u64)"},
      {"u64 key beyond int32",
       [](Builder &b) {
         Builder::Key *k = b.key("llama.context_length");
         k->type = 10;
         k->value = Builder::raw<uint64_t>(uint64_t(1) << 40);
       },
       "key 'llama.context_length' = 1099511627776 is out of range"},
      {"unknown value type",
       [](Builder &b) { b.key("llama.block_count")->type = 13; },
       "metadata 'llama.block_count' has unknown value type 13"},
      {"duplicate key", [](Builder &b) { b.u32("llama.block_count", 1); },
       "duplicate metadata key 'llama.block_count'"},
      {"alignment not a power of two",
       [](Builder &b) { b.u32("general.alignment", 24); },
       "general.alignment = 24 is not a power of two"},
      {"wrong shape",
       [](Builder &b) {
         b.tensor("blk.0.attn_q.weight")->dims = {64, 16};
       },
       "tensor 'blk.0.attn_q.weight' has shape [64, 16], expected [32, 32]"},
      {"too many dimensions",
       [](Builder &b) {
         b.tensor("blk.0.attn_norm.weight")->dims = {2, 2, 2, 2, 2};
       },
       "tensor 'blk.0.attn_norm.weight' has 5 dimensions (1 to 4 are "
       "allowed)"},
      {"element count overflow",
       [](Builder &b) {
         b.tensor("blk.0.attn_norm.weight")->dims = {1ull << 32, 1ull << 32};
       },
       "tensor 'blk.0.attn_norm.weight' has more than 2^64 elements"},
      {"unknown tensor type",
       [](Builder &b) { b.tensor("blk.0.attn_q.weight")->type = 77; },
       "tensor 'blk.0.attn_q.weight' has unknown tensor type 77"},
      {"unsupported tensor type",
       [](Builder &b) { b.tensor("blk.0.attn_q.weight")->type = 3; },
       "tensor 'blk.0.attn_q.weight' has type Q4_1 (3), which is not "
       "supported (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K are)"},
      {"Q8_0 rows not whole blocks",
       [](Builder &b) {
         Builder::Tensor *t = b.tensor("output_norm.weight");
         t->type = 8;
         t->dims = {16};
       },
       "tensor 'output_norm.weight' of type Q8_0 and shape [16] has rows of "
       "16 elements, not a multiple of the 32 of a Q8_0 block"},
      {"NaN scale",
       [](Builder &b) {
         std::string &d = b.tensor("blk.0.ffn_up.weight")->data;
         d.replace(34 * 5, 2, Builder::raw<uint16_t>(0x7e00));
       },
       "tensor 'blk.0.ffn_up.weight' Q8_0 block 5 has a non-finite scale "
       "(nan)"},
      {"NaN weight",
       [](Builder &b) {
         std::string &d = b.tensor("token_embd.weight")->data;
         d.replace(4 * 7, 4,
                   Builder::raw(std::numeric_limits<float>::quiet_NaN()));
       },
       "tensor 'token_embd.weight' element 7 is nan (weights must be "
       "finite)"},
      {"missing tensor", [](Builder &b) { b.erase("blk.0.ffn_down.weight"); },
       "missing tensor 'blk.0.ffn_down.weight'"},
      {"unexpected tensor",
       [](Builder &b) {
         b.tensors.push_back(
             {"blk.1.attn_q.weight", {32}, 0, std::string(128, '\0'), {}});
       },
       "unexpected tensor 'blk.1.attn_q.weight' for the llama architecture"},
      {"duplicate tensor",
       [](Builder &b) { b.tensors.push_back(b.tensors[1]); },
       "duplicate tensor name 'blk.0.attn_norm.weight'"},
      {"invalid configuration",
       [](Builder &b) {
         b.key("llama.attention.head_count")->value = Builder::raw<uint32_t>(3);
       },
       "invalid configuration: dim 32 is not divisible by n_heads 3"},
      {"odd rotary dimensions",
       [](Builder &b) {
         b.key("llama.rope.dimension_count")->value = Builder::raw<uint32_t>(7);
       },
       "invalid configuration: rope_dim = 7 must be 0 (the whole head) or "
       "even"},
      {"unsupported RoPE scaling",
       [](Builder &b) { b.text("llama.rope.scaling.type", "yarn"); },
       "RoPE scaling 'yarn' is not supported (none and linear are)"},
      {"rope_freqs of the wrong length",
       [](Builder &b) {
         b.tensors.push_back(
             {"rope_freqs.weight", {3}, 0, std::string(12, '\0'), {}});
       },
       "tensor 'rope_freqs.weight' has shape [3], expected [8] (one factor "
       "per rotary pair)"},
      {"tokenizer of another size",
       [](Builder &b) {
         std::string &v = b.key("tokenizer.ggml.tokens")->value;
         v.replace(4, 8, Builder::raw<uint64_t>(15));
         v.resize(v.rfind(Builder::string("<0x0A>")));
       },
       "tokenizer.ggml.tokens has 15 tokens, the model's vocabulary 16"},
      {"tokenizer of another kind",
       [](Builder &b) {
         b.key("tokenizer.ggml.model")->value = Builder::string("bert");
       },
       "tokenizer model 'bert' is not supported (llama, SentencePiece BPE, "
       "and gpt2, byte-level BPE, are)"},
      {"gpt2 tokenizer without merges",
       [](Builder &b) {
         b.key("tokenizer.ggml.model")->value = Builder::string("gpt2");
       },
       "missing key 'tokenizer.ggml.merges' (a gpt2 tokenizer needs its "
       "merges)"},
      {"byte token not spelled <0xHH>",
       [](Builder &b) {
         std::string &v = b.key("tokenizer.ggml.token_type")->value;
         v.replace(12 + 4 * 4, 4, Builder::raw<int32_t>(6));
       },
       "token 4 has the byte type but is not spelled <0xHH>"},
      {"special id outside the vocabulary",
       [](Builder &b) { b.u32("tokenizer.ggml.eos_token_id", 16); },
       "key 'tokenizer.ggml.eos_token_id' = 16 is outside the 16 tokens"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    Builder b = validModel();
    c.edit(b);
    std::string problem = problemOf(b.bytes());
    EXPECT_NE(problem.find(c.message), std::string::npos)
        << "expected: " << c.message << "\n     got: " << problem;
  }
}

/// A valid model with every block format: dim 256, hidden 256, 1 layer, 2
/// heads on 1 KV head, vocab 16; the embedding Q4_K, attn_q Q4_K, attn_k
/// Q5_K, attn_v Q6_K, attn_output Q4_0, ffn_gate Q8_0, ffn_down Q6_K,
/// ffn_up F16, the norms F32 and BF16.
Builder validQuantModel() {
  Builder b;
  b.text("general.architecture", "llama");
  b.u32("llama.context_length", 64);
  b.u32("llama.embedding_length", 256);
  b.u32("llama.block_count", 1);
  b.u32("llama.feed_forward_length", 256);
  b.u32("llama.attention.head_count", 2);
  b.u32("llama.attention.head_count_kv", 1);
  b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  auto data = [&](kvrt_weight_format format, uint64_t rows, uint64_t cols) {
    std::vector<float> x(rows * cols);
    for (float &v : x)
      v = uniform(rng) + (rows == 1 ? 1.0f : 0.0f);
    int64_t rowBytes = kvrt::weightRowBytes(format, int64_t(cols));
    std::string s(size_t(rows * rowBytes), '\0');
    for (uint64_t r = 0; r < rows; ++r)
      kvrt::quantizeRow(format, &x[r * cols], &s[r * rowBytes], int64_t(cols));
    return s;
  };
  auto add = [&](const char *name, kvrt_weight_format format, uint64_t rows,
                 uint64_t cols) {
    std::vector<uint64_t> dims = {cols};
    if (rows > 1)
      dims.push_back(rows);
    b.tensors.push_back(
        {name, dims, kvrt::ggmlTypeOf(format), data(format, rows, cols), {}});
  };
  add("token_embd.weight", KVRT_WEIGHT_Q4_K, 16, 256);
  add("blk.0.attn_norm.weight", KVRT_WEIGHT_F32, 1, 256);
  add("blk.0.attn_q.weight", KVRT_WEIGHT_Q4_K, 256, 256);
  add("blk.0.attn_k.weight", KVRT_WEIGHT_Q5_K, 128, 256);
  add("blk.0.attn_v.weight", KVRT_WEIGHT_Q6_K, 128, 256);
  add("blk.0.attn_output.weight", KVRT_WEIGHT_Q4_0, 256, 256);
  add("blk.0.ffn_norm.weight", KVRT_WEIGHT_BF16, 1, 256);
  add("blk.0.ffn_gate.weight", KVRT_WEIGHT_Q8_0, 256, 256);
  add("blk.0.ffn_down.weight", KVRT_WEIGHT_Q6_K, 256, 256);
  add("blk.0.ffn_up.weight", KVRT_WEIGHT_F16, 256, 256);
  add("output_norm.weight", KVRT_WEIGHT_F32, 1, 256);
  return b;
}

TEST(GGUFTest, BlockFormatsStayInTheFile) {
  std::string bytes = validQuantModel().bytes();
  ModelPtr model(nullptr);
  {
    kvrt_model *raw = nullptr;
    ASSERT_EQ(kvrt_model_load_gguf_buffer(bytes.data(), bytes.size(), &raw),
              KVRT_OK)
        << kvrt_last_error();
    model.reset(raw);
  }
  kvrt_model_weights w;
  ASSERT_EQ(kvrt_model_get_weights(model.get(), &w), KVRT_OK);
  // Matrices keep their formats and bytes; the BF16 norm is converted to
  // f32 (the forward reads norms as f32).
  struct Expect {
    const kvrt_weight *weight;
    kvrt_weight_format format;
  } expects[] = {{&w.token_embedding, KVRT_WEIGHT_Q4_K},
                 {&w.wq, KVRT_WEIGHT_Q4_K},
                 {&w.wk, KVRT_WEIGHT_Q5_K},
                 {&w.wv, KVRT_WEIGHT_Q6_K},
                 {&w.wo, KVRT_WEIGHT_Q4_0},
                 {&w.rms_ffn, KVRT_WEIGHT_F32},
                 {&w.w1, KVRT_WEIGHT_Q8_0},
                 {&w.w2, KVRT_WEIGHT_Q6_K},
                 {&w.w3, KVRT_WEIGHT_F16},
                 {&w.wcls, KVRT_WEIGHT_Q4_K}};
  for (const Expect &e : expects) {
    ASSERT_EQ(e.weight->n_slices, 1);
    EXPECT_EQ(e.weight->slices[0].format, e.format)
        << kvrt::weightFormatName(e.format);
    EXPECT_EQ(e.weight->slices[0].bytes,
              e.weight->rows * kvrt::weightRowBytes(e.format, e.weight->cols));
  }
  Builder b = validQuantModel();
  EXPECT_EQ(std::memcmp(w.wk.slices[0].data,
                        b.tensor("blk.0.attn_k.weight")->data.data(),
                        size_t(w.wk.slices[0].bytes)),
            0);
  // The oracle's f32 view is the exact dequantisation.
  std::vector<float> f32 = weightsOf(model.get());
  std::vector<float> row(256);
  const std::string &v = b.tensor("blk.0.attn_v.weight")->data;
  kvrt::dequantizeRow(KVRT_WEIGHT_Q6_K, v.data() + 5 * 210, row.data(), 256);
  // token_embd 16x256, attn_norm 256, attn_q 256x256, attn_k 128x256, then
  // attn_v: its row 5.
  size_t at = 16 * 256 + 256 + 256 * 256 + 128 * 256 + 5 * 256;
  EXPECT_EQ(std::memcmp(&f32[at], row.data(), 256 * 4), 0);
  // Tied: the classifier is the embedding's slices.
  EXPECT_EQ(w.wcls.slices, w.token_embedding.slices);
}

TEST(GGUFTest, MalformedQuantisedTensorsAreNamed) {
  // Where a block's f16 scales are: d (and dmin at 2) of Q4_0, Q8_0, Q4_K,
  // Q5_K at 0, d of Q6_K at 208.
  auto scale = [](const char *tensor, uint64_t blockBytes, uint64_t block,
                  uint64_t at, uint16_t bits) {
    return [=](Builder &b) {
      b.tensor(tensor)->data.replace(block * blockBytes + at, 2,
                                     Builder::raw<uint16_t>(bits));
    };
  };
  std::vector<Case> cases = {
      {"Q4_K rows not whole blocks",
       [](Builder &b) {
         Builder::Tensor *t = b.tensor("output_norm.weight");
         t->type = 12;
         t->dims = {128};
       },
       "tensor 'output_norm.weight' of type Q4_K and shape [128] has rows of "
       "128 elements, not a multiple of the 256 of a Q4_K block"},
      {"Q5_K rows not whole blocks",
       [](Builder &b) {
         Builder::Tensor *t = b.tensor("blk.0.attn_k.weight");
         t->dims = {128, 256};
       },
       "tensor 'blk.0.attn_k.weight' of type Q5_K and shape [128, 256] has "
       "rows of 128 elements, not a multiple of the 256 of a Q5_K block"},
      {"Q6_K rows not whole blocks",
       [](Builder &b) {
         b.tensor("blk.0.attn_v.weight")->dims = {320, 100};
       },
       "of type Q6_K and shape [320, 100] has rows of 320 elements, not a "
       "multiple of the 256 of a Q6_K block"},
      {"Q4_0 rows not whole blocks",
       [](Builder &b) {
         b.tensor("blk.0.attn_output.weight")->dims = {48, 8};
       },
       "has rows of 48 elements, not a multiple of the 32 of a Q4_0 block"},
      {"more blocks than the shape the config implies",
       [](Builder &b) {
         Builder::Tensor *t = b.tensor("blk.0.attn_q.weight");
         t->dims = {512, 256};
         t->data += t->data;
       },
       "tensor 'blk.0.attn_q.weight' has shape [512, 256], expected [256, "
       "256]"},
      {"blocks running into the next tensor",
       [](Builder &b) {
         // attn_v placed 32 bytes early: attn_k's last block (tensors are
         // packed at 32-byte alignment: 16 x 144, 1024, 256 x 144 and
         // 128 x 176 bytes) lies under its first.
         b.tensor("blk.0.attn_v.weight")->offset =
             16 * 144 + 1024 + 256 * 144 + 128 * 176 - 32;
       },
       "tensors 'blk.0.attn_k.weight' and 'blk.0.attn_v.weight' overlap in "
       "the data section"},
      {"truncated last block",
       [](Builder &b) {
         // The last tensor moved to the end: its blocks cut by the file's
         // end (the bytes written are one block short).
         Builder::Tensor *t = b.tensor("blk.0.ffn_down.weight");
         t->data.resize(t->data.size() - 210);
         std::rotate(b.tensors.begin(),
                     b.tensors.begin() + (t - b.tensors.data()) + 1,
                     b.tensors.end());
       },
       "tensor 'blk.0.ffn_down.weight' (53760 bytes at data offset"},
      {"Q4_K NaN scale", scale("blk.0.attn_q.weight", 144, 3, 0, 0x7e00),
       "tensor 'blk.0.attn_q.weight' Q4_K block 3 has a non-finite scale "
       "(nan)"},
      {"Q4_K infinite min scale", scale("token_embd.weight", 144, 9, 2, 0x7c00),
       "tensor 'token_embd.weight' Q4_K block 9 has a non-finite min scale "
       "(inf)"},
      {"Q5_K NaN min scale", scale("blk.0.attn_k.weight", 176, 100, 2, 0xfe00),
       "tensor 'blk.0.attn_k.weight' Q5_K block 100 has a non-finite min "
       "scale (-nan)"},
      {"Q6_K infinite scale",
       scale("blk.0.ffn_down.weight", 210, 7, 208, 0xfc00),
       "tensor 'blk.0.ffn_down.weight' Q6_K block 7 has a non-finite scale "
       "(-inf)"},
      {"Q4_0 NaN scale", scale("blk.0.attn_output.weight", 18, 0, 0, 0x7e01),
       "tensor 'blk.0.attn_output.weight' Q4_0 block 0 has a non-finite "
       "scale (nan)"},
      {"Q8_0 infinite scale",
       scale("blk.0.ffn_gate.weight", 34, 2047, 0, 0x7c00),
       "tensor 'blk.0.ffn_gate.weight' Q8_0 block 2047 has a non-finite "
       "scale (inf)"},
      {"F16 infinite element", scale("blk.0.ffn_up.weight", 2, 12, 0, 0x7c00),
       "tensor 'blk.0.ffn_up.weight' element 12 is inf (weights must be "
       "finite)"},
      {"BF16 NaN norm", scale("blk.0.ffn_norm.weight", 2, 3, 0, 0x7fc0),
       "tensor 'blk.0.ffn_norm.weight' element 3 is nan (weights must be "
       "finite)"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    Builder b = validQuantModel();
    c.edit(b);
    std::string problem = problemOf(b.bytes());
    EXPECT_NE(problem.find(c.message), std::string::npos)
        << "expected: " << c.message << "\n     got: " << problem;
  }
}

TEST(GGUFTest, TensorNameLengthOf2To63) {
  // The first tensor's name length field, found after the metadata.
  Builder b = validModel();
  std::string bytes = b.bytes();
  std::string name = Builder::string("token_embd.weight");
  size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 8, Builder::raw<uint64_t>(uint64_t(1) << 63));
  EXPECT_NE(problemOf(bytes).find("string length 9223372036854775808 of "
                                  "tensor 0 name"),
            std::string::npos)
      << problemOf(bytes);
}

TEST(GGUFTest, TruncatedFilesAreNamedAtEveryLength) {
  std::string bytes = validModel().bytes();
  EXPECT_NE(problemOf(bytes.substr(0, 3)).find("truncated file: 3 bytes"),
            std::string::npos);
  EXPECT_NE(problemOf(bytes.substr(0, 6)).find("truncated file: version"),
            std::string::npos);
  EXPECT_NE(problemOf(bytes.substr(0, bytes.size() - 1))
                .find("extends beyond the end of the file"),
            std::string::npos);
  // Every prefix is an error with a message, never a crash or a model.
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string problem = problemOf(bytes.substr(0, n));
    ASSERT_FALSE(problem.empty()) << "a prefix of " << n << " bytes";
  }
}

TEST(GGUFTest, ByteFlipsNeverCrash) {
  std::string base = validModel().bytes();
  std::mt19937 rng(7);
  size_t failed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = base;
    int flips = 1 + round % 4;
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % bytes.size();
      // Most flips in the header, metadata and tensor infos.
      if (round % 2 == 0)
        at %= std::min<size_t>(bytes.size(), 2048);
      bytes[at] = static_cast<char>(rng());
    }
    failed += !problemOf(bytes).empty();
  }
  EXPECT_GT(failed, 0u);
}

TEST(GGUFTest, FileMessagesNameTheFile) {
  Builder b = validModel();
  b.version = 1;
  std::string bytes = b.bytes();
  std::string path = scratch("bad-version.gguf");
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_load(path.c_str(), &model), KVRT_ERR_BAD_MODEL);
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "bad GGUF file '" + path +
                "': unsupported GGUF version 1 (only version 3 is read)");
  kvrt_tokenizer *tokenizer = nullptr;
  EXPECT_EQ(kvrt_tokenizer_load(path.c_str(), &tokenizer), KVRT_ERR_BAD_MODEL);
}

// --no-mmap's load (KVRT_LOAD_READ) reads the file into the model's own
// memory: the same tensors, byte for byte, as the mapped load; unknown flags
// are refused, and a missing file is named.
TEST(GGUFTest, ReadLoadKeepsTheMappedBytes) {
  std::string bytes = validQuantModel().bytes();
  std::string path = scratch("read-load.gguf");
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  kvrt_model *mappedRaw = nullptr, *readRaw = nullptr;
  ASSERT_EQ(kvrt_model_load_ex(path.c_str(), KVRT_LOAD_MAP, &mappedRaw),
            KVRT_OK)
      << kvrt_last_error();
  ModelPtr mapped(mappedRaw);
  ASSERT_EQ(kvrt_model_load_ex(path.c_str(), KVRT_LOAD_READ, &readRaw), KVRT_OK)
      << kvrt_last_error();
  ModelPtr read(readRaw);
  kvrt_model_weights a, b;
  ASSERT_EQ(kvrt_model_get_weights(mapped.get(), &a), KVRT_OK);
  ASSERT_EQ(kvrt_model_get_weights(read.get(), &b), KVRT_OK);
  for (auto member :
       {&kvrt_model_weights::token_embedding, &kvrt_model_weights::wq,
        &kvrt_model_weights::wk, &kvrt_model_weights::wv,
        &kvrt_model_weights::w2, &kvrt_model_weights::w3}) {
    const kvrt_weight_slice &x = (a.*member).slices[0],
                            &y = (b.*member).slices[0];
    ASSERT_EQ(x.format, y.format);
    ASSERT_EQ(x.bytes, y.bytes);
    EXPECT_NE(x.data, y.data);
    EXPECT_EQ(std::memcmp(x.data, y.data, size_t(x.bytes)), 0);
  }
  EXPECT_EQ(weightsOf(mapped.get()), weightsOf(read.get()));

  kvrt_model *none = nullptr;
  EXPECT_EQ(kvrt_model_load_ex(path.c_str(), 10, &none),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "kvrt_model_load_ex: unknown flags 0x8");
  EXPECT_EQ(kvrt_model_load_ex(path.c_str(),
                               KVRT_LOAD_NO_REPACK | KVRT_LOAD_REPACK, &none),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "kvrt_model_load_ex: KVRT_LOAD_NO_REPACK and KVRT_LOAD_REPACK "
            "together: give one of them");
  std::string missing = scratch("no-such-file.gguf");
  EXPECT_EQ(kvrt_model_load_ex(missing.c_str(), KVRT_LOAD_READ, &none),
            KVRT_ERR_IO);
  EXPECT_NE(std::string(kvrt_last_error()).find(missing), std::string::npos)
      << kvrt_last_error();
}

} // namespace
