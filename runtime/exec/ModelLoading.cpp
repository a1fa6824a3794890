//===- ModelLoading.cpp - The model a runner runs ---------------*- C++ -*-===//

#include "runtime/exec/ModelLoading.h"
#include "runtime/core/Model.h"
#include "runtime/core/Support.h"

using namespace kvir;
using kvrt::str;

kvrt_model *kvir::exec::loadModel(const std::string &file,
                                  const std::string &synthetic, uint64_t seed,
                                  uint32_t loadFlags, std::string &description,
                                  std::string &error) {
  kvrt_model *model = nullptr;
  if (!file.empty()) {
    if (kvrt_model_load_ex(file.c_str(), loadFlags, &model)) {
      error = str("cannot load the model: ", kvrt_last_error());
      return nullptr;
    }
    description = file;
    return model;
  }
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  // The presets other than the default: their sizes, a long context, a
  // separate classifier.
  auto shape = [&c](int32_t dim, int32_t hidden, int32_t layers, int32_t heads,
                    int32_t kvHeads, int32_t vocab) {
    c = kvrt::sizedConfig(dim, hidden, layers, heads, kvHeads, vocab, 1 << 16);
    c.shared_classifier = 0;
  };
  uint64_t presetSeed = 1;
  std::string what;
  if (synthetic == "default") {
    what = "stories260K's shape, random weights: pass --model FILE for a "
           "trained checkpoint";
  } else if (synthetic == "synthetic-test") {
    shape(256, 512, 3, 4, 2, 300);
    c.rope_layout = KVRT_ROPE_HALF;
    c.rope_theta = 1000000.0;
    presetSeed = 7;
    what = "dim 256, 4/2 heads of 64, half RoPE, theta 1e6";
  } else if (synthetic == "synthetic-bench") {
    shape(1024, 2816, 8, 8, 8, 1024);
    what = "dim 1024, 8 layers, 8 heads of 128";
  } else {
    error = "unknown synthetic model '" + synthetic +
            "' (available: default, synthetic-test, synthetic-bench)";
    return nullptr;
  }
  if (seed == 0)
    seed = presetSeed;
  if (kvrt_model_synthetic(&c, seed, &model)) {
    error = str("cannot build the synthetic model: ", kvrt_last_error());
    return nullptr;
  }
  description = str(synthetic == "default" ? "built-in synthetic model"
                                           : "synthetic model " + synthetic,
                    " (seed ", seed, ", ", what, ")");
  return model;
}
