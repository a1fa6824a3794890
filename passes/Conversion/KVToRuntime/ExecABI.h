//===- ExecABI.h - The execution runtime as the conversion sees it -*- C++ -*-//
//
// runtime/exec/ExecABI.def expanded into what convert-kv-to-runtime needs:
// an enum of the functions, and each one's result and parameter types at the
// func level (pointers are !llvm.ptr, forward entry points function values
// that func-to-llvm turns into pointers). ConvertKVToRuntime.cpp calls them
// through `call<ExecFn::NAME>(...)`, which checks the number of operands at
// compile time; the types are checked by func.call's verifier against the
// declaration built from the same list. The thread pool's functions that the
// CPU forward calls (runtime/core/KVParallel.def) are in the same enum,
// called the same way (createExecCall).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_PASSES_CONVERSION_KVTORUNTIME_EXECABI_H
#define KVIR_PASSES_CONVERSION_KVTORUNTIME_EXECABI_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cstddef>

namespace mlir::kv {

/// A type of the exec ABI at the func level.
enum class ExecType { Void, Ptr, I32, I64, F64, Forward };

namespace detail {
#define KVRT_EXEC_RESULT_VOID ExecType::Void
#define KVRT_EXEC_RESULT_I32 ExecType::I32
#define KVRT_EXEC_RESULT_I64 ExecType::I64
#define KVRT_EXEC_RESULT_VIEW ExecType::Ptr
#define KVRT_EXEC_RESULT_TOKENS ExecType::Ptr
#define KVRT_EXEC_RESULT_CTOKENS ExecType::Ptr
#define KVRT_EXEC_RESULT_LOGITS ExecType::Ptr
#define KVRT_EXEC_RESULT_CLOGITS ExecType::Ptr
#define KVRT_EXEC_RESULT_TENSOR ExecType::Ptr
#define KVRT_EXEC_RESULT_CTENSOR ExecType::Ptr

#define CTX(n) ExecType::Ptr
#define SITE(n) ExecType::I32
#define VIEW(n) ExecType::Ptr
#define CVIEW(n) ExecType::Ptr
#define VIEWS(n) ExecType::Ptr
#define VIEW_OUT(n) ExecType::Ptr
#define MODEL(n) ExecType::Ptr
#define CTOKENS(n) ExecType::Ptr
#define CTOKENS_LIST(n) ExecType::Ptr
#define CLOGITS(n) ExecType::Ptr
#define CTENSOR(n) ExecType::Ptr
#define I32S(n) ExecType::Ptr
#define I64S(n) ExecType::Ptr
#define I64_OUT(n) ExecType::Ptr
#define STR(n) ExecType::Ptr
#define STRS(n) ExecType::Ptr
#define I32(n) ExecType::I32
#define I64(n) ExecType::I64
#define F64(n) ExecType::F64
#define PREFILL_FN(n) ExecType::Forward
#define ATTENTION_FN(n) ExecType::Forward
#define MATERIALIZE_FN(n) ExecType::Forward
#define TASK(n) ExecType::Ptr
#define PTR(n) ExecType::Ptr
#define NONE()
// Each function's result, then its parameters (a function without any
// still has an array).
#define KVIR_SIGNATURE(name, result, ...)                                      \
  inline constexpr ExecType signature_##name[] = {KVRT_EXEC_RESULT_##result,   \
                                                  __VA_ARGS__};
#define KVRT_EXEC_FN KVIR_SIGNATURE
#define KVRT_PARALLEL_FN KVIR_SIGNATURE
#include "runtime/core/KVParallel.def"
#include "runtime/exec/ExecABI.def"
#undef KVIR_SIGNATURE
#include "runtime/exec/ExecABIUndef.h"
#undef TASK
#undef PTR
#undef NONE
} // namespace detail

/// The functions of the exec ABI and of the thread pool, by name.
enum class ExecFn {
#define KVIR_NAME(name, result, ...) name,
#define KVRT_EXEC_FN KVIR_NAME
#define KVRT_PARALLEL_FN KVIR_NAME
#include "runtime/core/KVParallel.def"
#include "runtime/exec/ExecABI.def"
#undef KVIR_NAME
};

/// One function of the exec ABI.
struct ExecFunction {
  const char *name;
  ExecType result;
  const ExecType *params;
  size_t arity;
};

inline constexpr ExecFunction kExecFunctions[] = {
#define KVIR_FUNCTION(name, result, ...)                                       \
  {#name, detail::signature_##name[0], detail::signature_##name + 1,           \
   sizeof(detail::signature_##name) / sizeof(ExecType) - 1},
#define KVRT_EXEC_FN KVIR_FUNCTION
#define KVRT_PARALLEL_FN KVIR_FUNCTION
#include "runtime/core/KVParallel.def"
#include "runtime/exec/ExecABI.def"
#undef KVIR_FUNCTION
};

constexpr const ExecFunction &execFunction(ExecFn fn) {
  return kExecFunctions[static_cast<size_t>(fn)];
}

/// The module attribute in which convert-kv-to-runtime lists the location of
/// every site, by site index (runners read it to report a failure at its op).
constexpr llvm::StringLiteral kExecSitesAttrName = "kv.exec_sites";

/// The tensors that cross the exec ABI as runtime handles, as the conversion
/// and the runners that bind entries classify them: token lists (1-D i32),
/// logits ([n][vocab] f32) and attention queries and outputs
/// ([n][heads][head_size] f32).
bool isTokensType(Type type);
bool isLogitsType(Type type);
bool isQueryType(Type type);

/// The type of a forward entry point at the func level: (!llvm.ptr) -> ().
FunctionType getForwardEntryType(MLIRContext *context);

/// The func-level type of `fn`.
FunctionType getExecFunctionType(MLIRContext *context, ExecFn fn);

/// Declares `fn` (private) at the end of `module`.
func::FuncOp declareExecFunction(OpBuilder &builder, ModuleOp module,
                                 ExecFn fn);

/// A call of `F` with `args`: their number is checked at compile time, their
/// types by the call's verifier against the declaration.
template <ExecFn F, typename... Args>
func::CallOp createExecCall(OpBuilder &builder, Location loc, Args... args) {
  static_assert(sizeof...(Args) == execFunction(F).arity,
                "the call does not match its declaration (runtime/exec/"
                "ExecABI.def, runtime/core/KVParallel.def)");
  FunctionType type = getExecFunctionType(builder.getContext(), F);
  return func::CallOp::create(builder, loc, execFunction(F).name,
                              type.getResults(), ValueRange{Value(args)...});
}

} // namespace mlir::kv

#endif // KVIR_PASSES_CONVERSION_KVTORUNTIME_EXECABI_H
