//===- GpuScenarios.h - Fixed workloads the GPU checks compare --*- C++ -*-===//
//
// The workloads kv-gpu-run checks on the GPU and kv-gpu-expect records on the
// CPU backend here (the GPU machine has no LLVM, so the CPU backend's numbers
// travel as a file): prefills over multi-page views, a compose with a RoPE
// shift (runs with Δ != 0), decode steps and a layerKV read. Plain C++ over
// ComputeBackend.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_TOOLS_KV_GPU_RUN_GPUSCENARIOS_H
#define KVIR_TOOLS_KV_GPU_RUN_GPUSCENARIOS_H

#include "runtime/core/ComputeBackend.h"

#include <string>
#include <vector>

namespace kvir::gpurun {

/// A seeded synthetic model config by name: `synthetic-test` (head size 64,
/// half RoPE, GQA 2:1) or `synthetic-bench` (dim 1024, 8 layers, head size
/// 128). Returns false for an unknown name.
bool syntheticPreset(const std::string &name, kvrt_model_config *config,
                     uint64_t *seed);

/// Loads `--model FILE` or builds `--synthetic NAME`; the message on error.
kvrt_status loadModel(const std::string &file, const std::string &synthetic,
                      kvrt_model **out, std::string *error);

/// One scenario's output, flattened.
struct ScenarioResult {
  std::string name;
  std::vector<float> values;
};

/// Runs every scenario on `backend`.
kvrt_status runScenarios(ComputeBackend &backend, const kvrt_model *model,
                         std::vector<ScenarioResult> *results);

/// Writes/reads results (a small binary format with the scenario names).
bool writeResults(const std::string &path,
                  const std::vector<ScenarioResult> &results);
bool readResults(const std::string &path, std::vector<ScenarioResult> *results,
                 std::string *error);

} // namespace kvir::gpurun

#endif // KVIR_TOOLS_KV_GPU_RUN_GPUSCENARIOS_H
