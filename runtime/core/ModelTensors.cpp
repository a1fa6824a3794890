//===- ModelTensors.cpp - The model's tensors as a table --------*- C++ -*-===//

#include "runtime/core/ModelTensors.h"
#include "runtime/core/ModelConfig.h"

#include <cstdio>
#include <cstdlib>

using namespace kvrt;

uint64_t kvrt::shapeValue(ShapeSymbol symbol, const kvrt_model_config &c) {
  switch (symbol) {
  case ShapeSymbol::One:
    return 1;
  case ShapeSymbol::Dim:
    return static_cast<uint64_t>(c.dim);
  case ShapeSymbol::KvDim:
    return c.n_heads > 0 ? static_cast<uint64_t>(kvir::kvDim(c)) : 0;
  case ShapeSymbol::Hidden:
    return static_cast<uint64_t>(c.hidden_dim);
  case ShapeSymbol::Vocab:
    return static_cast<uint64_t>(c.vocab_size);
  }
  return 0;
}

bool kvrt::tensorPresent(TensorPresence presence, const kvrt_model_config &c) {
  switch (presence) {
  case TensorPresence::Always:
    return true;
  case TensorPresence::SeparateClassifier:
    return c.shared_classifier == 0;
  }
  return false;
}

void kvrt::setTensorPresent(TensorPresence presence, kvrt_model_config &c) {
  switch (presence) {
  case TensorPresence::Always:
    return;
  case TensorPresence::SeparateClassifier:
    c.shared_classifier = 0;
    return;
  }
}

const char *kvrt::weightFormatName(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return "f32";
  }
  return "unknown";
}

int64_t kvrt::weightRowBytes(kvrt_weight_format format, int64_t cols) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return cols * static_cast<int64_t>(sizeof(float));
  }
  return 0;
}

const float *kvrt::f32Data(const kvrt_weight &weight) {
  if (weight.format != KVRT_WEIGHT_F32) {
    // A caller that reads f32 was handed another format: continuing would
    // read its bytes as floats.
    std::fprintf(stderr,
                 "kvrt: a weight of format %s (%d) read as f32; only "
                 "KVRT_WEIGHT_F32 weights have f32 data\n",
                 weightFormatName(weight.format), int(weight.format));
    std::abort();
  }
  return static_cast<const float *>(weight.data);
}
