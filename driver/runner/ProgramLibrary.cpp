//===- ProgramLibrary.cpp - Compiled code loaded with dlopen --------------===//

#include "driver/runner/ProgramLibrary.h"

#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/cuda/CudaRuntime.h"

#include <optional>

#include <dlfcn.h>

using namespace kvir;
using namespace kvir::run;

Forward kvir::run::bindForward(void *handle, const std::string &prefix,
                               const char *key) {
  Forward f;
  f.key = key;
  f.prefill = reinterpret_cast<kvrt_prefill_fn>(
      ::dlsym(handle, (prefix + "_prefill").c_str()));
  f.attention = reinterpret_cast<kvrt_attention_fn>(
      ::dlsym(handle, (prefix + "_attention").c_str()));
  f.materialize = reinterpret_cast<kvrt_materialize_fn>(
      ::dlsym(handle, (prefix + "_materialize").c_str()));
  return f;
}

Forward ProgramLibrary::forward(const kvrt_model_config &config) {
  std::string error;
  std::optional<WeightFormats> formats =
      WeightFormats::parse(manifest.weightFormats, config.n_layers, error);
  if (!formats)
    return Forward();
  key = forwardKey(config, manifest.kvDtype, *formats);
  return bindForward(handle, forwardPrefix(config, manifest.kvDtype, *formats),
                     key.c_str());
}

std::string ProgramLibrary::checkFormats(const kvrt_model *model) const {
  std::string theirs = modelWeightFormats(model).spec();
  if (theirs == manifest.weightFormats)
    return "";
  auto name = [](const std::string &spec) {
    return spec.empty() ? std::string("f32") : spec;
  };
  return "the program library was compiled for weights in " +
         name(manifest.weightFormats) + ", the model's weights are in " +
         name(theirs) + " (compile it for this model: kv-aot --model FILE)";
}

bool kvir::run::openProgramLibrary(const std::string &path,
                                   const std::string &entry,
                                   ProgramLibrary &out, std::string &error) {
  // The library's constructor loads its GPU binary (mgpuModuleLoad): the
  // driver has been checked before, so a failure is recorded, not a crash.
  out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!out.handle) {
    const char *why = dlerror();
    error = "cannot load the program library " + path + ": " +
            (why ? why : "unknown reason");
    return false;
  }
  auto *text = static_cast<const char *>(
      dlsym(out.handle, exec::manifestSymbol(entry).c_str()));
  if (!text) {
    error = path + " has no entry @" + entry + " (no " +
            exec::manifestSymbol(entry) + "; was it compiled by kv-aot " +
            "with --entry " + entry + "?)";
    return false;
  }
  if (!exec::EntryManifest::parse(text, out.manifest, error)) {
    error = path + ": " + error;
    return false;
  }
  out.entry = reinterpret_cast<exec::EntryFn>(
      dlsym(out.handle, exec::entrySymbol(entry).c_str()));
  if (!out.entry) {
    error = path + " has no " + exec::entrySymbol(entry);
    return false;
  }
  if (out.manifest.target == "gpu" && kvrt_cuda_check() != KVRT_OK) {
    error = std::string("loading the program's GPU kernels failed: ") +
            kvrt_last_error();
    return false;
  }
  return true;
}
