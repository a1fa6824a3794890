//===- ComputeBackend.cpp - Where a kv program's math runs ------*- C++ -*-===//

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <string>
#include <string_view>

kvrt_status kvir::checkForward(const Forward &forward, const kvrt_model *model,
                               ForwardEntry entry) {
  // The page element type is the pool's to match (the backends check it
  // against the view's layout); the model's fields and formats must be the
  // same.
  kvrt_model_config config;
  if (kvrt_status s = kvrt_model_get_config(model, &config))
    return s;
  WeightFormats formats = modelWeightFormats(model);
  kvrt_kv_dtype dtype = kvDtypeOfKey(forward.key).value_or(KVRT_KV_F32);
  std::string key = forwardKey(config, dtype, formats);
  if (!forward.key)
    return kvrt::fail(
        KVRT_ERR_INVALID_ARGUMENT,
        kvrt::str("no generated forward for the model [", key, "]"));
  std::string base = configKey(config, dtype);
  std::string_view compiled(forward.key);
  if (key != compiled && compiled.substr(0, base.size()) == base &&
      (compiled.size() == base.size() ||
       compiled.substr(base.size(), 9) == " weights="))
    return kvrt::fail(
        KVRT_ERR_INVALID_ARGUMENT,
        kvrt::str("the generated forward was compiled for weights in ",
                  compiled.size() == base.size()
                      ? std::string("f32")
                      : std::string(compiled.substr(base.size() + 9)),
                  ", the model's weights are in ", formats.describe(),
                  " (compile the program against this model)"));
  if (key != compiled)
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT,
                      kvrt::str("the generated forward was compiled for [",
                                forward.key, "], the model is [", key, "]"));
  bool present = false;
  const char *name = "";
  switch (entry) {
  case ForwardEntry::Prefill:
    present = forward.prefill != nullptr;
    name = "prefill";
    break;
  case ForwardEntry::Attention:
    present = forward.attention != nullptr;
    name = "attention";
    break;
  case ForwardEntry::Materialize:
    present = forward.materialize != nullptr;
    name = "materialize";
    break;
  }
  if (!present)
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT,
                      kvrt::str("the generated forward of [", key, "] has no ",
                                name, " entry point"));
  return KVRT_OK;
}
