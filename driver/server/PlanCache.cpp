//===- PlanCache.cpp - Compiled kv programs, once per shape -----*- C++ -*-===//

#include "driver/server/PlanCache.h"

#include "dialects/KV/KVDialect.h"
#include "driver/compiler/Compiler.h"
#include "runtime/core/ModelConfig.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace kvir;
using namespace kvir::serve;

struct PlanCache::Compiler {
  Compiler() : context(makeRegistry(), mlir::MLIRContext::Threading::DISABLED) {
    context.loadDialect<mlir::kv::KVDialect>();
  }
  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    compiler::registerDialects(registry);
    return registry;
  }
  mlir::MLIRContext context;
};

PlanCache::PlanCache(const kvrt_model_config &config, kvrt_kv_dtype dtype,
                     size_t capacity)
    : capacity(capacity ? capacity : 1), compiler(new Compiler()) {
  llvm::raw_string_ostream os(model);
  mlir::Type(mlir::kv::ModelType::get(&compiler->context, config)).print(os);
  cache = "!kv.cache<" + std::to_string(config.n_layers) + "x" +
          std::to_string(config.n_kv_heads) + "x" +
          std::to_string(config.dim / config.n_heads) + "x" +
          kvDtypeName(dtype);
}

PlanCache::~PlanCache() = default;

std::shared_ptr<const Plan> PlanCache::compile(const std::string &program,
                                               std::string &error) {
  std::lock_guard<std::mutex> lock(compileMutex);
  auto start = std::chrono::steady_clock::now();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(
      &compiler->context, [&](mlir::Diagnostic &diag) {
        if (diag.getSeverity() == mlir::DiagnosticSeverity::Error) {
          llvm::raw_string_ostream os(diagnostics);
          os << diag << "\n";
        }
        return mlir::success();
      });
  mlir::OwningOpRef<mlir::ModuleOp> planned =
      compiler::parseProgram(compiler->context, program);
  if (!planned) {
    error = "cannot plan the program: " + diagnostics;
    return nullptr;
  }
  mlir::FailureOr<compiler::CompiledProgram> compiled =
      compiler::compileProgram(std::move(planned), "main",
                               compiler::LowerOptions());
  if (failed(compiled)) {
    error = "cannot compile the program: " + diagnostics;
    return nullptr;
  }
  auto plan = std::make_shared<Plan>();
  plan->manifest = compiled->manifest;
  plan->entry = compiled->entry;
  // The JIT'd code outlives the module, which is dropped here, under the
  // compile lock: modules belong to the shared MLIRContext.
  plan->code = std::shared_ptr<compiler::JitProgram>(std::move(compiled->jit));
  compiled->planned = nullptr;
  plan->compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return plan;
}

std::shared_ptr<const Plan> PlanCache::get(const std::string &program,
                                           bool &compiled, std::string &error) {
  compiled = false;
  std::shared_ptr<Slot> slot;
  {
    std::unique_lock<std::mutex> lock(mutex);
    auto it = slots.find(program);
    if (it != slots.end()) {
      slot = it->second;
      ready.wait(lock, [&] { return slot->done; });
      if (slot->plan) {
        ++hitCount;
        lru.splice(lru.begin(), lru, slot->lru);
        return slot->plan;
      }
      error = slot->error;
      return nullptr;
    }
    slot = std::make_shared<Slot>();
    lru.push_front(program);
    slot->lru = lru.begin();
    slots[program] = slot;
  }
  std::string problem;
  std::shared_ptr<const Plan> plan;
  try {
    plan = compile(program, problem);
  } catch (const std::exception &e) {
    // Whatever happens, the slot is finished: requests wait on it.
    problem = std::string("compiling the plan failed: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(mutex);
  slot->done = true;
  slot->plan = plan;
  slot->error = problem;
  if (!plan) {
    // A program that does not compile is a server bug: say so to every
    // waiter, and try again on the next request.
    lru.erase(slot->lru);
    slots.erase(program);
    ready.notify_all();
    error = problem;
    return nullptr;
  }
  ++compileCount;
  compiled = true;
  ready.notify_all();
  // Beyond the capacity, drop the least recently used plans (a request
  // running one keeps it alive through its shared_ptr).
  while (slots.size() > capacity) {
    const std::string &oldest = lru.back();
    auto victim = slots.find(oldest);
    if (victim == slots.end() || !victim->second->done)
      break;
    slots.erase(victim);
    lru.pop_back();
  }
  return plan;
}

int64_t PlanCache::compiles() const {
  std::lock_guard<std::mutex> lock(mutex);
  return compileCount;
}

int64_t PlanCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex);
  return hitCount;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex);
  return slots.size();
}
