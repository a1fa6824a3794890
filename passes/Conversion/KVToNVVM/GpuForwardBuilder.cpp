//===- GpuForwardBuilder.cpp - The model forward as GPU kernels -*- C++ -*-===//
//
// The GPU forward is MLIR text too (GpuForwardTemplate.inc), specialised with
// the CPU template's substitutions (getForwardSubstitutions: sizes, RoPE pair
// indices, theta, eps, scale as exact literals) plus the warp mapping of the
// attention kernel.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToNVVM/GpuForwardBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::kv;

namespace {

const char *const kGpuTemplate =
#include "passes/Conversion/KVToNVVM/GpuForwardTemplate.inc"
    ;

/// Elements of a head each lane of a warp holds in the attention kernel.
int64_t elementsPerLane(int64_t headSize) { return (headSize + 31) / 32; }

} // namespace

std::string mlir::kv::checkGpuForwardConfig(const ForwardConfig &c) {
  int64_t hs = c.dim > 0 && c.heads > 0 ? c.dim / c.heads : 0;
  if (hs > 1024)
    return "head size " + std::to_string(hs) +
           " exceeds 1024, the largest the CPU and GPU kernels support";
  std::string problem = checkForwardConfig(c);
  if (!problem.empty())
    return problem;
  if (hs % elementsPerLane(hs) != 0)
    return "head size " + std::to_string(hs) + " is not a multiple of the " +
           std::to_string(elementsPerLane(hs)) +
           " elements each lane of a warp holds";
  return "";
}

std::string mlir::kv::getGpuForwardSource(const ForwardConfig &c,
                                          StringRef prefix) {
  llvm::StringMap<std::string> map = getForwardSubstitutions(c, prefix);
  int64_t hs = c.headSize();
  int64_t epl = elementsPerLane(hs);
  map["EPL"] = std::to_string(epl);
  map["LANES"] = std::to_string(hs / epl);
  map["HS2"] = std::to_string(hs + 2);
  map["WACC"] = std::to_string(4 * hs);
  return substituteTemplate(kGpuTemplate, map);
}

void mlir::kv::registerGpuForwardDialects(DialectRegistry &registry) {
  registerForwardDialects(registry);
  registry.insert<gpu::GPUDialect>();
}

LogicalResult mlir::kv::buildGpuForwardFunctions(ModuleOp module,
                                                 const ForwardConfig &config,
                                                 StringRef prefix,
                                                 Location loc) {
  std::string problem = checkGpuForwardConfig(config);
  if (!problem.empty())
    return emitError(loc) << "cannot build the GPU forward '" << prefix
                          << "': " << problem;
  MLIRContext *ctx = module.getContext();
  ctx->loadDialect<arith::ArithDialect, func::FuncDialect, gpu::GPUDialect,
                   math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                   vector::VectorDialect>();
  if (failed(insertForwardSource(module, getGpuForwardSource(config, prefix),
                                 "GPU forward '" + prefix.str() + "'", loc)))
    return failure();
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(ctx));
  return success();
}
