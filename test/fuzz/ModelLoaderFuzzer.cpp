//===- ModelLoaderFuzzer.cpp - Fuzzes the llama2.c checkpoint loader ------===//
//
// Any bytes given to kvrt_model_load as a checkpoint: either a message and a
// status, or a model whose configuration validates and whose weights are all
// there. Never a crash, a leak or an allocation the file's size does not
// justify.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "test/fuzz/FuzzSupport.h"

#include <cstring>

using kvir::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kvir::fuzz::MemoryFile file(data, size);
  kvrt_model *model = nullptr;
  kvrt_status status = kvrt_model_load(file.c_str(), &model);
  if (status != KVRT_OK) {
    if (model)
      fail("a failed load returned a model");
    if (std::strlen(kvrt_last_error()) == 0)
      fail("a failed load left no message");
    return 0;
  }
  kvrt_model_config config;
  if (kvrt_model_get_config(model, &config) != KVRT_OK ||
      kvrt_model_config_validate(&config) != KVRT_OK)
    fail(std::string("a loaded model's configuration does not validate: ") +
         kvrt_last_error());
  kvrt_model_release(model);
  return 0;
}
