//===- Model.cpp - Model configs, layout and accessors ----------*- C++ -*-===//

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cmath>

using namespace kvrt;

namespace {

/// `a * b`, or nullopt on 64-bit overflow.
std::optional<uint64_t> mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

} // namespace

std::string kvrt::describeConfigError(const kvrt_model_config &c) {
  std::string architecture = kvir::describeArchitectureError(c);
  if (!architecture.empty())
    return architecture;
  if (c.seq_len <= 0)
    return str("seq_len = ", c.seq_len, " must be positive");
  if (c.shared_classifier != 0 && c.shared_classifier != 1)
    return str("shared_classifier = ", c.shared_classifier, " must be 0 or 1");
  return "";
}

std::optional<std::vector<TensorSpec>>
kvrt::tensorSpecs(const kvrt_model_config &c) {
  std::vector<TensorSpec> specs;
  for (const TensorDecl &t : kTensors) {
    if (!tensorPresent(t.presence, c))
      continue;
    bool perLayer = t.scope == TensorScope::Layer;
    uint64_t cols = shapeValue(t.cols, c);
    std::optional<uint64_t> rows =
        mul(perLayer ? uint64_t(c.n_layers) : 1, shapeValue(t.rows, c));
    std::optional<uint64_t> count = rows ? mul(*rows, cols) : std::nullopt;
    if (!count)
      return std::nullopt;
    specs.push_back({&t, t.field, *count, *rows, cols, t.kind, perLayer});
  }
  return specs;
}

uint64_t kvrt::legacyRopeTableFloats(const kvrt_model_config &c) {
  return static_cast<uint64_t>(c.seq_len) *
         static_cast<uint64_t>(c.dim / c.n_heads);
}

kvrt_model *kvrt::makeModel(const kvrt_model_config &config,
                            std::vector<float> weights) {
  auto *model = new kvrt_model();
  model->config = config;
  model->data = std::move(weights);
  const float *p = model->data.data();
  std::vector<TensorSpec> specs = *tensorSpecs(config);
  for (const TensorSpec &spec : specs) {
    int64_t rows = int64_t(spec.rows), cols = int64_t(spec.fanIn);
    model->weights.*
        spec.decl->member = {p, KVRT_WEIGHT_F32, rows, cols,
                             rows * weightRowBytes(KVRT_WEIGHT_F32, cols)};
    p += spec.count;
  }
  for (const TensorDecl &t : kTensors)
    if (!tensorPresent(t.presence, config) && t.absent != TensorId::none)
      model->weights.*t.member = model->weights.*tensorDecl(t.absent).member;
  return model;
}

kvrt_model_config kvrt::sizedConfig(int32_t dim, int32_t hidden, int32_t layers,
                                    int32_t heads, int32_t kvHeads,
                                    int32_t vocab, int32_t seqLen) {
  kvrt_model_config c{};
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kvHeads;
  c.vocab_size = vocab;
  c.seq_len = seqLen;
  c.shared_classifier = 1;
  c.rope_layout = KVRT_ROPE_INTERLEAVED;
  c.rope_theta = 10000.0;
  c.rms_eps = 1e-5;
  return c;
}

extern "C" void kvrt_model_config_init(kvrt_model_config *config) {
  // stories260K's shape.
  if (config)
    *config = kvrt::sizedConfig(64, 172, 5, 8, 4, 512, 512);
}

extern "C" kvrt_status
kvrt_model_config_validate(const kvrt_model_config *config) {
  if (!config)
    return fail(KVRT_ERR_INVALID_ARGUMENT, "model config is NULL");
  std::string error = describeConfigError(*config);
  if (!error.empty())
    return fail(KVRT_ERR_BAD_MODEL, "invalid model config: " + error);
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_model_get_config(const kvrt_model *model,
                                             kvrt_model_config *out) {
  if (!model || !out)
    return nullArgument(__func__);
  *out = model->config;
  return KVRT_OK;
}

extern "C" kvrt_status kvrt_model_get_weights(const kvrt_model *model,
                                              kvrt_model_weights *out) {
  if (!model || !out)
    return nullArgument(__func__);
  *out = model->weights;
  return KVRT_OK;
}

extern "C" void kvrt_model_retain(kvrt_model *model) { retain(model); }

extern "C" void kvrt_model_release(kvrt_model *model) { release(model); }
