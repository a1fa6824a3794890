//===- TestSupport.cpp - Shared unit test helpers ---------------*- C++ -*-===//

#include "test/unit/TestSupport.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

using namespace kvir::test;

std::string kvir::test::testModelPath() { return KVIR_TEST_MODEL; }

std::string kvir::test::greedyTokensPath() {
  return std::filesystem::path(KVIR_TEST_MODEL)
      .replace_filename("stories260K.greedy81.tokens.txt")
      .string();
}

std::string kvir::test::greedyLogitsPath() {
  return std::filesystem::path(KVIR_TEST_MODEL)
      .replace_filename("stories260K.greedy81.logits.f32")
      .string();
}

bool kvir::test::haveTestModel() {
  return std::filesystem::exists(testModelPath()) &&
         std::filesystem::exists(greedyTokensPath()) &&
         std::filesystem::exists(greedyLogitsPath());
}

std::string kvir::test::readFileBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void kvir::test::writeFileBytes(const std::string &path,
                                const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<float> kvir::test::readFloats(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + values.size() * sizeof(float),
            reinterpret_cast<char *>(values.data()));
  return values;
}

std::vector<int32_t> kvir::test::readTokenFile(const std::string &path) {
  std::ifstream in(path);
  std::vector<int32_t> tokens;
  for (int32_t t; in >> t;)
    tokens.push_back(t);
  return tokens;
}

TempDir::TempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "kvir-test-XXXXXX").string();
  if (!mkdtemp(pattern.data()))
    ADD_FAILURE() << "cannot create a temporary directory";
  dir = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::string TempDir::file(const std::string &name) const {
  return (dir / name).string();
}

ModelPtr kvir::test::loadModel(const std::string &path) {
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_load(path.c_str(), &model), KVRT_OK)
      << kvrt_last_error();
  return ModelPtr(model);
}

ModelPtr kvir::test::syntheticModel(const kvrt_model_config &config,
                                    uint64_t seed) {
  kvrt_model *model = nullptr;
  EXPECT_EQ(kvrt_model_synthetic(&config, seed, &model), KVRT_OK)
      << kvrt_last_error();
  return ModelPtr(model);
}

kvrt_model_config kvir::test::makeConfig(int32_t dim, int32_t hidden,
                                         int32_t layers, int32_t heads,
                                         int32_t kvHeads, int32_t vocab,
                                         int32_t seqLen) {
  return kvrt::sizedConfig(dim, hidden, layers, heads, kvHeads, vocab, seqLen);
}

kvrt_model_config kvir::test::smallConfig(kvrt_rope_layout layout) {
  kvrt_model_config c = makeConfig(48, 96, 2, 4, 2, 64, 128);
  c.rope_layout = layout;
  return c;
}

std::vector<RopeVariant> kvir::test::ropeVariants() {
  // Head size 12: rope_dim 8 rotates 4 of the 6 pairs.
  auto make = [](kvrt_rope_layout layout, int32_t ropeDim, double scale,
                 bool llama3) {
    kvrt_model_config c = smallConfig(layout);
    c.rope_dim = ropeDim;
    c.rope_scale = scale;
    if (llama3) {
      // Original context 64: pair 0 keeps its frequency, pair 1 is smoothed,
      // the others are divided by 8.
      c.rope_theta = 500000.0;
      std::vector<float> factors = kvir::llama3RopeFreqFactors(
          kvir::ropeDims(c), c.rope_theta, 8.0, 1.0, 4.0, 64.0);
      c.n_rope_freq_factors = static_cast<int32_t>(factors.size());
      std::copy(factors.begin(), factors.end(), c.rope_freq_factors);
    }
    return c;
  };
  return {
      {"partial-interleaved", make(KVRT_ROPE_INTERLEAVED, 8, 0.0, false)},
      {"partial-half", make(KVRT_ROPE_HALF, 8, 0.0, false)},
      {"linear-scale-4", make(KVRT_ROPE_HALF, 0, 4.0, false)},
      {"llama3-factors", make(KVRT_ROPE_INTERLEAVED, 0, 0.0, true)},
      {"all-together", make(KVRT_ROPE_HALF, 8, 2.0, true)},
  };
}

PoolPtr kvir::test::poolFor(const kvrt_model *model, int64_t capacityPages,
                            int32_t pageTokens, kvrt_kv_dtype dtype) {
  kvrt_pool_config config;
  EXPECT_EQ(kvrt_pool_config_for_model(model, &config), KVRT_OK);
  config.capacity_pages = capacityPages;
  config.page_tokens = pageTokens;
  config.dtype = dtype;
  kvrt_pool *pool = nullptr;
  EXPECT_EQ(kvrt_pool_create(&config, &pool), KVRT_OK) << kvrt_last_error();
  return PoolPtr(pool);
}

ViewPtr kvir::test::emptyView(kvrt_pool *pool) {
  kvrt_view *view = nullptr;
  EXPECT_EQ(kvrt_view_create(pool, &view), KVRT_OK) << kvrt_last_error();
  return ViewPtr(view);
}

double kvir::test::maxAbsDiff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

ViewPtr kvir::test::shifted(const kvrt_view *view, int64_t delta) {
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvrt_view_shift(view, delta, &out), KVRT_OK) << kvrt_last_error();
  return ViewPtr(out);
}

ViewPtr kvir::test::concat(const kvrt_view *a, const kvrt_view *b) {
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvrt_view_concat(a, b, &out), KVRT_OK) << kvrt_last_error();
  return ViewPtr(out);
}

ViewPtr kvir::test::slice(const kvrt_view *view, int64_t begin, int64_t end) {
  kvrt_view *out = nullptr;
  EXPECT_EQ(kvrt_view_slice(view, begin, end, &out), KVRT_OK)
      << kvrt_last_error();
  return ViewPtr(out);
}

std::vector<int32_t> kvir::test::randomTokens(size_t n, int32_t vocab,
                                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t &t : tokens)
    t = static_cast<int32_t>(rng() % vocab);
  return tokens;
}
