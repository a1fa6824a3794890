//===- GGUFFuzzer.cpp - Fuzzes the GGUF reader ----------------------------===//
//
// Any bytes as a GGUF file, straight from memory (kvrt::gguf::readBuffer,
// which kvrt_model_load and kvrt_tokenizer_load reach for files with the
// GGUF magic). Properties: a message, with nothing returned; or a model whose
// configuration validates, whose weights (every format: F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q5_K, Q6_K, the blocks' scales checked at load) dequantise to
// finite values, and a tokenizer, when the file has one, with as many pieces
// as the model's vocabulary. Never a crash, a leak, a read outside the buffer
// or an allocation the buffer's size does not justify.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/Model.h"
#include "test/fuzz/FuzzSupport.h"

#include <cmath>
#include <string>
#include <vector>

using kvir::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A copy of exactly `size` bytes, so that ASan sees any read beyond it.
  std::vector<uint8_t> bytes(data, data + size);
  kvrt_model *model = nullptr;
  kvrt_tokenizer *tokenizer = nullptr;
  std::string error =
      kvrt::gguf::readBuffer(bytes.data(), bytes.size(), &model, &tokenizer);
  if (!error.empty()) {
    if (model || tokenizer)
      fail("a rejected GGUF file returned a model or a tokenizer");
    return 0;
  }
  if (!model)
    fail("an accepted GGUF file returned no model");
  kvrt_model_config config;
  if (kvrt_model_get_config(model, &config) != KVRT_OK ||
      kvrt_model_config_validate(&config) != KVRT_OK)
    fail(std::string("an accepted model does not validate: ") +
         kvrt_last_error());
  for (float w : kvrt::f32Weights(*model))
    if (!std::isfinite(w))
      fail("an accepted model has a weight that dequantises to a non-finite "
           "value");
  if (tokenizer &&
      kvrt_tokenizer_check_vocab(tokenizer, config.vocab_size) != KVRT_OK)
    fail("an accepted tokenizer does not match the model's vocabulary");
  kvrt_tokenizer_release(tokenizer);
  kvrt_model_release(model);
  return 0;
}
