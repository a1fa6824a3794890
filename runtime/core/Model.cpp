//===- Model.cpp - Model configs, layout and accessors ----------*- C++ -*-===//

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Quant.h"
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
  if (c.qkv_bias != 0 && c.qkv_bias != 1)
    return str("qkv_bias = ", c.qkv_bias, " must be 0 or 1");
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

std::vector<TensorSpec> kvrt::specsOf(const kvrt_model_config &c) {
  return tensorSpecs(c).value_or(std::vector<TensorSpec>());
}

uint64_t kvrt::legacyRopeTableFloats(const kvrt_model_config &c) {
  return static_cast<uint64_t>(c.seq_len) *
         static_cast<uint64_t>(c.dim / c.n_heads);
}

namespace {

/// Fills `model->weights` from its parts: each tensor's slices, and the
/// absent ones tied to another.
void fillWeights(kvrt_model *model) {
  const kvrt_model_config &c = model->config;
  for (const TensorDecl &t : kTensors) {
    const std::vector<kvrt_weight_slice> &slices =
        model->parts.slices[static_cast<size_t>(t.id)];
    if (slices.empty())
      continue;
    model->weights.*t.member = {int64_t(shapeValue(t.rows, c)),
                                int64_t(shapeValue(t.cols, c)),
                                int64_t(slices.size()), slices.data()};
  }
  for (const TensorDecl &t : kTensors)
    if (!tensorPresent(t.presence, c) && t.absent != TensorId::none)
      model->weights.*t.member = model->weights.*tensorDecl(t.absent).member;
}

/// Whether the model's weights are its `owned` floats, every slice f32 and
/// back to back in tensorSpecs order.
bool ownsF32Weights(const kvrt_model &model) {
  const float *next = model.parts.owned.data();
  for (const TensorSpec &spec : specsOf(model.config)) {
    for (const kvrt_weight_slice &s :
         model.parts.slices[static_cast<size_t>(spec.decl->id)]) {
      if (s.format != KVRT_WEIGHT_F32 || s.data != next)
        return false;
      next += s.bytes / sizeof(float);
    }
  }
  return next == model.parts.owned.data() + model.parts.owned.size();
}

} // namespace

kvrt_model *kvrt::makeModel(const kvrt_model_config &config,
                            std::vector<float> weights) {
  ModelParts parts;
  parts.owned = std::move(weights);
  const float *p = parts.owned.data();
  for (const TensorSpec &spec : specsOf(config)) {
    uint64_t slices = spec.perLayer ? uint64_t(config.n_layers) : 1;
    uint64_t each = spec.count / slices;
    for (uint64_t l = 0; l < slices; ++l, p += each)
      parts.slices[static_cast<size_t>(spec.decl->id)].push_back(
          {p, KVRT_WEIGHT_F32, int64_t(each * sizeof(float))});
  }
  return makeModel(config, std::move(parts));
}

kvrt_model *kvrt::makeModel(const kvrt_model_config &config, ModelParts parts) {
  auto *model = new kvrt_model();
  model->config = config;
  // Moving the vectors keeps the addresses the slices hold.
  model->parts = std::move(parts);
  fillWeights(model);
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

const std::vector<float> &kvrt::f32Weights(const kvrt_model &model) {
  std::call_once(model.f32Once, [&] {
    if (ownsF32Weights(model)) {
      model.f32Owned = true;
      return;
    }
    // Reserved whole: growing by doubling held up to three times the
    // weights at once (12.5 GB converting a 1.1e9-weight model).
    std::vector<float> copy;
    uint64_t total = 0;
    for (const TensorSpec &spec : specsOf(model.config))
      total += spec.count;
    copy.reserve(size_t(total));
    for (const TensorSpec &spec : specsOf(model.config)) {
      const kvrt_weight &w = model.weights.*spec.decl->member;
      for (int64_t l = 0; l < w.n_slices; ++l) {
        const kvrt_weight_slice &s = w.slices[l];
        size_t at = copy.size();
        copy.resize(at + size_t(w.rows * w.cols));
        for (int64_t r = 0; r < w.rows; ++r)
          dequantizeRow(s.format,
                        static_cast<const uint8_t *>(s.data) +
                            r * weightRowBytes(s.format, w.cols),
                        copy.data() + at + r * w.cols, w.cols);
      }
    }
    model.f32Copy = std::move(copy);
  });
  return model.f32Owned ? model.parts.owned : model.f32Copy;
}

void kvrt::forEachWeightChunk(
    const kvrt_model &model, size_t chunk,
    const std::function<void(const void *, size_t, size_t)> &fn) {
  std::vector<uint8_t> buffer;
  size_t index = 0;
  for (const TensorSpec &spec : specsOf(model.config)) {
    const kvrt_weight &w = model.weights.*spec.decl->member;
    for (int64_t l = 0; l < w.n_slices; ++l) {
      const auto *bytes = static_cast<const uint8_t *>(w.slices[l].data);
      size_t size = size_t(w.slices[l].bytes);
      // Whole chunks straight from the slice where the buffer is empty;
      // the rest gathered across slices.
      while (size > 0) {
        if (buffer.empty() && size >= chunk) {
          fn(bytes, chunk, index++);
          bytes += chunk;
          size -= chunk;
          continue;
        }
        size_t take = std::min(size, chunk - buffer.size());
        buffer.insert(buffer.end(), bytes, bytes + take);
        bytes += take;
        size -= take;
        if (buffer.size() == chunk) {
          fn(buffer.data(), chunk, index++);
          buffer.clear();
        }
      }
    }
  }
  if (!buffer.empty())
    fn(buffer.data(), buffer.size(), index);
}

uint64_t kvrt::weightBytes(const kvrt_model &model) {
  uint64_t total = 0;
  for (const TensorSpec &spec : specsOf(model.config)) {
    const kvrt_weight &w = model.weights.*spec.decl->member;
    for (int64_t l = 0; l < w.n_slices; ++l)
      total += uint64_t(w.slices[l].bytes);
  }
  return total;
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
