//===- ConvertKVToCPU.cpp - Emit the generated CPU forward ------*- C++ -*-===//
//
// A thin driver over buildProgramForwards with the CPU target: the forward of
// every model config the program uses, specialised and put into its module.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/Forward/BuildForward.h"
#include "passes/Conversion/KVToCPU/CpuTarget.h"
#include "passes/Passes.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::kv {
#define GEN_PASS_DEF_CONVERTKVTOCPUPASS
#include "passes/Passes.h.inc"
} // namespace mlir::kv

using namespace mlir;
using namespace mlir::kv;

namespace {

struct ConvertKVToCPUPass
    : public kv::impl::ConvertKVToCPUPassBase<ConvertKVToCPUPass> {
  using Base::Base;

  void runOnOperation() override {
    if (vectorBits != 0 && vectorBits != 256 && vectorBits != 512) {
      getOperation().emitError()
          << "convert-kv-to-cpu: vector-bits must be 0 (the host's), 256 or "
             "512, not "
          << int64_t(vectorBits);
      return signalPassFailure();
    }
    std::optional<QuantDot> dot = parseQuantDot(quantDot);
    if (!dot) {
      getOperation().emitError() << "convert-kv-to-cpu: quant-dot must be "
                                    "auto, f32, int8, amx or avx2, not '"
                                 << quantDot << "'";
      return signalPassFailure();
    }
    if (*dot == QuantDot::Int8 && checkHost && !hostHasInt8Dot()) {
      getOperation().emitError()
          << "convert-kv-to-cpu: quant-dot=int8 needs AVX-512 VNNI "
             "(avx512vnni, avx512bw), which this host lacks";
      return signalPassFailure();
    }
    if (*dot == QuantDot::Avx2 && checkHost && !hostHasAvx2()) {
      getOperation().emitError() << "convert-kv-to-cpu: quant-dot=avx2 needs "
                                    "AVX2, which this host lacks";
      return signalPassFailure();
    }
    if (*dot == QuantDot::Amx && checkHost && !hostHasAmx()) {
      getOperation().emitError()
          << "convert-kv-to-cpu: quant-dot=amx needs AMX int8 tiles "
             "(amx-tile, amx-int8, with AVX-512 VNNI) granted to this process "
             "by Linux (arch_prctl ARCH_REQ_XCOMP_PERM), which this host "
             "lacks";
      return signalPassFailure();
    }
    std::optional<DecodePrefetch> prefetch =
        parseDecodePrefetch(decodePrefetch);
    if (!prefetch) {
      getOperation().emitError() << "convert-kv-to-cpu: decode-prefetch must "
                                    "be host, near or far, not '"
                                 << decodePrefetch << "'";
      return signalPassFailure();
    }
    std::unique_ptr<ForwardTarget> target =
        createCpuTarget(vectorBits, *dot, *prefetch);
    FailureOr<unsigned> built = buildProgramForwards(getOperation(), *target);
    if (failed(built))
      return signalPassFailure();
    numForwards += *built;
  }
};

} // namespace
