//===- TestSupport.h - Shared helpers of the runtime unit tests -*- C++ -*-===//

#ifndef KVIR_TEST_UNIT_TESTSUPPORT_H
#define KVIR_TEST_UNIT_TESTSUPPORT_H

#include "runtime/core/KVRuntime.h"

#include "gtest/gtest.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvir::test {

/// The stories260K checkpoint and its llama2.c reference outputs.
std::string testModelPath();
std::string greedyTokensPath();
std::string greedyLogitsPath();

/// True if the stories260K files are all present.
bool haveTestModel();

/// Skips the current test, naming the missing file, when stories260K is absent.
#define KVIR_REQUIRE_TEST_MODEL()                                              \
  do {                                                                         \
    if (!::kvir::test::haveTestModel())                                        \
      GTEST_SKIP() << "stories260K not found at "                              \
                   << ::kvir::test::testModelPath()                            \
                   << " (set KVIR_TEST_MODEL at configure time)";              \
  } while (0)

/// Reads a whole file of little-endian float32.
std::vector<float> readFloats(const std::string &path);

/// The bytes of a file ("" where it cannot be read); writes a file whole.
std::string readFileBytes(const std::string &path);
void writeFileBytes(const std::string &path, const std::string &bytes);

/// Reads whitespace-separated token ids.
std::vector<int32_t> readTokenFile(const std::string &path);

/// A fresh directory removed at the end of the test.
class TempDir {
public:
  TempDir();
  ~TempDir();
  std::string file(const std::string &name) const;

private:
  std::filesystem::path dir;
};

/// Owning handles for runtime objects.
struct ModelDeleter {
  void operator()(kvrt_model *m) const { kvrt_model_release(m); }
};
struct PoolDeleter {
  void operator()(kvrt_pool *p) const { kvrt_pool_release(p); }
};
struct ViewDeleter {
  void operator()(kvrt_view *v) const { kvrt_view_release(v); }
};
using ModelPtr = std::unique_ptr<kvrt_model, ModelDeleter>;
using PoolPtr = std::unique_ptr<kvrt_pool, PoolDeleter>;
using ViewPtr = std::unique_ptr<kvrt_view, ViewDeleter>;

/// Loads a model, failing the test with the runtime's message otherwise.
ModelPtr loadModel(const std::string &path);

/// A synthetic model of `config` from `seed`.
ModelPtr syntheticModel(const kvrt_model_config &config, uint64_t seed);

/// A config with the given shape and the defaults of kvrt_model_config_init
/// for the rest (shared classifier, interleaved RoPE, theta 10000).
kvrt_model_config makeConfig(int32_t dim, int32_t hidden, int32_t layers,
                             int32_t heads, int32_t kvHeads, int32_t vocab,
                             int32_t seqLen);

/// A small GQA config (2 query heads per KV head) with the given RoPE layout.
kvrt_model_config smallConfig(kvrt_rope_layout layout);

/// A named RoPE variant of smallConfig: partial rotary under both layouts,
/// linear scaling, Llama 3 frequency factors, and all of them together.
struct RopeVariant {
  std::string name;
  kvrt_model_config config;
};
std::vector<RopeVariant> ropeVariants();

/// A pool shaped for `model` with `capacityPages` pages of `pageTokens`
/// elements of `dtype`.
PoolPtr poolFor(const kvrt_model *model, int64_t capacityPages,
                int32_t pageTokens = 16, kvrt_kv_dtype dtype = KVRT_KV_F32);

/// An empty view over `pool`.
ViewPtr emptyView(kvrt_pool *pool);

/// Largest |a[i] - b[i]|.
double maxAbsDiff(const float *a, const float *b, size_t n);

/// View operations that fail the test (non-fatally) on an error.
ViewPtr shifted(const kvrt_view *view, int64_t delta);
ViewPtr concat(const kvrt_view *a, const kvrt_view *b);
ViewPtr slice(const kvrt_view *view, int64_t begin, int64_t end);

/// `n` token ids below `vocab` from a seeded generator.
std::vector<int32_t> randomTokens(size_t n, int32_t vocab, uint32_t seed);

} // namespace kvir::test

#endif // KVIR_TEST_UNIT_TESTSUPPORT_H
