//===- ExecABI.cpp - The exec ABI as the conversion sees it -----*- C++ -*-===//

#include "passes/Conversion/KVToRuntime/ExecABI.h"

#include "mlir/Dialect/LLVMIR/LLVMTypes.h"

using namespace mlir;
using namespace mlir::kv;

bool mlir::kv::isTokensType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 1 &&
         tensor.getElementType().isInteger(32);
}
bool mlir::kv::isLogitsType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 2 && tensor.getElementType().isF32();
}
bool mlir::kv::isQueryType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.getRank() == 3 && tensor.getElementType().isF32();
}

FunctionType mlir::kv::getForwardEntryType(MLIRContext *context) {
  return FunctionType::get(context, {LLVM::LLVMPointerType::get(context)}, {});
}

static Type toType(MLIRContext *context, ExecType type) {
  switch (type) {
  case ExecType::Void:
    return {};
  case ExecType::Ptr:
    return LLVM::LLVMPointerType::get(context);
  case ExecType::I32:
    return IntegerType::get(context, 32);
  case ExecType::I64:
    return IntegerType::get(context, 64);
  case ExecType::F64:
    return Float64Type::get(context);
  case ExecType::Forward:
    return getForwardEntryType(context);
  }
  llvm_unreachable("unknown exec ABI type");
}

FunctionType mlir::kv::getExecFunctionType(MLIRContext *context, ExecFn fn) {
  const ExecFunction &f = execFunction(fn);
  SmallVector<Type> params;
  for (size_t i = 0; i < f.arity; ++i)
    params.push_back(toType(context, f.params[i]));
  SmallVector<Type> results;
  if (f.result != ExecType::Void)
    results.push_back(toType(context, f.result));
  return FunctionType::get(context, params, results);
}

func::FuncOp mlir::kv::declareExecFunction(OpBuilder &builder, ModuleOp module,
                                           ExecFn fn) {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  auto decl =
      func::FuncOp::create(builder, module.getLoc(), execFunction(fn).name,
                           getExecFunctionType(builder.getContext(), fn));
  decl.setPrivate();
  return decl;
}
