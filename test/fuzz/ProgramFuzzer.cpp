//===- ProgramFuzzer.cpp - Fuzzes kv IR through planning and lowering -----===//
//
// An input is the text of a kv program. It is parsed and verified, planned
// (kv-optimize), every public function with a body is described as an entry
// (what kv-run does before running it), and the module is lowered to the
// LLVM dialect (kv-lower-to-cpu) and verified again. Properties: no crash or
// leak anywhere; every failure comes with an error diagnostic; what lowers,
// verifies. KVIR_FUZZ_VERBOSE=1 prints the diagnostics.
//
// The mutator is structure-aware: an input that parses is mutated as IR
// (an integer, float or symbol inside an attribute, operands swapped or
// replaced, an op erased or duplicated) or as kv text (a keyword replaced by
// another of its class: strategies, repair kinds, segment kinds, RoPE
// layouts, element types; a number replaced by an interesting one), and is
// printed back; byte-level mutations of libFuzzer are kept for a quarter of
// the inputs and for text that does not parse.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/Compiler.h"
#include "driver/compiler/ParserGuard.h"
#include "test/fuzz/FuzzSupport.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

using namespace mlir;
using kvir::fuzz::fail;

// Defined by libFuzzer; the replay driver never calls the mutator.
extern "C" __attribute__((weak)) size_t
LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

/// The context every input is parsed in, recreated now and then so that
/// uniqued attributes and types do not pile up over a long run.
struct FuzzContext {
  std::unique_ptr<MLIRContext> context;
  int uses = 0;
  int errors = 0;

  MLIRContext &get() {
    if (!context || ++uses > 2000) {
      DialectRegistry registry;
      kvir::compiler::registerDialects(registry);
      context = std::make_unique<MLIRContext>(registry);
      context->disableMultithreading();
      context->loadAllAvailableDialects();
      bool verbose = std::getenv("KVIR_FUZZ_VERBOSE") != nullptr;
      context->getDiagEngine().registerHandler([this, verbose](Diagnostic &d) {
        if (d.getSeverity() == DiagnosticSeverity::Error)
          ++errors;
        if (verbose)
          llvm::errs() << d.getLocation() << ": " << d.str() << "\n";
        return success();
      });
      uses = 0;
    }
    return *context;
  }
};

FuzzContext fuzzContext;

/// A failed step must have said why.
void expectDiagnostic(int errorsBefore, const char *step) {
  if (fuzzContext.errors == errorsBefore)
    fail(std::string(step) + " failed without an error diagnostic");
}

//===----------------------------------------------------------------------===//
// The structure-aware mutator
//===----------------------------------------------------------------------===//

using Rng = std::mt19937_64;

int64_t interestingInt(Rng &rng, int64_t current) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   7,
                                   8,
                                   16,
                                   63,
                                   64,
                                   255,
                                   256,
                                   511,
                                   512,
                                   4096,
                                   int64_t(1) << 20,
                                   std::numeric_limits<int32_t>::max(),
                                   std::numeric_limits<int32_t>::min(),
                                   int64_t(1) << 62,
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min()};
  switch (rng() % 4) {
  case 0:
    return current + 1;
  case 1:
    return current - 1;
  default:
    return values[rng() % (sizeof(values) / sizeof(values[0]))];
  }
}

double interestingFloat(Rng &rng) {
  static const double values[] = {0.0,
                                  -1.0,
                                  1.0,
                                  0.5,
                                  1e-30,
                                  1e30,
                                  std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN()};
  return values[rng() % (sizeof(values) / sizeof(values[0]))];
}

/// `attr` with one leaf inside it (an integer, a float, a symbol) changed,
/// or an array element dropped or repeated; `attr` itself when it has no
/// such leaf.
Attribute mutateAttr(Attribute attr, Rng &rng,
                     const std::vector<std::string> &symbols) {
  MLIRContext *ctx = attr.getContext();
  if (auto integer = dyn_cast<IntegerAttr>(attr)) {
    if (!integer.getType().isIntOrIndex())
      return attr;
    unsigned width = integer.getType().isIndex()
                         ? 64
                         : integer.getType().getIntOrFloatBitWidth();
    int64_t current = width == 1 ? integer.getValue().getZExtValue()
                                 : integer.getValue().getSExtValue();
    llvm::APInt value(width,
                      static_cast<uint64_t>(interestingInt(rng, current)),
                      /*isSigned=*/true, /*implicitTrunc=*/true);
    return IntegerAttr::get(integer.getType(), value);
  }
  if (auto real = dyn_cast<FloatAttr>(attr))
    return FloatAttr::get(real.getType(), interestingFloat(rng));
  if (isa<FlatSymbolRefAttr>(attr) && !symbols.empty())
    return FlatSymbolRefAttr::get(ctx, symbols[rng() % symbols.size()]);
  if (auto array = dyn_cast<ArrayAttr>(attr)) {
    std::vector<Attribute> elements(array.begin(), array.end());
    if (elements.empty())
      return attr;
    size_t i = rng() % elements.size();
    switch (rng() % 4) {
    case 0:
      elements.erase(elements.begin() + i);
      break;
    case 1:
      elements.insert(elements.begin() + i, elements[i]);
      break;
    default:
      elements[i] = mutateAttr(elements[i], rng, symbols);
    }
    return ArrayAttr::get(ctx, elements);
  }
  if (auto dict = dyn_cast<DictionaryAttr>(attr)) {
    std::vector<NamedAttribute> entries(dict.begin(), dict.end());
    if (entries.empty())
      return attr;
    NamedAttribute &entry = entries[rng() % entries.size()];
    entry.setValue(mutateAttr(entry.getValue(), rng, symbols));
    return DictionaryAttr::get(ctx, entries);
  }
  return attr;
}

/// One IR-level mutation of `module`; false when the chosen kind had nothing
/// to work on.
bool mutateModule(ModuleOp module, Rng &rng) {
  std::vector<Operation *> ops;
  std::vector<std::string> symbols = {"nowhere"};
  module->walk([&](Operation *op) {
    if (op == module.getOperation())
      return;
    ops.push_back(op);
    if (auto name =
            op->getAttrOfType<StringAttr>(SymbolTable::getSymbolAttrName()))
      symbols.push_back(name.str());
  });
  if (ops.empty())
    return false;
  Operation *op = ops[rng() % ops.size()];
  switch (rng() % 5) {
  case 0:
  case 1: { // an attribute
    auto attrs = op->getAttrDictionary().getValue();
    if (attrs.empty())
      return false;
    NamedAttribute chosen = attrs[rng() % attrs.size()];
    op->setAttr(chosen.getName(), mutateAttr(chosen.getValue(), rng, symbols));
    return true;
  }
  case 2: { // swap two operands of one type, or replace one
    unsigned n = op->getNumOperands();
    if (n == 0)
      return false;
    unsigned i = rng() % n;
    Value from = op->getOperand(i);
    std::vector<Value> candidates;
    for (Operation *other : ops)
      for (Value result : other->getResults())
        if (result.getType() == from.getType() && result != from)
          candidates.push_back(result);
    for (unsigned j = 0; j < n; ++j)
      if (j != i && op->getOperand(j).getType() == from.getType())
        candidates.push_back(op->getOperand(j));
    if (candidates.empty())
      return false;
    op->setOperand(i, candidates[rng() % candidates.size()]);
    return true;
  }
  case 3: { // erase an op whose results are unused
    if (op->hasTrait<OpTrait::IsTerminator>() || !op->use_empty())
      return false;
    op->erase();
    return true;
  }
  default: { // repeat an op right after itself
    if (op->hasTrait<OpTrait::IsTerminator>())
      return false;
    OpBuilder builder(op->getContext());
    builder.setInsertionPointAfter(op);
    builder.clone(*op);
    return true;
  }
  }
}

/// Classes of interchangeable kv keywords.
const std::vector<std::vector<std::string>> &keywordClasses() {
  static const std::vector<std::vector<std::string>> classes = {
      {"exact", "cot_slice", "erratum"},
      {"first_k", "fraction", "deviation"},
      {"system", "user", "history", "tool", "skill", "document", "fact",
       "thought", "answer", "correction", "other"},
      {"interleaved", "half"},
      {"f32", "f16", "bf16", "i32", "i64", "index"},
      {"kv.prefill", "kv.edit", "kv.compose", "kv.logits", "kv.slice",
       "kv.rope_shift", "kv.materialize", "kv.attention"}};
  return classes;
}

/// One text-level mutation of `text`: a keyword or a number replaced.
bool mutateText(std::string &text, Rng &rng) {
  if (rng() % 2) {
    const auto &classes = keywordClasses();
    const auto &cls = classes[rng() % classes.size()];
    const std::string &from = cls[rng() % cls.size()];
    std::vector<size_t> at;
    for (size_t p = text.find(from); p != std::string::npos;
         p = text.find(from, p + 1))
      at.push_back(p);
    if (at.empty())
      return false;
    text.replace(at[rng() % at.size()], from.size(), cls[rng() % cls.size()]);
    return true;
  }
  std::vector<std::pair<size_t, size_t>> numbers;
  for (size_t p = 0; p < text.size();) {
    if (!std::isdigit(static_cast<unsigned char>(text[p]))) {
      ++p;
      continue;
    }
    size_t end = p;
    while (end < text.size() &&
           std::isdigit(static_cast<unsigned char>(text[end])))
      ++end;
    numbers.push_back({p, end - p});
    p = end;
  }
  if (numbers.empty())
    return false;
  auto [p, n] = numbers[rng() % numbers.size()];
  text.replace(p, n, std::to_string(interestingInt(rng, 0)));
  return true;
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  Rng rng(seed);
  if (rng() % 4 == 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::string text(reinterpret_cast<const char *>(data), size);
  OwningOpRef<ModuleOp> module;
  if (!kvir::compiler::findParserHazard(text))
    module = parseSourceString<ModuleOp>(text, &fuzzContext.get());
  bool changed = false;
  if (module && rng() % 3 != 0) {
    for (int tries = 0; tries < 4 && !changed; ++tries)
      changed = mutateModule(*module, rng);
    if (changed) {
      text.clear();
      llvm::raw_string_ostream os(text);
      module->print(os);
    }
  }
  if (!changed)
    changed = mutateText(text, rng);
  if (!changed || text.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, text.data(), text.size());
  return text.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &context = fuzzContext.get();
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  int errors = fuzzContext.errors;
  OwningOpRef<ModuleOp> planned = kvir::compiler::parseProgram(context, text);
  if (!planned) {
    expectDiagnostic(errors, "parsing, verifying or planning");
    return 0;
  }
  for (auto func : planned->getOps<func::FuncOp>()) {
    if (func.isExternal() || !func.isPublic())
      continue;
    errors = fuzzContext.errors;
    if (failed(kvir::compiler::describeEntry(func)))
      expectDiagnostic(errors, "describing an entry");
  }
  kvir::compiler::LowerOptions options;
  std::vector<Location> sites;
  errors = fuzzContext.errors;
  OwningOpRef<ModuleOp> lowered =
      kvir::compiler::lowerProgram(*planned, options, sites);
  if (!lowered) {
    expectDiagnostic(errors, "lowering");
    return 0;
  }
  if (failed(verify(*lowered)))
    fail("a lowered module does not verify");
  return 0;
}
