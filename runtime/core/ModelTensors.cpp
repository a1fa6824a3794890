//===- ModelTensors.cpp - The model's tensors as a table --------*- C++ -*-===//

#include "runtime/core/ModelTensors.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/WeightFormat.h"

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
  case TensorPresence::QkvBias:
    return c.qkv_bias == 1;
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
  case TensorPresence::QkvBias:
    c.qkv_bias = 1;
    return;
  }
}

const float *kvrt::f32Data(const kvrt_weight &weight, int64_t slice) {
  if (slice < 0 || slice >= weight.n_slices)
    return nullptr;
  const kvrt_weight_slice &s = weight.slices[slice];
  if (s.format != KVRT_WEIGHT_F32) {
    // A caller that reads f32 was handed another format: continuing would
    // read its bytes as floats.
    std::fprintf(stderr,
                 "kvrt: a weight slice of format %s (%d) read as f32; only "
                 "KVRT_WEIGHT_F32 slices have f32 data\n",
                 weightFormatName(s.format), int(s.format));
    std::abort();
  }
  return static_cast<const float *>(s.data);
}
