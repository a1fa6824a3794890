//===- CpuParallel.cpp - Parallel loops of the CPU forward ------*- C++ -*-===//
//
// A task's captured values travel in a struct on the caller's stack, each
// as the LLVM dialect keeps it (ForwardEmitter::llvmType): a memref as its
// descriptor, so that an unrealized cast, which the LLVM lowering folds away,
// is all it takes either way; an index as i64.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/CpuParallel.h"
#include "passes/Conversion/KVToCPU/CpuKernels.h"
#include "passes/Conversion/KVToRuntime/ExecABI.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::kv;

void cpu::declareParallelRuntime(ForwardEmitter &e) {
  declareExecFunction(e.b, e.module, ExecFn::kvrt_parallel_for);
  declareExecFunction(e.b, e.module, ExecFn::kvrt_get_num_threads);
}

Value cpu::numThreads(ForwardEmitter &e) {
  return e.toIndex(
      createExecCall<ExecFn::kvrt_get_num_threads>(e.b, e.b.getLoc())
          .getResult(0));
}

void cpu::parallelFor(
    ForwardEmitter &e, StringRef task, Value count, ValueRange captures,
    function_ref<void(ValueRange captures, Value begin, Value end)> body) {
  MLIRContext *ctx = e.b.getContext();
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  SmallVector<Type> storage;
  for (Value v : captures)
    storage.push_back(e.llvmType(v.getType()));
  Type context = LLVM::LLVMStructType::getLiteral(ctx, storage);
  std::string name = e.name(task);
  FunctionType taskType = e.b.getFunctionType({ptr, e.i64(), e.i64()}, {});
  {
    OpBuilder::InsertionGuard guard(e.b);
    func::FuncOp f = e.beginFunction(name, taskType.getInputs(), false);
    SmallVector<Value> unpacked;
    for (auto [i, v] : llvm::enumerate(captures)) {
      Value address =
          LLVM::GEPOp::create(e.b, ptr, context, f.getArgument(0),
                              ArrayRef<LLVM::GEPArg>{0, int32_t(i)});
      Value stored = LLVM::LoadOp::create(e.b, storage[i], address);
      if (v.getType().isIndex())
        stored = e.toIndex(stored);
      else if (isa<MemRefType>(v.getType()))
        stored = UnrealizedConversionCastOp::create(e.b, v.getType(), stored)
                     .getResult(0);
      unpacked.push_back(stored);
    }
    body(unpacked, e.toIndex(f.getArgument(1)), e.toIndex(f.getArgument(2)));
    e.finishFunction();
  }
  Value buffer;
  {
    OpBuilder::InsertionGuard guard(e.b);
    e.b.setInsertionPointToStart(&enclosingFunction(e).getBody().front());
    buffer = LLVM::AllocaOp::create(e.b, ptr, context, e.cI64(1));
  }
  for (auto [i, v] : llvm::enumerate(captures)) {
    Value address = LLVM::GEPOp::create(e.b, ptr, context, buffer,
                                        ArrayRef<LLVM::GEPArg>{0, int32_t(i)});
    Value stored = v;
    if (v.getType().isIndex())
      stored = e.toI64(v);
    else if (isa<MemRefType>(v.getType()))
      stored =
          UnrealizedConversionCastOp::create(e.b, storage[i], v).getResult(0);
    LLVM::StoreOp::create(e.b, stored, address);
  }
  Value fn = func::ConstantOp::create(e.b, taskType,
                                      FlatSymbolRefAttr::get(ctx, name));
  Value fnPtr = UnrealizedConversionCastOp::create(e.b, ptr, fn).getResult(0);
  Value n = count.getType().isIndex() ? e.toI64(count) : count;
  createExecCall<ExecFn::kvrt_parallel_for>(e.b, e.b.getLoc(), n, fnPtr,
                                            buffer);
}
