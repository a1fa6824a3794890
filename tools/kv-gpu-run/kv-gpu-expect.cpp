//===- kv-gpu-expect.cpp - The CPU backend's numbers for GPU checks -*- C++
//-*-//
//
// Runs the scenarios of GpuScenarios.h on the generated CPU backend (JIT,
// here, where LLVM is) and writes them for `kv-gpu-run check --expect` on the
// GPU machine, where the CPU backend cannot be built.
//
//   kv-gpu-expect (--model FILE | --synthetic NAME) --out FILE
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuBackend.h"
#include "tools/kv-gpu-run/GpuScenarios.h"

#include <cstdio>
#include <string>

using namespace kvir;
using namespace kvir::gpurun;

int main(int argc, char **argv) {
  std::string model, synthetic, out;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string arg = argv[i];
    if (arg == "--model")
      model = argv[i + 1];
    else if (arg == "--synthetic")
      synthetic = argv[i + 1];
    else if (arg == "--out")
      out = argv[i + 1];
  }
  if (model.empty() == synthetic.empty() || out.empty()) {
    std::fprintf(stderr, "usage: kv-gpu-expect (--model FILE | --synthetic "
                         "NAME) --out FILE\n");
    return 2;
  }
  std::string error;
  kvrt_model *m = nullptr;
  if (loadModel(model, synthetic, &m, &error) != KVRT_OK) {
    std::fprintf(stderr, "kv-gpu-expect: %s\n", error.c_str());
    return 2;
  }
  std::unique_ptr<ComputeBackend> cpu = cpu::createCpuBackend(m, &error);
  std::vector<ScenarioResult> results;
  if (!cpu || runScenarios(*cpu, m, &results) != KVRT_OK) {
    std::fprintf(stderr, "kv-gpu-expect: %s\n",
                 cpu ? kvrt_last_error() : error.c_str());
    return 2;
  }
  kvrt_model_release(m);
  if (!writeResults(out, results)) {
    std::fprintf(stderr, "kv-gpu-expect: cannot write %s\n", out.c_str());
    return 2;
  }
  return 0;
}
