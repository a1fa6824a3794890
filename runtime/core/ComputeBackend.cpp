//===- ComputeBackend.cpp - Where a kv program's math runs ------*- C++ -*-===//

#include "runtime/core/ComputeBackend.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <string>

kvrt_status kvir::checkForward(const Forward &forward,
                               const kvrt_model_config &config,
                               ForwardEntry entry) {
  // The page element type is the pool's to match (the backends check it
  // against the view's layout); the model's fields must be the same.
  std::string key =
      configKey(config, kvDtypeOfKey(forward.key).value_or(KVRT_KV_F32));
  if (!forward.key)
    return kvrt::fail(
        KVRT_ERR_INVALID_ARGUMENT,
        kvrt::str("no generated forward for the model [", key, "]"));
  if (key != forward.key)
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
