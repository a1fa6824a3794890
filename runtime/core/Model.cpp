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

/// `a * b * c`, or nullopt on 64-bit overflow.
std::optional<uint64_t> mul(uint64_t a, uint64_t b, uint64_t c) {
  std::optional<uint64_t> ab = mul(a, b);
  return ab ? mul(*ab, c) : std::nullopt;
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
  uint64_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers,
           vocab = c.vocab_size;
  uint64_t kvDim = dim / c.n_heads * c.n_kv_heads;
  struct Shape {
    const char *name;
    std::optional<uint64_t> count;
    uint64_t fanIn;
    TensorKind kind;
    bool perLayer = true;
  };
  std::vector<Shape> shapes = {
      {"token_embedding", mul(vocab, dim), dim, TensorKind::Embedding, false},
      {"rms_att", mul(layers, dim), dim, TensorKind::Norm},
      {"wq", mul(layers, dim, dim), dim, TensorKind::Matrix},
      {"wk", mul(layers, kvDim, dim), dim, TensorKind::Matrix},
      {"wv", mul(layers, kvDim, dim), dim, TensorKind::Matrix},
      {"wo", mul(layers, dim, dim), dim, TensorKind::Matrix},
      {"rms_ffn", mul(layers, dim), dim, TensorKind::Norm},
      {"w1", mul(layers, hidden, dim), dim, TensorKind::Matrix},
      {"w2", mul(layers, dim, hidden), hidden, TensorKind::Matrix},
      {"w3", mul(layers, hidden, dim), dim, TensorKind::Matrix},
      {"rms_final", dim, dim, TensorKind::Norm, false},
  };
  if (!c.shared_classifier)
    shapes.push_back({"wcls", mul(vocab, dim), dim, TensorKind::Matrix, false});
  std::vector<TensorSpec> specs;
  for (const Shape &s : shapes) {
    if (!s.count)
      return std::nullopt;
    specs.push_back({s.name, *s.count, s.fanIn, s.kind, s.perLayer});
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
  const float **slots[] = {&model->weights.token_embedding,
                           &model->weights.rms_att,
                           &model->weights.wq,
                           &model->weights.wk,
                           &model->weights.wv,
                           &model->weights.wo,
                           &model->weights.rms_ffn,
                           &model->weights.w1,
                           &model->weights.w2,
                           &model->weights.w3,
                           &model->weights.rms_final,
                           &model->weights.wcls};
  std::vector<TensorSpec> specs = *tensorSpecs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    *slots[i] = p;
    p += specs[i].count;
  }
  if (config.shared_classifier)
    model->weights.wcls = model->weights.token_embedding;
  return model;
}

extern "C" void kvrt_model_config_init(kvrt_model_config *config) {
  if (!config)
    return;
  *config = kvrt_model_config{};
  config->dim = 64;
  config->hidden_dim = 172;
  config->n_layers = 5;
  config->n_heads = 8;
  config->n_kv_heads = 4;
  config->vocab_size = 512;
  config->seq_len = 512;
  config->shared_classifier = 1;
  config->rope_layout = KVRT_ROPE_INTERLEAVED;
  config->rope_theta = 10000.0;
  config->rms_eps = 1e-5;
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
