//===- ForwardBuilder.cpp - The model forward as upstream IR ----*- C++ -*-===//
//
// The forward is written once as MLIR source (ForwardTemplate.inc) with the
// model's dimensions as placeholders: readable as IR, checked by the parser
// and the verifiers, and specialised per config so that every loop bound the
// model fixes is a constant for the optimiser.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/KVToCPU/ForwardBuilder.h"
#include "dialects/KV/KVDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::kv;

namespace {

const char *const kTemplate =
#include "passes/Conversion/KVToCPU/ForwardTemplate.inc"
    ;

/// The bit pattern of a double as an MLIR hexadecimal float literal (exact).
std::string hexF64(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::format("0x%016llX", static_cast<unsigned long long>(bits));
  return out;
}

std::string hexF32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::format("0x%08X", bits);
  return out;
}

/// The matmul kernel, c[t][o] = (c[t][o] +) sum_i a[t][i] * b[o][i].
std::string matmulSource(StringRef prefix, bool accumulate) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "func.func private @" << prefix << "_matmul_nt"
     << (accumulate ? "_acc" : "") << R"((%a: !m2, %b: !m2, %c: !m2) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c48 = arith.constant 48 : index
  %c64 = arith.constant 64 : index
  %n = memref.dim %a, %c0 : !m2
  %k = memref.dim %a, %c1 : !m2
  %m = memref.dim %b, %c0 : !m2
  %r64 = arith.remui %k, %c64 : index
  %k64 = arith.subi %k, %r64 : index
  %r16 = arith.remui %k, %c16 : index
  %k16 = arith.subi %k, %r16 : index
  %zv = arith.constant dense<0.0> : vector<16xf32>
  scf.for %o = %c0 to %m step %c1 {
    scf.for %t = %c0 to %n step %c1 {
      %acc:4 = scf.for %i = %c0 to %k64 step %c64 iter_args(%a0 = %zv, %a1 = %zv, %a2 = %zv, %a3 = %zv) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>) {
        %i1 = arith.addi %i, %c16 : index
        %i2 = arith.addi %i, %c32 : index
        %i3 = arith.addi %i, %c48 : index
        %x0 = vector.load %a[%t, %i] : !m2, vector<16xf32>
        %y0 = vector.load %b[%o, %i] : !m2, vector<16xf32>
        %x1 = vector.load %a[%t, %i1] : !m2, vector<16xf32>
        %y1 = vector.load %b[%o, %i1] : !m2, vector<16xf32>
        %x2 = vector.load %a[%t, %i2] : !m2, vector<16xf32>
        %y2 = vector.load %b[%o, %i2] : !m2, vector<16xf32>
        %x3 = vector.load %a[%t, %i3] : !m2, vector<16xf32>
        %y3 = vector.load %b[%o, %i3] : !m2, vector<16xf32>
        %n0 = vector.fma %x0, %y0, %a0 : vector<16xf32>
        %n1 = vector.fma %x1, %y1, %a1 : vector<16xf32>
        %n2 = vector.fma %x2, %y2, %a2 : vector<16xf32>
        %n3 = vector.fma %x3, %y3, %a3 : vector<16xf32>
        scf.yield %n0, %n1, %n2, %n3 : vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>
      }
      %s01 = arith.addf %acc#0, %acc#1 : vector<16xf32>
      %s23 = arith.addf %acc#2, %acc#3 : vector<16xf32>
      %s4 = arith.addf %s01, %s23 : vector<16xf32>
      %s16 = scf.for %i = %k64 to %k16 step %c16 iter_args(%av = %s4) -> (vector<16xf32>) {
        %x0 = vector.load %a[%t, %i] : !m2, vector<16xf32>
        %y0 = vector.load %b[%o, %i] : !m2, vector<16xf32>
        %n0 = vector.fma %x0, %y0, %av : vector<16xf32>
        scf.yield %n0 : vector<16xf32>
      }
      %red = vector.reduction <add>, %s16 : vector<16xf32> into f32
      %tot = scf.for %i = %k16 to %k step %c1 iter_args(%as = %red) -> (f32) {
        %x0 = memref.load %a[%t, %i] : !m2
        %y0 = memref.load %b[%o, %i] : !m2
        %p = arith.mulf %x0, %y0 : f32
        %n0 = arith.addf %as, %p : f32
        scf.yield %n0 : f32
      }
)";
  if (accumulate)
    os << R"(      %old = memref.load %c[%t, %o] : !m2
      %new = arith.addf %old, %tot : f32
      memref.store %new, %c[%t, %o] : !m2
)";
  else
    os << "      memref.store %tot, %c[%t, %o] : !m2\n";
  os << "    }\n  }\n  return\n}\n";
  return s;
}

} // namespace

ForwardConfig ForwardConfig::fromModelType(ModelType type) {
  ForwardConfig c;
  c.dim = type.getDim();
  c.hidden = type.getHidden();
  c.layers = type.getLayers();
  c.heads = type.getHeads();
  c.kvHeads = type.getKvHeads();
  c.vocab = type.getVocab();
  c.halfRope = type.getRope() == RopeLayout::Half;
  c.theta = type.getThetaValue();
  c.eps = type.getEpsValue();
  return c;
}

std::string mlir::kv::checkForwardConfig(const ForwardConfig &c) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  if (c.dim <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 ||
      c.kvHeads <= 0 || c.vocab <= 0)
    os << "model sizes must be positive";
  else if (c.dim % c.heads != 0)
    os << "heads (" << c.heads << ") do not divide dim (" << c.dim << ")";
  else if (c.heads % c.kvHeads != 0)
    os << "kv_heads (" << c.kvHeads << ") do not divide heads (" << c.heads
       << ")";
  else if (c.headSize() % 2 != 0)
    os << "head size " << c.headSize() << " is odd";
  else if (c.headSize() > 1024)
    os << "head size " << c.headSize()
       << " exceeds 1024, the largest the CPU attention kernel holds in "
          "registers";
  else if (!(c.theta > 0) || !std::isfinite(c.theta) || !(c.eps > 0) ||
           !std::isfinite(c.eps))
    os << "RoPE theta and RMSNorm eps must be positive and finite";
  return msg;
}

llvm::StringMap<std::string>
mlir::kv::getForwardSubstitutions(const ForwardConfig &c, StringRef prefix) {
  int64_t hs = c.headSize();
  llvm::StringMap<std::string> map;
  map["P"] = prefix.str();
  map["D"] = std::to_string(c.dim);
  map["KVD"] = std::to_string(c.kvDim());
  map["HS"] = std::to_string(hs);
  map["HALF"] = std::to_string(hs / 2);
  map["NH"] = std::to_string(c.heads);
  map["KVH"] = std::to_string(c.kvHeads);
  map["G"] = std::to_string(c.heads / c.kvHeads);
  map["L"] = std::to_string(c.layers);
  map["HID"] = std::to_string(c.hidden);
  map["V"] = std::to_string(c.vocab);
  map["DD"] = std::to_string(c.dim * c.dim);
  map["KD"] = std::to_string(c.kvDim() * c.dim);
  map["HD"] = std::to_string(c.hidden * c.dim);
  map["THETA"] = hexF64(c.theta);
  map["EPS"] = hexF64(c.eps);
  map["HS_F64"] = hexF64(static_cast<double>(hs));
  map["D_F64"] = hexF64(static_cast<double>(c.dim));
  map["SCALE"] =
      hexF32(static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs))));
  map["ROPE_INDICES"] = c.halfRope ? "%ia = arith.addi %i, %c0 : index\n"
                                     "    %ib = arith.addi %i, %half : index"
                                   : "%ia = arith.muli %i, %c2 : index\n"
                                     "    %ib = arith.addi %ia, %c1 : index";
  return map;
}

std::string mlir::kv::getForwardSource(const ForwardConfig &c,
                                       StringRef prefix) {
  llvm::StringMap<std::string> map = getForwardSubstitutions(c, prefix);
  map["MATMUL_NT"] = matmulSource(prefix, /*accumulate=*/false);
  map["MATMUL_NT_ACC"] = matmulSource(prefix, /*accumulate=*/true);
  return substituteTemplate(kTemplate, map);
}

std::string
mlir::kv::substituteTemplate(StringRef text,
                             const llvm::StringMap<std::string> &map) {
  std::string out;
  out.reserve(text.size() * 2);
  while (!text.empty()) {
    size_t at = text.find("${");
    if (at == StringRef::npos) {
      out += text.str();
      break;
    }
    out += text.take_front(at).str();
    text = text.drop_front(at + 2);
    size_t end = text.find('}');
    StringRef key = text.take_front(end);
    auto it = map.find(key);
    assert(it != map.end() && "unknown placeholder in the forward template");
    out += it->second;
    text = text.drop_front(end + 1);
  }
  return out;
}

void mlir::kv::registerForwardDialects(DialectRegistry &registry) {
  registry
      .insert<arith::ArithDialect, func::FuncDialect, math::MathDialect,
              memref::MemRefDialect, scf::SCFDialect, vector::VectorDialect>();
}

LogicalResult mlir::kv::buildForwardFunctions(ModuleOp module,
                                              const ForwardConfig &config,
                                              StringRef prefix, Location loc) {
  std::string problem = checkForwardConfig(config);
  if (!problem.empty())
    return emitError(loc) << "cannot build the CPU forward '" << prefix
                          << "': " << problem;
  MLIRContext *ctx = module.getContext();
  ctx->loadDialect<arith::ArithDialect, func::FuncDialect, math::MathDialect,
                   memref::MemRefDialect, scf::SCFDialect,
                   vector::VectorDialect>();
  return insertForwardSource(module, getForwardSource(config, prefix),
                             "CPU forward '" + prefix.str() + "'", loc);
}

LogicalResult mlir::kv::insertForwardSource(ModuleOp module, StringRef source,
                                            StringRef what, Location loc) {
  MLIRContext *ctx = module.getContext();
  ParserConfig parserConfig(ctx);
  OwningOpRef<ModuleOp> parsed =
      parseSourceString<ModuleOp>(source, parserConfig, "kv-forward");
  if (!parsed)
    return emitError(loc) << "internal error: the " << what
                          << " does not parse";
  for (Operation &op : parsed->getBody()->getOperations())
    if (auto sym = dyn_cast<SymbolOpInterface>(op))
      if (SymbolTable::lookupSymbolIn(module, sym.getName()))
        return emitError(loc) << "cannot build the " << what << ": symbol @"
                              << sym.getName() << " already exists";
  Block *body = module.getBody();
  for (Operation &op :
       llvm::make_early_inc_range(parsed->getBody()->getOperations())) {
    op.moveBefore(body, body->end());
    op.setLoc(loc);
  }
  return success();
}

FailureOr<unsigned> mlir::kv::buildRequestedForwards(
    ModuleOp module,
    function_ref<LogicalResult(const ForwardConfig &, StringRef name)> build) {
  Attribute attr = module->getAttr(kForwardAttrName);
  if (!attr)
    return 0u;
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict)
    return module.emitError()
           << "'" << kForwardAttrName
           << "' must be a dictionary from names to !kv.model types, got "
           << attr;
  unsigned built = 0;
  for (NamedAttribute entry : dict) {
    auto typeAttr = dyn_cast<TypeAttr>(entry.getValue());
    auto model =
        typeAttr ? dyn_cast<ModelType>(typeAttr.getValue()) : ModelType();
    if (!model)
      return module.emitError()
             << "'" << kForwardAttrName << "' entry '"
             << entry.getName().getValue() << "' must be a !kv.model type, got "
             << entry.getValue();
    if (failed(build(ForwardConfig::fromModelType(model),
                     entry.getName().getValue())))
      return failure();
    ++built;
  }
  module->removeAttr(kForwardAttrName);
  return built;
}
