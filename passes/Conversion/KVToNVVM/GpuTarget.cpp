//===- GpuTarget.cpp - The forward's stages on an NVIDIA GPU ----*- C++ -*-===//
// PLACEHOLDER while the GPU template is ported to builders: every config is
// refused with a diagnostic.

#include "passes/Conversion/KVToNVVM/GpuTarget.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace mlir::kv;

namespace {
class GpuTarget final : public ForwardTarget {
public:
  StringRef name() const override { return "GPU"; }
  std::string checkConfig(const kvrt_model_config &) const override {
    return "the GPU target is being ported to builders";
  }
  void emitKernels(ForwardEmitter &) override {}
  void rmsnorm(ForwardEmitter &, BufferRef, BufferRef, BufferRef,
               Value) override {}
  void matmul(ForwardEmitter &, BufferRef, BufferRef, BufferRef, Value, int64_t,
              int64_t, bool) override {}
  void storeKV(ForwardEmitter &, BufferRef, BufferRef, Value, Value,
               const KVTables &, Value) override {}
  void attention(ForwardEmitter &, BufferRef, BufferRef, Value, Value,
                 const KVTables &, Value) override {}
  void swiglu(ForwardEmitter &, BufferRef, BufferRef, Value) override {}
  void materialize(ForwardEmitter &, const KVTables &, Value) override {}
};
} // namespace

std::unique_ptr<ForwardTarget> mlir::kv::createGpuTarget() {
  return std::make_unique<GpuTarget>();
}

void mlir::kv::registerGpuForwardDialects(DialectRegistry &registry) {
  registry.insert<gpu::GPUDialect>();
}
