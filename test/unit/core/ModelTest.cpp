//===- ModelTest.cpp - Model loading, validation and saving -----*- C++ -*-===//

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelTensors.h"
#include "test/unit/TestSupport.h"

#include <cmath>

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sys/stat.h>

using namespace kvir::test;

namespace {

/// A tiny valid config: dim 8, 2 heads of 4, 1 KV head, vocab 16.
kvrt_model_config tinyConfig(bool shared) {
  kvrt_model_config c = makeConfig(8, 16, 2, 2, 1, 16, 4);
  c.shared_classifier = shared;
  return c;
}

std::vector<char> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeBytes(const std::string &path, const std::vector<char> &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
}

/// Fixture: a valid tiny checkpoint written by kvrt_model_save, which each
/// test corrupts in one way.
class MalformedModelTest : public ::testing::Test {
protected:
  void SetUp() override {
    ModelPtr model = syntheticModel(tinyConfig(true), 7);
    ASSERT_EQ(kvrt_model_save(model.get(), path.c_str()), KVRT_OK)
        << kvrt_last_error();
    bytes = readBytes(path);
  }

  void setHeader(int index, int32_t value) {
    std::memcpy(bytes.data() + 4 * index, &value, 4);
  }

  void setFloat(size_t index, float value) {
    std::memcpy(bytes.data() + 28 + 4 * index, &value, 4);
  }

  /// Writes the corrupted bytes and expects a load failure whose message
  /// contains every one of `needles`.
  void expectRejected(kvrt_status status,
                      std::initializer_list<const char *> needles) {
    writeBytes(path, bytes);
    kvrt_model *model = nullptr;
    EXPECT_EQ(kvrt_model_load(path.c_str(), &model), status);
    EXPECT_EQ(model, nullptr);
    std::string message = kvrt_last_error();
    for (const char *needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message '" << message << "' lacks '" << needle << "'";
  }

  TempDir dir;
  std::string path = dir.file("tiny.bin");
  std::vector<char> bytes;
};

TEST(ModelTest, LoadsStories260K) {
  KVIR_REQUIRE_TEST_MODEL();
  ModelPtr model = loadModel(testModelPath());
  ASSERT_TRUE(model);
  kvrt_model_config c;
  ASSERT_EQ(kvrt_model_get_config(model.get(), &c), KVRT_OK);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_EQ(c.shared_classifier, 1);
  EXPECT_EQ(c.rope_layout, KVRT_ROPE_INTERLEAVED);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_eps, 1e-5);
  kvrt_model_weights w;
  ASSERT_EQ(kvrt_model_get_weights(model.get(), &w), KVRT_OK);
  EXPECT_EQ(w.wcls.slices, w.token_embedding.slices);
  // rms_final is the last tensor before the legacy tables: 7 int32 header,
  // then everything up to rms_final.
  std::vector<char> file = readBytes(testModelPath());
  const float *embedding = kvrt::f32Data(w.token_embedding);
  const float *rmsFinal = kvrt::f32Data(w.rms_final);
  size_t offset = 28 + 4 * (rmsFinal - embedding);
  float first;
  std::memcpy(&first, file.data() + offset, 4);
  EXPECT_EQ(first, rmsFinal[0]);
  ASSERT_EQ(w.rms_final.n_slices, 1);
  EXPECT_EQ(w.rms_final.slices[0].format, KVRT_WEIGHT_F32);
  EXPECT_EQ(w.rms_final.rows, 1);
  EXPECT_EQ(w.rms_final.cols, 64);
  EXPECT_EQ(w.rms_final.slices[0].bytes, 64 * 4);
  // A per-layer tensor: one slice per layer, each kv_dim x dim, back to back
  // in the file's order.
  ASSERT_EQ(w.wk.n_slices, 5);
  EXPECT_EQ(w.wk.rows, 32);
  EXPECT_EQ(w.wk.cols, 64);
  for (int l = 0; l < 5; ++l) {
    EXPECT_EQ(w.wk.slices[l].bytes, 32 * 64 * 4);
    EXPECT_EQ(kvrt::f32Data(w.wk, l), kvrt::f32Data(w.wk) + l * 32 * 64);
  }
}

TEST(ModelTest, OneDeclarationDescribesTheWeights) {
  // ModelTensors.def generates both the C struct and the table: the same
  // fields in the same order.
  EXPECT_EQ(sizeof(kvrt_model_weights),
            kvrt::kNumTensors * sizeof(kvrt_weight));
  kvrt_model_weights w{};
  for (size_t i = 0; i < kvrt::kNumTensors; ++i) {
    EXPECT_EQ(&(w.*kvrt::kTensors[i].member),
              reinterpret_cast<kvrt_weight *>(&w) + i);
    EXPECT_EQ(size_t(kvrt::kTensors[i].id), i);
  }
  // A config's tensors, sized from its symbols, in llama2.c order; the
  // classifier only when it is separate.
  for (bool shared : {true, false}) {
    std::vector<kvrt::TensorSpec> specs =
        *kvrt::tensorSpecs(tinyConfig(shared));
    std::vector<std::string> names;
    for (const kvrt::TensorSpec &spec : specs)
      names.push_back(spec.name);
    std::vector<std::string> expected = {
        "token_embedding", "rms_att", "wq", "wk", "wv",       "wo",
        "rms_ffn",         "w1",      "w2", "w3", "rms_final"};
    if (!shared)
      expected.push_back("wcls");
    EXPECT_EQ(names, expected);
    // dim 8, hidden 16, 2 layers, 2 heads of 4, 1 kv head, vocab 16.
    EXPECT_EQ(specs[3].count, 2u * 4 * 8); // wk: layers x kv_dim x dim
    EXPECT_EQ(specs[3].rows, 2u * 4);
    EXPECT_EQ(specs[8].fanIn, 16u); // w2 reads the hidden vector
    EXPECT_EQ(specs[0].count, 16u * 8);
  }
}

TEST(ModelTest, SyntheticIsSplitMix64) {
  // Vigna's splitmix64 from seed 1234567 starts 6457827717110365317 and
  // 3203168211198807973; weights take the top 24 bits k as (k - 2^23)/2^23.
  ModelPtr model = syntheticModel(tinyConfig(true), 1234567);
  kvrt_model_weights w;
  ASSERT_EQ(kvrt_model_get_weights(model.get(), &w), KVRT_OK);
  for (auto [index, draw] :
       {std::pair<int, uint64_t>{0, 6457827717110365317ULL},
        {1, 3203168211198807973ULL}}) {
    double expected = (double(draw >> 40) - 8388608.0) / 8388608.0;
    EXPECT_EQ(kvrt::f32Data(w.token_embedding)[index], expected);
  }
}

TEST(ModelTest, SyntheticIsDeterministicAndScaled) {
  kvrt_model_config c = tinyConfig(false);
  ModelPtr a = syntheticModel(c, 42), b = syntheticModel(c, 42),
           other = syntheticModel(c, 43);
  kvrt_model_weights wa, wb, wo;
  kvrt_model_get_weights(a.get(), &wa);
  kvrt_model_get_weights(b.get(), &wb);
  kvrt_model_get_weights(other.get(), &wo);
  size_t wqCount = size_t(c.n_layers) * c.dim * c.dim;
  const float *wq = kvrt::f32Data(wa.wq);
  EXPECT_EQ(std::memcmp(wq, kvrt::f32Data(wb.wq), wqCount * 4), 0);
  EXPECT_NE(std::memcmp(wq, kvrt::f32Data(wo.wq), wqCount * 4), 0);
  EXPECT_NE(wa.wcls.slices, wa.token_embedding.slices);
  double bound = 1.0 / std::sqrt(double(c.dim)), largest = 0;
  for (size_t i = 0; i < wqCount; ++i)
    largest = std::max(largest, std::fabs(double(wq[i])));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8 * bound);
  const float *rmsFinal = kvrt::f32Data(wa.rms_final);
  for (int i = 0; i < c.dim; ++i) {
    EXPECT_GE(rmsFinal[i], 0.75f);
    EXPECT_LT(rmsFinal[i], 1.25f);
  }
}

TEST(ModelTest, SaveLoadRoundTrip) {
  TempDir dir;
  for (bool shared : {true, false}) {
    kvrt_model_config c = tinyConfig(shared);
    ModelPtr model = syntheticModel(c, 5);
    std::string path = dir.file(shared ? "shared.bin" : "wcls.bin");
    ASSERT_EQ(kvrt_model_save(model.get(), path.c_str()), KVRT_OK)
        << kvrt_last_error();
    ModelPtr loaded = loadModel(path);
    ASSERT_TRUE(loaded);
    kvrt_model_config lc;
    kvrt_model_get_config(loaded.get(), &lc);
    EXPECT_EQ(std::memcmp(&lc, &c, sizeof c), 0);
    int32_t vocabField;
    std::vector<char> file = readBytes(path);
    std::memcpy(&vocabField, file.data() + 20, 4);
    EXPECT_EQ(vocabField, shared ? 16 : -16);
    kvrt_model_weights w0, w1;
    kvrt_model_get_weights(model.get(), &w0);
    kvrt_model_get_weights(loaded.get(), &w1);
    EXPECT_EQ(std::memcmp(kvrt::f32Data(w0.token_embedding),
                          kvrt::f32Data(w1.token_embedding), 16 * 8 * 4),
              0);
    for (int l = 0; l < 2; ++l)
      EXPECT_EQ(std::memcmp(kvrt::f32Data(w0.w2, l), kvrt::f32Data(w1.w2, l),
                            8 * 16 * 4),
                0);
    EXPECT_EQ(
        std::memcmp(kvrt::f32Data(w0.wcls), kvrt::f32Data(w1.wcls), 16 * 8 * 4),
        0);
    EXPECT_EQ(w1.wcls.slices == w1.token_embedding.slices, shared);
  }
}

TEST(ModelTest, SaveRejectsWhatTheFormatCannotHold) {
  TempDir dir;
  kvrt_model_config c = tinyConfig(true);
  c.rope_layout = KVRT_ROPE_HALF;
  ModelPtr model = syntheticModel(c, 1);
  EXPECT_EQ(kvrt_model_save(model.get(), dir.file("half.bin").c_str()),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvrt_last_error()).find("interleaved"),
            std::string::npos);
  // Q/K/V biases: the header has no flag for them.
  c = tinyConfig(true);
  c.qkv_bias = 1;
  model = syntheticModel(c, 1);
  std::string path = dir.file("bias.bin");
  EXPECT_EQ(kvrt_model_save(model.get(), path.c_str()),
            KVRT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot save to '" + path +
                "': the llama2.c format has no tensor bq");
}

TEST(ModelTest, QkvBiasTensors) {
  // qkv_bias adds bq [dim], bk and bv [kv_dim] per layer after wv, drawn in
  // [-0.5, 0.5); without it they hold no data.
  kvrt_model_config c = tinyConfig(true);
  c.qkv_bias = 1;
  std::vector<kvrt::TensorSpec> specs = *kvrt::tensorSpecs(c);
  ASSERT_EQ(specs.size(), 14u);
  EXPECT_STREQ(specs[5].name, "bq");
  EXPECT_EQ(specs[5].count, 2u * 8);
  EXPECT_STREQ(specs[6].name, "bk");
  EXPECT_EQ(specs[6].count, 2u * 4);
  EXPECT_STREQ(specs[7].name, "bv");
  ModelPtr model = syntheticModel(c, 3);
  kvrt_model_weights w;
  ASSERT_EQ(kvrt_model_get_weights(model.get(), &w), KVRT_OK);
  EXPECT_EQ(w.bk.n_slices, 2);
  EXPECT_EQ(w.bk.rows, 1);
  EXPECT_EQ(w.bk.cols, 4);
  for (int64_t l = 0; l < 2; ++l) {
    const float *bq = kvrt::f32Data(w.bq, l);
    for (int i = 0; i < 8; ++i) {
      EXPECT_GE(bq[i], -0.5f);
      EXPECT_LT(bq[i], 0.5f);
    }
  }
  c.qkv_bias = 0;
  ModelPtr plain = syntheticModel(c, 3);
  ASSERT_EQ(kvrt_model_get_weights(plain.get(), &w), KVRT_OK);
  EXPECT_EQ(w.bq.n_slices, 0);
  EXPECT_EQ(w.bv.n_slices, 0);
  c.qkv_bias = 2;
  kvrt_model *bad = nullptr;
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &bad), KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error()).find("qkv_bias = 2 must be 0 or 1"),
            std::string::npos);
}

TEST(ModelTest, InvalidConfigs) {
  kvrt_model_config c = tinyConfig(true);
  c.rope_theta = std::numeric_limits<double>::infinity();
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &model), KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error()).find("rope_theta"),
            std::string::npos);
  c = tinyConfig(true);
  c.hidden_dim = -3;
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &model), KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error()).find("hidden_dim = -3"),
            std::string::npos);
  c = tinyConfig(true);
  c.rope_layout = static_cast<kvrt_rope_layout>(7);
  EXPECT_EQ(kvrt_model_synthetic(&c, 1, &model), KVRT_ERR_BAD_MODEL);
  EXPECT_NE(std::string(kvrt_last_error())
                .find("rope_layout = 7 is not a known layout (0 interleaved, "
                      "1 half)"),
            std::string::npos)
      << kvrt_last_error();
  EXPECT_EQ(model, nullptr);
}

TEST_F(MalformedModelTest, ValidFileLoads) {
  ModelPtr model = loadModel(path);
  EXPECT_TRUE(model);
}

TEST_F(MalformedModelTest, MissingFile) {
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_load(dir.file("absent.bin").c_str(), &model),
            KVRT_ERR_IO);
  EXPECT_NE(std::string(kvrt_last_error()).find("cannot open model"),
            std::string::npos);
}

// A FIFO, a device or a directory is refused without blocking on its open
// or reading forever.
TEST_F(MalformedModelTest, NotARegularFile) {
  std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_load(fifo.c_str(), &model), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open model '" + fifo +
                "': it is a FIFO, not a regular file");
  EXPECT_EQ(kvrt_model_load("/dev/zero", &model), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open model '/dev/zero': not a regular file");
  EXPECT_EQ(kvrt_model_load("/", &model), KVRT_ERR_IO);
  EXPECT_EQ(std::string(kvrt_last_error()),
            "cannot open model '/': it is a directory");
  EXPECT_EQ(model, nullptr);
}

TEST_F(MalformedModelTest, TruncatedHeader) {
  bytes.resize(10);
  expectRejected(KVRT_ERR_BAD_MODEL, {"truncated", "10 bytes", "header"});
}

TEST_F(MalformedModelTest, ZeroDim) {
  setHeader(0, 0);
  expectRejected(KVRT_ERR_BAD_MODEL, {"invalid header", "dim = 0"});
}

TEST_F(MalformedModelTest, NegativeLayers) {
  setHeader(2, -1);
  expectRejected(KVRT_ERR_BAD_MODEL, {"n_layers = -1 must be positive"});
}

TEST_F(MalformedModelTest, ZeroVocab) {
  setHeader(5, 0);
  expectRejected(KVRT_ERR_BAD_MODEL, {"vocab_size = 0"});
}

TEST_F(MalformedModelTest, HeadsDoNotDivideDim) {
  setHeader(3, 3);
  expectRejected(KVRT_ERR_BAD_MODEL, {"dim 8 is not divisible by n_heads 3"});
}

TEST_F(MalformedModelTest, KvHeadsDoNotDivideHeads) {
  setHeader(4, 3);
  setHeader(3, 4);
  expectRejected(KVRT_ERR_BAD_MODEL,
                 {"n_heads 4 is not divisible by n_kv_heads 3"});
}

TEST_F(MalformedModelTest, OddHeadSize) {
  setHeader(3, 8); // dim 8 / 8 heads = head size 1
  setHeader(4, 8);
  expectRejected(KVRT_ERR_BAD_MODEL, {"head size 1", "is odd"});
}

TEST_F(MalformedModelTest, TruncatedWeights) {
  bytes.resize(bytes.size() - 6);
  expectRejected(KVRT_ERR_BAD_MODEL, {"truncated", "6 missing"});
}

TEST_F(MalformedModelTest, TrailingBytes) {
  bytes.insert(bytes.end(), 12, 0);
  expectRejected(KVRT_ERR_BAD_MODEL, {"size mismatch", "12 trailing bytes"});
}

TEST_F(MalformedModelTest, WrongSizeForHeader) {
  setHeader(1, 20); // hidden_dim 20 needs more bytes than the file has
  expectRejected(KVRT_ERR_BAD_MODEL, {"truncated", "missing"});
}

TEST_F(MalformedModelTest, NaNWeight) {
  // wq starts after the embedding (16 x 8) and rms_att (2 x 8); this is the
  // first float of layer 1's wq (8 x 8 per layer).
  setFloat(16 * 8 + 2 * 8 + 64, std::numeric_limits<float>::quiet_NaN());
  expectRejected(KVRT_ERR_BAD_MODEL,
                 {"non-finite weight wq[64] (layer 1) = nan"});
}

TEST_F(MalformedModelTest, InfiniteWeightInSeparateClassifier) {
  ModelPtr model = syntheticModel(tinyConfig(false), 3);
  ASSERT_EQ(kvrt_model_save(model.get(), path.c_str()), KVRT_OK);
  bytes = readBytes(path);
  float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + bytes.size() - 4, &inf, 4);
  expectRejected(KVRT_ERR_BAD_MODEL, {"non-finite weight wcls[127] = inf"});
}

} // namespace

// A forward key read back (kv-run hands it to kv-aot --forward) names the
// same forward: every field forwardKey() writes, the optional ones included,
// survives; a key it could not have written is refused, naming the field.
TEST(ModelTest, ForwardKeyReadsBack) {
  std::vector<std::pair<kvrt_model_config, kvrt_kv_dtype>> configs;
  configs.push_back(
      {kvrt::sizedConfig(64, 172, 5, 8, 4, 512, 512), KVRT_KV_F32});
  kvrt_model_config c = kvrt::sizedConfig(128, 256, 3, 4, 2, 1000, 256);
  c.rope_layout = KVRT_ROPE_HALF;
  c.rope_theta = 1e6;
  c.rms_eps = 1e-6;
  c.rope_dim = 16;
  c.rope_scale = 4.0;
  c.qkv_bias = 1;
  c.n_rope_freq_factors = 8;
  for (int i = 0; i < 8; ++i)
    c.rope_freq_factors[i] = 1.0f + 0.25f * float(i);
  configs.push_back({c, KVRT_KV_BF16});
  std::string error;
  for (const auto &[config, dtype] : configs) {
    // Q4_K_M's kind of mix: a tensor whose layers differ.
    std::optional<kvir::WeightFormats> mixed = kvir::WeightFormats::parse(
        "wq:q4_k;wv:q6_k,q4_k*" + std::to_string(config.n_layers - 1),
        config.n_layers, error);
    ASSERT_TRUE(mixed) << error;
    for (const kvir::WeightFormats &formats : {kvir::WeightFormats(), *mixed}) {
      std::string key = kvir::forwardKey(config, dtype, formats);
      kvrt_model_config read;
      kvrt_kv_dtype readDtype;
      kvir::WeightFormats readFormats;
      ASSERT_TRUE(
          kvir::parseForwardKey(key, read, readDtype, readFormats, error))
          << key << ": " << error;
      EXPECT_EQ(kvir::forwardKey(read, readDtype, readFormats), key);
      EXPECT_EQ(kvir::forwardPrefix(read, readDtype, readFormats),
                kvir::forwardPrefix(config, dtype, formats));
    }
  }
  std::string key =
      kvir::forwardKey(configs[0].first, KVRT_KV_F32, kvir::WeightFormats());
  kvrt_model_config read;
  kvrt_kv_dtype dtype;
  kvir::WeightFormats formats;
  auto refused = [&](const std::string &text, const std::string &why) {
    EXPECT_FALSE(kvir::parseForwardKey(text, read, dtype, formats, error))
        << text;
    EXPECT_NE(error.find(why), std::string::npos) << text << ": " << error;
  };
  refused(key.substr(0, key.find(" vocab")), "bad 'vocab'");
  refused(key + " colour=red", "bad 'colour=red'");
  refused(key + " qkv_bias qkv_bias", "bad 'qkv_bias'");
  std::string swapped = key;
  swapped.replace(0, swapped.find(' '), "dim=x");
  refused(swapped, "bad 'dim=x'");
  std::string odd = key;
  odd.replace(odd.find("heads=8"), 7, "heads=7");
  refused(odd, "unsupported config");
  refused(key + " weights=wq:q9_9", "q9_9");
}
