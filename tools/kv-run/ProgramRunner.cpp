//===- ProgramRunner.cpp - Execute kv programs over a backend ---*- C++ -*-===//

#include "tools/kv-run/ProgramRunner.h"

#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"
#include "passes/Analysis/DependencySlice.h"
#include "passes/Passes.h"
#include "runtime/core/ModelCost.h"
#include "runtime/core/SelectiveRecompute.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/reference/Reference.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace kvir;
using namespace kvir::run;

namespace {

constexpr unsigned kMaxCallDepth = 64;

/// A shorthand for the runtime's last error.
std::string lastError() { return kvrt_last_error(); }

kvrt_model_config configOf(const kvrt_model *model) {
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  return config;
}

int64_t kvBytes(const kvrt_model_config &c, int64_t tokens) {
  return ModelCost::of(c).kvBytes(tokens);
}

/// splitmix64, as the synthetic models use.
uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int64_t effectiveStart(const kvrt_run &run) { return run.base_pos + run.delta; }

} // namespace

//===----------------------------------------------------------------------===//
// Values and statistics
//===----------------------------------------------------------------------===//

ViewRef kvir::run::adoptView(kvrt_view *view) {
  return ViewRef(view, [](kvrt_view *v) { kvrt_view_release(v); });
}

RuntimeValue RuntimeValue::ofIndex(int64_t value) {
  RuntimeValue v;
  v.kind = Kind::Index;
  v.index = value;
  return v;
}
RuntimeValue RuntimeValue::ofTokens(std::vector<int32_t> tokens) {
  RuntimeValue v;
  v.kind = Kind::Tokens;
  v.tokens = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  return v;
}
RuntimeValue RuntimeValue::ofCache(ViewRef view) {
  RuntimeValue v;
  v.kind = Kind::Cache;
  v.cache = std::move(view);
  return v;
}
RuntimeValue RuntimeValue::ofModel() {
  RuntimeValue v;
  v.kind = Kind::Model;
  return v;
}

void WorkStats::add(const WorkStats &o) {
  prefillCalls += o.prefillCalls;
  prefillTokens += o.prefillTokens;
  logitsRows += o.logitsRows;
  scanTokens += o.scanTokens;
  flops += o.flops;
  kvBytesWritten += o.kvBytesWritten;
  seconds += o.seconds;
}

int64_t kvir::run::prefillFlops(const kvrt_model_config &config,
                                int64_t context, int64_t n,
                                int64_t logitsRows) {
  return ModelCost::of(config).prefillFlops(context, n, logitsRows);
}

std::vector<int32_t> kvir::run::viewTokens(const kvrt_view *view) {
  std::vector<int32_t> tokens;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) == KVRT_OK)
      tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
  }
  return tokens;
}

bool kvir::run::hasContiguousPositions(const kvrt_view *view) {
  int64_t next = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) != KVRT_OK ||
        effectiveStart(run) != next)
      return false;
    next += run.n_tokens;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

ProgramRunner::ProgramRunner(MLIRContext &context, ComputeBackend &backend,
                             const kvrt_model *model, kvrt_pool *pool)
    : context(context), backend(backend), model(model), pool(pool),
      modelConfig(configOf(model)) {}

void ProgramRunner::registerDialects(DialectRegistry &registry) {
  registry.insert<mlir::kv::KVDialect, func::FuncDialect, arith::ArithDialect,
                  tensor::TensorDialect, ub::UBDialect>();
}

LogicalResult ProgramRunner::loadFile(StringRef path) {
  llvm::SourceMgr sourceMgr;
  std::string included;
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer)
    return emitError(UnknownLoc::get(&context))
           << "cannot read program '" << path
           << "': " << buffer.getError().message();
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), SMLoc());
  program = parseSourceFile<ModuleOp>(sourceMgr, &context);
  return finishLoad();
}

LogicalResult ProgramRunner::loadString(StringRef text, StringRef name) {
  (void)name;
  program = parseSourceString<ModuleOp>(text, &context);
  return finishLoad();
}

LogicalResult ProgramRunner::finishLoad() {
  if (!program)
    return failure();
  // Tag the ops kv-optimize plans, so that what it derives from them is
  // counted as the plan; diagnostics still point at the original location.
  planOps = false;
  program->walk([&](Operation *op) {
    if (isa<mlir::kv::EditOp, mlir::kv::ComposeOp, mlir::kv::LogitsOp>(op)) {
      planOps = true;
      op->setLoc(
          FusedLoc::get(&context, {op->getLoc()},
                        StringAttr::get(&context, mlir::kv::kPlanLocationTag)));
    }
  });
  PassManager pm(&context);
  mlir::kv::buildOptimizePipeline(pm, mlir::kv::OptimizePipelineOptions());
  if (failed(pm.run(*program)))
    return emitError(program->getLoc()) << "kv-optimize failed on the program";
  return success();
}

FailureOr<func::FuncOp> ProgramRunner::lookupEntry(StringRef name) {
  auto entry = program->lookupSymbol<func::FuncOp>(name);
  if (entry && !entry.isExternal())
    return entry;
  std::string names;
  for (auto func : program->getOps<func::FuncOp>())
    names += (names.empty() ? "@" : ", @") + func.getName().str();
  return emitError(program->getLoc())
         << "no function @" << name << " with a body in the program"
         << (names.empty() ? std::string(" (it has none)")
                           : " (functions: " + names + ")");
}

//===----------------------------------------------------------------------===//
// Arguments
//===----------------------------------------------------------------------===//

/// Checks a !kv.model type against the loaded model; names the mismatch.
static LogicalResult checkModelType(Location loc, mlir::kv::ModelType type,
                                    const kvrt_model_config &c,
                                    StringRef what) {
  std::string mismatch;
  auto check = [&](StringRef field, int64_t expected, int64_t actual) {
    if (expected != actual && mismatch.empty())
      mismatch = (field + " = " + Twine(expected) + ", the model has " + field +
                  " = " + Twine(actual))
                     .str();
  };
  check("dim", type.getDim(), c.dim);
  check("hidden", type.getHidden(), c.hidden_dim);
  check("layers", type.getLayers(), c.n_layers);
  check("heads", type.getHeads(), c.n_heads);
  check("kv_heads", type.getKvHeads(), c.n_kv_heads);
  check("vocab", type.getVocab(), c.vocab_size);
  bool interleaved = type.getRope() == mlir::kv::RopeLayout::Interleaved;
  if (mismatch.empty() &&
      interleaved != (c.rope_layout == KVRT_ROPE_INTERLEAVED))
    mismatch =
        std::string("rope = ") + (interleaved ? "interleaved" : "half") +
        ", the model has rope = " +
        (c.rope_layout == KVRT_ROPE_INTERLEAVED ? "interleaved" : "half");
  auto close = [](double a, double b) {
    return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
  };
  if (mismatch.empty() && !close(type.getThetaValue(), c.rope_theta))
    mismatch = "theta = " + std::to_string(type.getThetaValue()) +
               ", the model has theta = " + std::to_string(c.rope_theta);
  if (mismatch.empty() && !close(type.getEpsValue(), c.rms_eps))
    mismatch = "eps = " + std::to_string(type.getEpsValue()) +
               ", the model has eps = " + std::to_string(c.rms_eps);
  if (mismatch.empty())
    return success();
  return emitError(loc) << what << " does not match the loaded model: the "
                        << "program's !kv.model has " << mismatch;
}

FailureOr<std::vector<RuntimeValue>>
ProgramRunner::bindArguments(func::FuncOp entry, const InputOptions &options,
                             std::vector<BoundInput> *bound) {
  std::vector<RuntimeValue> args;
  llvm::StringSet<llvm::MallocAllocator> used;
  Location loc = entry.getLoc();
  for (unsigned i = 0, e = entry.getNumArguments(); i < e; ++i) {
    Type type = entry.getArgument(i).getType();
    std::string position = "arg" + std::to_string(i);
    std::string name = position;
    if (auto attr = entry.getArgAttrOfType<StringAttr>(i, "kv.name"))
      name = attr.getValue().str();
    std::string what = "argument " + position +
                       (name != position ? " (" + name + ")" : "") + " of @" +
                       entry.getName().str();
    if (auto modelType = dyn_cast<mlir::kv::ModelType>(type)) {
      if (failed(checkModelType(loc, modelType, modelConfig, what)))
        return failure();
      args.push_back(RuntimeValue::ofModel());
      if (bound)
        bound->push_back({name, -1, false});
      continue;
    }
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || tensor.getRank() != 1 ||
        !tensor.getElementType().isInteger(32))
      return emitError(loc) << what << " has type " << type
                            << ", which kv-run cannot bind (it binds "
                               "!kv.model and tensor<?xi32>/tensor<Nxi32>)";
    const std::vector<int32_t> *given = nullptr;
    SmallVector<std::string, 2> keys = {name};
    if (name != position)
      keys.push_back(position);
    for (const std::string &key : keys) {
      auto it = options.given.find(key);
      if (it != options.given.end()) {
        if (given)
          return emitError(loc) << what << " is given twice (as " << name
                                << " and " << position << ")";
        given = &it->second;
        used.insert(key);
      }
    }
    std::vector<int32_t> tokens;
    bool synthesized = false;
    if (given) {
      tokens = *given;
    } else if (options.synthesize) {
      int64_t length = options.dynamicLength;
      if (!tensor.isDynamicDim(0))
        length = tensor.getDimSize(0);
      else if (auto hint =
                   entry.getArgAttrOfType<IntegerAttr>(i, "kv.sample_length"))
        length = hint.getInt();
      uint64_t state = options.seed * 0x100000001b3ULL + i;
      for (int64_t t = 0; t < length; ++t)
        tokens.push_back(
            int32_t(splitmix64(state) % uint64_t(modelConfig.vocab_size)));
      synthesized = true;
    } else {
      return emitError(loc)
             << "no input for " << what << " (" << type << "): give --input "
             << name << "=FILE, or --synthesize-inputs";
    }
    if (!tensor.isDynamicDim(0) &&
        int64_t(tokens.size()) != tensor.getDimSize(0))
      return emitError(loc) << what << " has type " << type
                            << ", its input has " << tokens.size() << " tokens";
    for (size_t t = 0; t < tokens.size(); ++t)
      if (tokens[t] < 0 || tokens[t] >= modelConfig.vocab_size)
        return emitError(loc) << "token " << tokens[t] << " at index " << t
                              << " of the input for " << what
                              << " is outside the vocabulary [0, "
                              << modelConfig.vocab_size << ")";
    if (bound)
      bound->push_back({name, int64_t(tokens.size()), synthesized});
    args.push_back(RuntimeValue::ofTokens(std::move(tokens)));
  }
  for (const auto &entryName : options.given)
    if (!used.contains(entryName.getKey()))
      return emitError(loc)
             << "--input " << entryName.getKey() << " names no argument of @"
             << entry.getName() << " (use argN or the argument's kv.name)";
  return args;
}

//===----------------------------------------------------------------------===//
// Execution
//===----------------------------------------------------------------------===//

struct ProgramRunner::Frame {
  DenseMap<Value, RuntimeValue> values;
  DenseSet<Value> planValues;
  bool inPlan = false;
  unsigned depth = 0;
  std::vector<RuntimeValue> results;

  const RuntimeValue &get(Value v) { return values[v]; }
  void set(Value v, RuntimeValue r) { values[v] = std::move(r); }
};

FailureOr<std::vector<RuntimeValue>>
ProgramRunner::run(func::FuncOp entry, ArrayRef<RuntimeValue> args) {
  plan = {};
  setup = {};
  repairStats.clear();
  return call(entry, args, /*inPlan=*/!planOps, 0);
}

FailureOr<std::vector<RuntimeValue>>
ProgramRunner::call(func::FuncOp callee, ArrayRef<RuntimeValue> args,
                    bool inPlan, unsigned depth) {
  if (depth > kMaxCallDepth)
    return emitError(callee.getLoc())
           << "calls nest deeper than " << kMaxCallDepth << " (recursion?)";
  if (callee.isExternal())
    return emitError(callee.getLoc())
           << "@" << callee.getName() << " has no body to execute";
  if (!callee.getBody().hasOneBlock())
    return emitError(callee.getLoc())
           << "kv-run executes functions of one block; @" << callee.getName()
           << " has " << callee.getBody().getBlocks().size();
  Frame frame;
  frame.inPlan = inPlan;
  frame.depth = depth;
  Block &body = callee.getBody().front();
  for (auto [arg, value] : llvm::zip(body.getArguments(), args))
    frame.set(arg, value);
  for (Operation &op : body) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      std::vector<RuntimeValue> results;
      for (Value v : ret.getOperands())
        results.push_back(frame.get(v));
      return results;
    }
    if (failed(execute(&op, frame)))
      return failure();
  }
  return emitError(callee.getLoc())
         << "@" << callee.getName() << " ends without func.return";
}

/// Integer arithmetic on index-like values.
static FailureOr<int64_t> evalBinary(Operation *op, int64_t a, int64_t b) {
  return llvm::TypeSwitch<Operation *, FailureOr<int64_t>>(op)
      .Case([&](arith::AddIOp) -> FailureOr<int64_t> { return a + b; })
      .Case([&](arith::SubIOp) -> FailureOr<int64_t> { return a - b; })
      .Case([&](arith::MulIOp) -> FailureOr<int64_t> { return a * b; })
      .Case(
          [&](arith::MinSIOp) -> FailureOr<int64_t> { return std::min(a, b); })
      .Case(
          [&](arith::MaxSIOp) -> FailureOr<int64_t> { return std::max(a, b); })
      .Case([&](arith::MinUIOp) -> FailureOr<int64_t> {
        return int64_t(std::min(uint64_t(a), uint64_t(b)));
      })
      .Case([&](arith::MaxUIOp) -> FailureOr<int64_t> {
        return int64_t(std::max(uint64_t(a), uint64_t(b)));
      })
      .Case<arith::DivSIOp, arith::FloorDivSIOp, arith::CeilDivSIOp,
            arith::RemSIOp>([&](Operation *o) -> FailureOr<int64_t> {
        if (b == 0) {
          emitError(o->getLoc()) << "division by zero";
          return failure();
        }
        if (isa<arith::RemSIOp>(o))
          return a % b;
        int64_t q = a / b, r = a % b;
        if (isa<arith::FloorDivSIOp>(o) && r != 0 && ((r < 0) != (b < 0)))
          --q;
        if (isa<arith::CeilDivSIOp>(o) && r != 0 && ((r < 0) == (b < 0)))
          ++q;
        return q;
      })
      .Default([](Operation *) -> FailureOr<int64_t> { return failure(); });
}

LogicalResult ProgramRunner::execute(Operation *op, Frame &frame) {
  bool opInPlan = frame.inPlan || mlir::kv::isPlanLocation(op->getLoc()) ||
                  llvm::any_of(op->getOperands(), [&](Value v) {
                    return frame.planValues.contains(v);
                  });
  if (opInPlan)
    for (Value result : op->getResults())
      frame.planValues.insert(result);
  WorkStats &work = opInPlan ? plan : setup;
  auto start = std::chrono::steady_clock::now();
  auto done = [&](LogicalResult result) {
    work.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return result;
  };
  auto index = [&](Value v) { return frame.get(v).index; };

  if (op->getNumRegions() != 0 && !isa<mlir::kv::ContextOp>(op))
    return emitError(op->getLoc()) << "kv-run cannot execute '" << op->getName()
                                   << "': ops with regions are not supported";

  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    Attribute value = constant.getValue();
    if (auto integer = dyn_cast<IntegerAttr>(value)) {
      frame.set(constant, RuntimeValue::ofIndex(integer.getInt()));
      return done(success());
    }
    if (auto dense = dyn_cast<DenseIntElementsAttr>(value)) {
      auto type = cast<ShapedType>(dense.getType());
      if (type.getRank() == 1 && type.getElementType().isInteger(32)) {
        std::vector<int32_t> tokens;
        for (const APInt &v : dense.getValues<APInt>())
          tokens.push_back(int32_t(v.getSExtValue()));
        for (size_t t = 0; t < tokens.size(); ++t)
          if (tokens[t] < 0 || tokens[t] >= modelConfig.vocab_size)
            return emitError(op->getLoc())
                   << "token " << tokens[t] << " at index " << t
                   << " is outside the vocabulary [0, "
                   << modelConfig.vocab_size << ")";
        frame.set(constant, RuntimeValue::ofTokens(std::move(tokens)));
        return done(success());
      }
    }
    return emitError(op->getLoc())
           << "kv-run cannot execute a constant of type " << constant.getType()
           << " (it supports integers, index and 1-D i32 token tensors)";
  }
  if (op->getNumOperands() == 2 && op->getNumResults() == 1 &&
      op->getDialect() && isa<arith::ArithDialect>(op->getDialect())) {
    FailureOr<int64_t> value =
        evalBinary(op, index(op->getOperand(0)), index(op->getOperand(1)));
    if (succeeded(value)) {
      frame.set(op->getResult(0), RuntimeValue::ofIndex(*value));
      return done(success());
    }
  }
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp,
          arith::ExtUIOp, arith::TruncIOp>(op)) {
    frame.set(op->getResult(0),
              RuntimeValue::ofIndex(index(op->getOperand(0))));
    return done(success());
  }
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    int64_t a = index(cmp.getLhs()), b = index(cmp.getRhs());
    bool r = false;
    switch (cmp.getPredicate()) {
    case arith::CmpIPredicate::eq:
      r = a == b;
      break;
    case arith::CmpIPredicate::ne:
      r = a != b;
      break;
    case arith::CmpIPredicate::slt:
      r = a < b;
      break;
    case arith::CmpIPredicate::sle:
      r = a <= b;
      break;
    case arith::CmpIPredicate::sgt:
      r = a > b;
      break;
    case arith::CmpIPredicate::sge:
      r = a >= b;
      break;
    case arith::CmpIPredicate::ult:
      r = uint64_t(a) < uint64_t(b);
      break;
    case arith::CmpIPredicate::ule:
      r = uint64_t(a) <= uint64_t(b);
      break;
    case arith::CmpIPredicate::ugt:
      r = uint64_t(a) > uint64_t(b);
      break;
    case arith::CmpIPredicate::uge:
      r = uint64_t(a) >= uint64_t(b);
      break;
    }
    frame.set(cmp, RuntimeValue::ofIndex(r));
    return done(success());
  }
  if (auto select = dyn_cast<arith::SelectOp>(op)) {
    if (!select.getCondition().getType().isInteger(1))
      return emitError(op->getLoc()) << "kv-run selects on i1 conditions only";
    frame.set(select,
              frame.get(index(select.getCondition()) ? select.getTrueValue()
                                                     : select.getFalseValue()));
    return done(success());
  }
  if (auto dim = dyn_cast<tensor::DimOp>(op)) {
    const RuntimeValue &source = frame.get(dim.getSource());
    int64_t which = index(dim.getIndex());
    int64_t size = -1;
    if (source.kind == RuntimeValue::Kind::Tokens && which == 0)
      size = source.tokens->size();
    else if (source.kind == RuntimeValue::Kind::Logits && which == 0)
      size = source.logits->rows;
    else if (source.kind == RuntimeValue::Kind::Logits && which == 1)
      size = source.logits->vocab;
    if (size < 0)
      return emitError(op->getLoc())
             << "tensor.dim: dimension " << which << " is out of range";
    frame.set(dim, RuntimeValue::ofIndex(size));
    return done(success());
  }
  if (auto cast = dyn_cast<tensor::CastOp>(op)) {
    const RuntimeValue &source = frame.get(cast.getSource());
    auto type = cast.getType();
    SmallVector<int64_t> shape;
    if (source.kind == RuntimeValue::Kind::Tokens)
      shape = {int64_t(source.tokens->size())};
    else if (source.kind == RuntimeValue::Kind::Logits)
      shape = {source.logits->rows, source.logits->vocab};
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      for (auto [i, size] : llvm::enumerate(ranked.getShape()))
        if (!ShapedType::isDynamic(size) &&
            (i >= shape.size() || shape[i] != size))
          return emitError(op->getLoc())
                 << "tensor.cast to " << type << ": the value has "
                 << (i < shape.size() ? shape[i] : 0) << " in dimension " << i;
    frame.set(cast, source);
    return done(success());
  }
  if (auto empty = dyn_cast<tensor::EmptyOp>(op)) {
    auto type = empty.getType();
    if (type.getRank() != 1 || !type.getElementType().isInteger(32))
      return emitError(op->getLoc())
             << "kv-run supports tensor.empty of 1-D i32 tokens only, not "
             << type;
    int64_t size = type.isDynamicDim(0) ? index(empty.getDynamicSizes()[0])
                                        : type.getDimSize(0);
    if (size != 0)
      return emitError(op->getLoc())
             << "tensor.empty of " << size
             << " tokens has undefined contents; kv-run only runs empty ones";
    frame.set(empty, RuntimeValue::ofTokens({}));
    return done(success());
  }
  if (auto callOp = dyn_cast<func::CallOp>(op)) {
    auto callee = program->lookupSymbol<func::FuncOp>(callOp.getCallee());
    if (!callee)
      return emitError(op->getLoc())
             << "no function @" << callOp.getCallee() << " to call";
    std::vector<RuntimeValue> args;
    for (Value v : callOp.getOperands())
      args.push_back(frame.get(v));
    // The callee's own ops are timed and counted; only this op's bookkeeping
    // is not.
    FailureOr<std::vector<RuntimeValue>> results =
        call(callee, args, opInPlan, frame.depth + 1);
    if (failed(results))
      return failure();
    for (auto [result, value] : llvm::zip(callOp.getResults(), *results))
      frame.set(result, value);
    return success();
  }
  if (isa<mlir::kv::ContextOp>(op))
    return success();
  if (op->getDialect() && isa<mlir::kv::KVDialect>(op->getDialect()))
    return done(executeKV(op, frame, work));
  return emitError(op->getLoc())
         << "kv-run cannot execute '" << op->getName() << "'";
}

/// The view of a prefill's view list: every entry shifted by its offset.
static FailureOr<ViewRef> combineViews(Operation *op, ArrayRef<ViewRef> views,
                                       ArrayRef<int64_t> offsets) {
  ViewRef acc;
  for (size_t i = 0; i < views.size(); ++i) {
    ViewRef piece = views[i];
    if (!offsets.empty() && offsets[i] != 0) {
      kvrt_view *shifted = nullptr;
      if (kvrt_view_shift(piece.get(), offsets[i], &shifted))
        return emitError(op->getLoc()) << "cannot shift view " << i << " by "
                                       << offsets[i] << ": " << lastError();
      piece = adoptView(shifted);
    }
    if (!acc) {
      acc = piece;
      continue;
    }
    kvrt_view *joined = nullptr;
    if (kvrt_view_concat(acc.get(), piece.get(), &joined))
      return emitError(op->getLoc())
             << "cannot concatenate views: " << lastError();
    acc = adoptView(joined);
  }
  return acc;
}

static int64_t endPosition(const kvrt_view *view) {
  int64_t n = kvrt_view_num_runs(view);
  if (n == 0)
    return 0;
  kvrt_run run;
  kvrt_view_get_run(view, n - 1, &run);
  return effectiveStart(run) + run.n_tokens;
}

static int64_t startPosition(const kvrt_view *view) {
  if (kvrt_view_num_runs(view) == 0)
    return 0;
  kvrt_run run;
  kvrt_view_get_run(view, 0, &run);
  return effectiveStart(run);
}

LogicalResult ProgramRunner::executeKV(Operation *op, Frame &frame,
                                       WorkStats &work) {
  Location loc = op->getLoc();
  auto cacheOf = [&](Value v) { return frame.get(v).cache; };
  auto index = [&](Value v) { return frame.get(v).index; };
  auto checkCacheType = [&](Type type) -> LogicalResult {
    auto cache = dyn_cast<mlir::kv::CacheType>(type);
    int64_t headSize = modelConfig.dim / modelConfig.n_heads;
    if (cache &&
        (cache.getLayers() != modelConfig.n_layers ||
         cache.getKvHeads() != modelConfig.n_kv_heads ||
         cache.getHeadSize() != headSize || !cache.getElementType().isF32()))
      return emitError(loc)
             << "cache type " << type << " does not match the loaded model ("
             << modelConfig.n_layers << "x" << modelConfig.n_kv_heads << "x"
             << headSize << "xf32)";
    return success();
  };

  if (auto empty = dyn_cast<mlir::kv::EmptyOp>(op)) {
    if (failed(checkCacheType(empty.getType())))
      return failure();
    kvrt_view *view = nullptr;
    if (kvrt_view_create(pool, &view))
      return emitError(loc) << "cannot create a view: " << lastError();
    frame.set(empty, RuntimeValue::ofCache(adoptView(view)));
    return success();
  }
  if (auto prefill = dyn_cast<mlir::kv::PrefillOp>(op)) {
    if (failed(checkCacheType(prefill.getResult().getType())))
      return failure();
    SmallVector<ViewRef> views;
    SmallVector<int64_t> offsets;
    for (Value v : prefill.getViews())
      views.push_back(cacheOf(v));
    for (Value v : prefill.getOffsets())
      offsets.push_back(index(v));
    FailureOr<ViewRef> context = combineViews(op, views, offsets);
    if (failed(context))
      return failure();
    const std::vector<int32_t> &tokens = *frame.get(prefill.getTokens()).tokens;
    int64_t n = tokens.size();
    int64_t position = prefill.getPosition() ? index(prefill.getPosition())
                                             : endPosition(context->get());
    bool lastOnly = prefill.getLast();
    auto logits = std::make_shared<Logits>();
    logits->vocab = modelConfig.vocab_size;
    logits->context = *context;
    logits->tokens = tokens;
    logits->position = position;
    logits->lastOnly = lastOnly;
    auto logitsType = cast<RankedTensorType>(prefill.getLogits().getType());
    if (!logitsType.isDynamicDim(1) &&
        logitsType.getDimSize(1) != modelConfig.vocab_size)
      return emitError(loc) << "logits type " << logitsType
                            << " does not match the model's vocabulary of "
                            << modelConfig.vocab_size;
    if (n == 0) {
      // Nothing to compute: the view unchanged, no rows.
      logits->result = *context;
    } else {
      std::optional<std::string> label;
      if (auto segment = prefill.getSegment())
        label = segment->str();
      kvrt_view *out = nullptr;
      int64_t contextTokens = kvrt_view_num_tokens(context->get());
      if (backend.prefill(model, context->get(), tokens.data(), n, position,
                          label ? label->c_str() : nullptr, lastOnly,
                          &logits->data, &out))
        return emitError(loc) << "prefill of " << n << " tokens at position "
                              << position << " failed: " << lastError();
      logits->result = adoptView(out);
      logits->rows = lastOnly ? 1 : n;
      ++work.prefillCalls;
      work.prefillTokens += n;
      work.logitsRows += logits->rows;
      work.flops += prefillFlops(modelConfig, contextTokens, n, logits->rows);
      work.kvBytesWritten += kvBytes(modelConfig, n);
    }
    if (!logitsType.isDynamicDim(0) && logitsType.getDimSize(0) != logits->rows)
      return emitError(loc) << "logits type " << logitsType << " expects "
                            << logitsType.getDimSize(0) << " rows, the prefill "
                            << "computed " << logits->rows;
    frame.set(prefill.getResult(), RuntimeValue::ofCache(logits->result));
    RuntimeValue value;
    value.kind = RuntimeValue::Kind::Logits;
    value.logits = std::move(logits);
    frame.set(prefill.getLogits(), value);
    return success();
  }
  if (auto slice = dyn_cast<mlir::kv::SliceOp>(op)) {
    kvrt_view *out = nullptr;
    int64_t begin = index(slice.getBegin()), end = index(slice.getEnd());
    if (kvrt_view_slice(cacheOf(slice.getCache()).get(), begin, end, &out))
      return emitError(loc) << "slice [" << begin << ", " << end
                            << ") failed: " << lastError();
    frame.set(slice, RuntimeValue::ofCache(adoptView(out)));
    return success();
  }
  if (auto concat = dyn_cast<mlir::kv::ConcatOp>(op)) {
    SmallVector<ViewRef> views;
    for (Value v : concat.getInputs())
      views.push_back(cacheOf(v));
    if (views.empty()) {
      kvrt_view *view = nullptr;
      if (kvrt_view_create(pool, &view))
        return emitError(loc) << "cannot create a view: " << lastError();
      frame.set(concat, RuntimeValue::ofCache(adoptView(view)));
      return success();
    }
    FailureOr<ViewRef> joined = combineViews(op, views, {});
    if (failed(joined))
      return failure();
    frame.set(concat, RuntimeValue::ofCache(*joined));
    return success();
  }
  if (auto shift = dyn_cast<mlir::kv::RopeShiftOp>(op)) {
    kvrt_view *out = nullptr;
    int64_t delta = index(shift.getDelta());
    if (kvrt_view_shift(cacheOf(shift.getCache()).get(), delta, &out))
      return emitError(loc)
             << "rope shift by " << delta << " failed: " << lastError();
    frame.set(shift, RuntimeValue::ofCache(adoptView(out)));
    return success();
  }
  if (auto bounds = dyn_cast<mlir::kv::SegmentBoundsOp>(op)) {
    const kvrt_view *view = cacheOf(bounds.getCache()).get();
    StringRef name = bounds.getSegment();
    int64_t begin = 0, end = 0;
    if (kvrt_view_segment_bounds(view, name.str().c_str(), &begin, &end))
      return emitError(loc) << kvrt_last_error();
    frame.set(bounds.getBegin(), RuntimeValue::ofIndex(begin));
    frame.set(bounds.getEnd(), RuntimeValue::ofIndex(end));
    return success();
  }
  if (auto tokensOp = dyn_cast<mlir::kv::TokensOp>(op)) {
    std::vector<int32_t> tokens =
        viewTokens(cacheOf(tokensOp.getCache()).get());
    auto type = cast<RankedTensorType>(tokensOp.getType());
    if (!type.isDynamicDim(0) && type.getDimSize(0) != int64_t(tokens.size()))
      return emitError(loc) << "the view holds " << tokens.size()
                            << " tokens, the result type is " << type;
    frame.set(tokensOp, RuntimeValue::ofTokens(std::move(tokens)));
    return success();
  }
  if (auto length = dyn_cast<mlir::kv::LengthOp>(op)) {
    frame.set(length, RuntimeValue::ofIndex(kvrt_view_num_tokens(
                          cacheOf(length.getCache()).get())));
    return success();
  }
  if (auto start = dyn_cast<mlir::kv::StartPositionOp>(op)) {
    frame.set(start, RuntimeValue::ofIndex(
                         startPosition(cacheOf(start.getCache()).get())));
    return success();
  }
  if (auto end = dyn_cast<mlir::kv::EndPositionOp>(op)) {
    frame.set(
        end, RuntimeValue::ofIndex(endPosition(cacheOf(end.getCache()).get())));
    return success();
  }
  if (auto repair = dyn_cast<mlir::kv::SelectiveRecomputeOp>(op)) {
    int64_t begin = index(repair.getBegin()), end = index(repair.getEnd());
    SelectiveRecomputeStats stats;
    kvrt_view *out = nullptr;
    double fraction = repair.getFraction().convertToDouble();
    if (selectiveRecompute(backend, model, cacheOf(repair.getCache()).get(),
                           begin, end, fraction, &out, &stats))
      return emitError(loc) << "selective recompute of [" << begin << ", "
                            << end << ") failed: " << lastError();
    ModelCost cost = ModelCost::of(modelConfig);
    for (const SelectiveRecomputeStats::Call &c : stats.calls) {
      if (c.scan) {
        work.scanTokens += c.tokens;
        work.flops += cost.partialRangeFlops(
            c.contextTokens, c.contextTokens + c.tokens, c.layers);
        continue;
      }
      ++work.prefillCalls;
      work.prefillTokens += c.tokens;
      work.logitsRows += 1;
      work.flops += prefillFlops(modelConfig, c.contextTokens, c.tokens, 1);
      work.kvBytesWritten += kvBytes(modelConfig, c.tokens);
    }
    repairStats.push_back({stats.candidates, int64_t(stats.chosen.size())});
    frame.set(repair, RuntimeValue::ofCache(adoptView(out)));
    return success();
  }
  if (auto materialize = dyn_cast<mlir::kv::MaterializeOp>(op)) {
    if (StringRef(backend.name()) != "reference")
      return emitError(loc) << "kv.materialize is implemented by the reference "
                               "backend only, not by '"
                            << backend.name() << "'";
    kvrt_view *out = nullptr;
    const kvrt_view *view = cacheOf(materialize.getCache()).get();
    if (kvir::reference::materialize(model, view, &out))
      return emitError(loc) << "materialize failed: " << lastError();
    frame.set(materialize, RuntimeValue::ofCache(adoptView(out)));
    return success();
  }
  return emitError(loc) << "kv-run cannot execute '" << op->getName()
                        << "' (kv-optimize should have planned it into "
                           "primitives)";
}

//===----------------------------------------------------------------------===//
// Comparisons
//===----------------------------------------------------------------------===//

std::unique_ptr<ComputeBackend>
kvir::run::createBackend(StringRef name, const kvrt_model *model,
                         std::string &error) {
  if (name == "reference")
    return createReferenceBackend();
  std::unique_ptr<ComputeBackend> backend;
  if (name == "cpu")
    backend = cpu::createCpuBackend(model, &error);
  else if (name == "cuda")
    backend = cuda::createCudaBackend(model, &error);
  else {
    error = "unknown backend '" + name.str() +
            "' (available: reference, cpu, cuda)";
    return nullptr;
  }
  if (!backend)
    error = "cannot create the " + name.str() + " backend: " + error;
  return backend;
  return nullptr;
}

LogicalResult kvir::run::fullPrefill(ComputeBackend &backend,
                                     const kvrt_model *model, kvrt_pool *pool,
                                     const std::vector<int32_t> &tokens,
                                     int64_t rows, Logits &out, WorkStats &work,
                                     std::string &error) {
  int64_t n = tokens.size();
  if (n == 0 || rows < 1 || rows > n) {
    error = "full prefill needs 1 <= rows <= tokens (" + std::to_string(rows) +
            " rows of " + std::to_string(n) + " tokens)";
    return failure();
  }
  kvrt_model_config config = configOf(model);
  auto start = std::chrono::steady_clock::now();
  kvrt_view *empty = nullptr;
  if (kvrt_view_create(pool, &empty)) {
    error = lastError();
    return failure();
  }
  ViewRef view = adoptView(empty);
  out = Logits();
  out.vocab = config.vocab_size;
  int64_t head = n - rows;
  std::vector<float> scratch;
  if (head > 0) {
    kvrt_view *next = nullptr;
    if (backend.prefill(model, view.get(), tokens.data(), head, 0, nullptr,
                        /*lastOnly=*/true, &scratch, &next)) {
      error = "full prefill: " + lastError();
      return failure();
    }
    view = adoptView(next);
    ++work.prefillCalls;
    work.logitsRows += 1;
    work.flops += prefillFlops(config, 0, head, 0);
  }
  out.context = view;
  kvrt_view *next = nullptr;
  if (backend.prefill(model, view.get(), tokens.data() + head, rows, head,
                      nullptr, rows == 1, &out.data, &next)) {
    error = "full prefill: " + lastError();
    return failure();
  }
  out.result = adoptView(next);
  out.rows = rows;
  out.tokens.assign(tokens.begin() + head, tokens.end());
  out.position = head;
  out.lastOnly = rows == 1;
  ++work.prefillCalls;
  work.prefillTokens += n;
  // Like with like: the logits of the compared rows only (the head's one
  // extra row is not counted).
  work.logitsRows += rows;
  work.flops += prefillFlops(config, head, rows, rows);
  work.kvBytesWritten += kvBytes(config, n);
  work.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return success();
}

LogicalResult kvir::run::greedyContinue(ComputeBackend &backend,
                                        const kvrt_model *model,
                                        const Logits &logits, ViewRef cache,
                                        int64_t n, std::vector<int32_t> &out,
                                        std::string &error) {
  out.clear();
  if (logits.rows == 0) {
    error = "no logits to continue from";
    return failure();
  }
  std::vector<float> row(logits.data.end() - logits.vocab, logits.data.end());
  int64_t position = endPosition(cache.get());
  for (int64_t i = 0; i < n; ++i) {
    int32_t next =
        int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(next);
    if (i + 1 == n)
      break;
    kvrt_view *view = nullptr;
    if (backend.prefill(model, cache.get(), &next, 1, position, nullptr, true,
                        &row, &view)) {
      error = "greedy continuation: " + lastError();
      return failure();
    }
    cache = adoptView(view);
    ++position;
  }
  return success();
}

Fidelity kvir::run::compareLogits(const float *approx, const float *full,
                                  int64_t rows, int64_t vocab) {
  Fidelity f;
  f.rows = rows;
  if (rows == 0)
    return f;
  f.cosineMin = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float *a = approx + r * vocab, *b = full + r * vocab;
    double dot = 0, na = 0, nb = 0, maxA = -INFINITY, maxB = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) {
      dot += double(a[i]) * b[i];
      na += double(a[i]) * a[i];
      nb += double(b[i]) * b[i];
      maxA = std::max(maxA, double(a[i]));
      maxB = std::max(maxB, double(b[i]));
      f.maxAbsDiff = std::max(f.maxAbsDiff, std::fabs(double(a[i]) - b[i]));
    }
    double cosine = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
    f.cosineMin = std::min(f.cosineMin, cosine);
    f.cosineMean += cosine / rows;
    // log-softmax of both, then KL(full || approx).
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      sa += std::exp(a[i] - maxA);
      sb += std::exp(b[i] - maxB);
    }
    double lseA = maxA + std::log(sa), lseB = maxB + std::log(sb), kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      double lb = b[i] - lseB, la = a[i] - lseA;
      kl += std::exp(lb) * (lb - la);
    }
    kl = std::max(kl, 0.0);
    f.klMean += kl / rows;
    f.klMax = std::max(f.klMax, kl);
    if (std::max_element(a, a + vocab) - a ==
        std::max_element(b, b + vocab) - b)
      ++f.top1Agree;
  }
  return f;
}

std::vector<int32_t> kvir::run::topK(const float *row, int64_t vocab,
                                     int64_t k) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) {
                      return row[a] > row[b] || (row[a] == row[b] && a < b);
                    });
  order.resize(k);
  return order;
}
