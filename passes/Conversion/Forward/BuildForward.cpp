//===- BuildForward.cpp - The model forward, described once -----*- C++ -*-===//

#include "passes/Conversion/Forward/BuildForward.h"
#include "dialects/KV/KVDialect.h"
#include "dialects/KV/KVOps.h"
#include "runtime/core/ForwardABI.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelTensors.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringSet.h"

#include <string_view>

using namespace mlir;
using namespace mlir::kv;

namespace {

//===----------------------------------------------------------------------===//
// The argument structs of runtime/core/ForwardABI.def
//===----------------------------------------------------------------------===//

enum class FieldKind { F32, WEIGHT, BYTES, OFFSETS, KV, I32, RUNS, TILES, I64 };

struct Field {
  const char *name;
  FieldKind kind;
  /// The model tensor a WEIGHT field holds (TensorId::none for the others).
  kvrt::TensorId tensor;
};

/// The tensor of ModelTensors.def whose field is `name`, or none.
constexpr kvrt::TensorId tensorNamed(std::string_view name) {
  for (const kvrt::TensorDecl &t : kvrt::kTensors)
    if (name == t.field)
      return t.id;
  return kvrt::TensorId::none;
}

#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_FIELD_##entry(name, kind)
#define KVIR_FIELD_PREFILL(name, kind)                                         \
  {#name, FieldKind::kind, tensorNamed(#name)},
#define KVIR_FIELD_ATTENTION(name, kind)
#define KVIR_FIELD_MATERIALIZE(name, kind)
constexpr Field kPrefillFields[] = {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_FIELD_PREFILL
#undef KVIR_FIELD_ATTENTION
#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_FIELD_##entry(name, kind)
#define KVIR_FIELD_PREFILL(name, kind)
#define KVIR_FIELD_ATTENTION(name, kind)                                       \
  {#name, FieldKind::kind, tensorNamed(#name)},
constexpr Field kAttentionFields[] = {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_FIELD_ATTENTION
#undef KVIR_FIELD_MATERIALIZE
#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_FIELD_##entry(name, kind)
#define KVIR_FIELD_ATTENTION(name, kind)
#define KVIR_FIELD_MATERIALIZE(name, kind)                                     \
  {#name, FieldKind::kind, tensorNamed(#name)},
constexpr Field kMaterializeFields[] = {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_FIELD_PREFILL
#undef KVIR_FIELD_ATTENTION
#undef KVIR_FIELD_MATERIALIZE

/// Field indices, so that the layer sequence names what it reads.
#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_INDEX_##entry(name)
#define KVIR_INDEX_PREFILL(name) P_##name,
#define KVIR_INDEX_ATTENTION(name)
#define KVIR_INDEX_MATERIALIZE(name)
enum PrefillField {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_INDEX_PREFILL
#undef KVIR_INDEX_ATTENTION
#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_INDEX_##entry(name)
#define KVIR_INDEX_PREFILL(name)
#define KVIR_INDEX_ATTENTION(name) A_##name,
enum AttentionField {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_INDEX_ATTENTION
#undef KVIR_INDEX_MATERIALIZE
#define KVRT_FORWARD_FIELD(entry, name, kind) KVIR_INDEX_##entry(name)
#define KVIR_INDEX_ATTENTION(name)
#define KVIR_INDEX_MATERIALIZE(name) M_##name,
enum MaterializeField {
#include "runtime/core/ForwardABI.def"
};
#undef KVIR_INDEX_PREFILL
#undef KVIR_INDEX_ATTENTION
#undef KVIR_INDEX_MATERIALIZE

/// Whether every WEIGHT field names a tensor of ModelTensors.def.
template <size_t N>
constexpr bool weightsNameTensors(const Field (&fields)[N]) {
  for (const Field &f : fields)
    if (f.kind == FieldKind::WEIGHT && f.tensor == kvrt::TensorId::none)
      return false;
  return true;
}
static_assert(
    weightsNameTensors(kPrefillFields) &&
        weightsNameTensors(kAttentionFields) &&
        weightsNameTensors(kMaterializeFields),
    "a WEIGHT field of ForwardABI.def is not a ModelTensors.def tensor");

/// The bytes of a field in the C struct: the size the struct must have.
constexpr size_t fieldBytes(FieldKind kind) {
  switch (kind) {
  case FieldKind::F32:
  case FieldKind::WEIGHT:
  case FieldKind::BYTES:
  case FieldKind::OFFSETS:
  case FieldKind::KV:
  case FieldKind::I32:
    return 2 * sizeof(void *) + 3 * sizeof(int64_t);
  case FieldKind::RUNS:
  case FieldKind::TILES:
    return 2 * sizeof(void *) + 5 * sizeof(int64_t);
  case FieldKind::I64:
    return sizeof(int64_t);
  }
  return 0;
}
template <size_t N> constexpr size_t structBytes(const Field (&fields)[N]) {
  size_t total = 0;
  for (const Field &f : fields)
    total += fieldBytes(f.kind);
  return total;
}
static_assert(structBytes(kPrefillFields) == sizeof(kvrt_prefill_args),
              "ForwardABI.def and kvrt_prefill_args disagree");
static_assert(structBytes(kAttentionFields) == sizeof(kvrt_attention_args),
              "ForwardABI.def and kvrt_attention_args disagree");
static_assert(structBytes(kMaterializeFields) == sizeof(kvrt_materialize_args),
              "ForwardABI.def and kvrt_materialize_args disagree");

/// The type a field has in the entry's `_impl` function: a weight's buffer
/// is its bytes, whatever the formats of its slices.
Type fieldType(ForwardEmitter &e, const Field &field) {
  switch (field.kind) {
  case FieldKind::F32:
    return e.buffer(e.f32());
  case FieldKind::WEIGHT:
  case FieldKind::BYTES:
    return e.buffer(e.byte());
  case FieldKind::OFFSETS:
    return e.buffer(e.i64());
  case FieldKind::KV:
    return e.buffer(e.kvElement());
  case FieldKind::I32:
    return e.buffer(e.i32());
  case FieldKind::RUNS:
    return e.table(KVRT_RUN_WIDTH);
  case FieldKind::TILES:
    return e.table(KVRT_TILE_WIDTH);
  case FieldKind::I64:
    return e.i64();
  }
  llvm_unreachable("unknown field kind");
}

/// The type a field has in the C struct, as the LLVM dialect spells it: a
/// memref descriptor, or i64.
Type fieldStorageType(ForwardEmitter &e, const Field &field) {
  return e.llvmType(fieldType(e, field));
}

/// `@<prefix>_<entry>(%args: !llvm.ptr)`: loads each field of the struct
/// and calls `impl` with them. A descriptor loaded from the struct becomes a
/// memref through an unrealized cast that the LLVM lowering folds away
/// (reconcile-unrealized-casts): the struct is the descriptor.
template <size_t N>
void emitEntry(ForwardEmitter &e, StringRef name, const Field (&fields)[N],
               func::FuncOp impl) {
  MLIRContext *ctx = e.b.getContext();
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  SmallVector<Type> storage;
  for (const Field &f : fields)
    storage.push_back(fieldStorageType(e, f));
  Type structType = LLVM::LLVMStructType::getLiteral(ctx, storage);
  func::FuncOp entry = e.beginFunction(name, {ptr}, /*isPublic=*/true);
  Value args = entry.getArgument(0);
  SmallVector<Value> operands;
  for (auto [i, f] : llvm::enumerate(fields)) {
    Value address = LLVM::GEPOp::create(e.b, ptr, structType, args,
                                        ArrayRef<LLVM::GEPArg>{0, int32_t(i)});
    Value stored = LLVM::LoadOp::create(e.b, storage[i], address);
    Type type = fieldType(e, f);
    if (type != storage[i])
      stored =
          UnrealizedConversionCastOp::create(e.b, type, stored).getResult(0);
    operands.push_back(stored);
  }
  func::CallOp::create(e.b, impl, operands);
  e.finishFunction();
}

/// The `_impl` function of an entry: its arguments are the fields.
template <size_t N>
func::FuncOp beginImpl(ForwardEmitter &e, StringRef name,
                       const Field (&fields)[N]) {
  SmallVector<Type> types;
  for (const Field &f : fields)
    types.push_back(fieldType(e, f));
  return e.beginFunction(name, types, /*isPublic=*/false);
}

//===----------------------------------------------------------------------===//
// The layer sequence
//===----------------------------------------------------------------------===//

/// The prefill: n tokens at positions pos .. pos+n-1, layers
/// 0 .. n_layers-1, then the final norm and the logits of rows
/// logits_from .. n-1. The intermediate values of n tokens (the normed
/// input, Q, the attention output, K, V and the two FFN halves) live in
/// the target's temporaries: regions of the scratch buffer, or buffers of
/// their own.
void emitPrefill(ForwardEmitter &e, ForwardTarget &target) {
  func::FuncOp impl = beginImpl(e, e.name("prefill_impl"), kPrefillFields);
  auto arg = [&](PrefillField f) { return impl.getArgument(f); };
  Value zero = e.cIndex(0), one = e.cIndex(1);
  Value n = e.toIndex(arg(P_n));
  Value pos = arg(P_pos);
  Value x = arg(P_x), scratch = arg(P_scratch);
  KVTables kv{arg(P_kv),    arg(P_pages), arg(P_runs),
              arg(P_tiles), arg(P_part),  e.toIndex(arg(P_page_tokens))};
  kv.rope = target.ropeTables(e, n, pos, kv);
  Value nD = e.mul(n, e.cIndex(e.dim));
  Value nKVD = e.mul(n, e.cIndex(e.kvDim));
  Value nHID = e.mul(n, e.cIndex(e.hidden));
  Value oQ = nD, oATT = e.add(oQ, nD), oK = e.add(oATT, nD);
  Value oV = e.add(oK, nKVD), oH1 = e.add(oV, nKVD), oH3 = e.add(oH1, nHID);
  BufferRef xb = target.temporary(e, scratch, zero, nD);
  BufferRef q = target.temporary(e, scratch, oQ, nD);
  BufferRef att = target.temporary(e, scratch, oATT, nD);
  BufferRef k = target.temporary(e, scratch, oK, nKVD);
  BufferRef v = target.temporary(e, scratch, oV, nKVD);
  BufferRef h1 = target.temporary(e, scratch, oH1, nHID);
  BufferRef h3 = target.temporary(e, scratch, oH3, nHID);
  auto at = [&](Value buffer, Value offset) {
    return BufferRef{buffer, offset};
  };
  // Slice `layer` (index) of a weight field: its byte offset from the
  // weight_offsets table (row = the field's place among the weight fields),
  // and the format the forward is built for there.
  auto weight = [&](PrefillField f, Value layer, kvrt_weight_format format) {
    int64_t row = 0;
    for (int64_t i = 0; i < f; ++i)
      row += kPrefillFields[i].kind == FieldKind::WEIGHT;
    Value entry = e.add(e.cIndex(row * e.layers), layer);
    Value offset = e.toIndex(e.load(arg(P_weight_offsets), entry));
    return WeightRef{arg(f),
                     offset,
                     format,
                     arg(P_packed),
                     arg(P_packed_offsets),
                     entry,
                     arg(P_panel_width),
                     arg(P_decode_rows),
                     arg(P_decode_rows_offsets)};
  };
  auto format = [&](PrefillField f, int64_t layer) {
    return e.formats.at(kPrefillFields[f].tensor, layer);
  };
  // The layer loop, split where the formats of a layer's weights change
  // (llama.cpp's _M mixes give some layers Q6_K): one loop per run of
  // layers whose weights have the same formats, each over the layers of its
  // run below n_layers.
  auto layerFormats = [&](int64_t l) {
    SmallVector<kvrt_weight_format> formats;
    for (const Field &f : kPrefillFields)
      if (f.kind == FieldKind::WEIGHT)
        formats.push_back(e.formats.at(f.tensor, l));
    return formats;
  };
  Value nLayers = e.toIndex(arg(P_n_layers));
  for (int64_t first = 0; first < e.layers;) {
    int64_t end = first + 1;
    while (end < e.layers && layerFormats(end) == layerFormats(first))
      ++end;
    Value lb = e.cIndex(first);
    Value ub = first == 0 && end == e.layers
                   ? nLayers
                   : e.maxu(lb, e.minu(e.cIndex(end), nLayers));
    int64_t fl = first;
    auto w = [&](PrefillField f, Value l) {
      return weight(f, l, format(f, fl));
    };
    e.forLoop(lb, ub, one, [&](Value l) {
      target.rmsnorm(e, at(x, zero), w(P_rms_att, l), xb, n);
      target.products(e, xb,
                      {{w(P_wq, l), q, e.dim},
                       {w(P_wk, l), k, e.kvDim},
                       {w(P_wv, l), v, e.kvDim}},
                      n, e.dim);
      if (e.config.qkv_bias) {
        target.addBias(e, q, w(P_bq, l), n, e.dim);
        target.addBias(e, k, w(P_bk, l), n, e.kvDim);
        target.addBias(e, v, w(P_bv, l), n, e.kvDim);
      }
      target.storeKV(e, k, v, n, pos, kv, l);
      target.attention(e, q, att, n, pos, kv, l);
      target.matmul(e, att, w(P_wo, l), at(x, zero), n, e.dim, e.dim,
                    /*accumulate=*/true);
      target.rmsnorm(e, at(x, zero), w(P_rms_ffn, l), xb, n);
      target.gatedProduct(e, xb, w(P_w1, l), w(P_w3, l), h1, h3, n, e.hidden,
                          e.dim);
      target.matmul(e, h1, w(P_w2, l), at(x, zero), n, e.dim, e.hidden,
                    /*accumulate=*/true);
    });
    first = end;
  }
  // The final norm and the classifier, for the rows that want logits.
  Value from = e.toIndex(arg(P_logits_from));
  Value rows = e.sub(n, from);
  e.ifThen(e.cmp(arith::CmpIPredicate::ugt, rows, zero), [&] {
    Value xo = e.mul(from, e.cIndex(e.dim));
    target.rmsnorm(e, at(x, xo), weight(P_rms_final, zero, KVRT_WEIGHT_F32), xb,
                   rows);
    target.matmul(e, xb, weight(P_wcls, zero, format(P_wcls, 0)),
                  at(arg(P_logits), zero), rows, e.vocab, e.dim,
                  /*accumulate=*/false);
  });
  target.releaseTemporaries(e);
  e.finishFunction();
  emitEntry(e, e.name("prefill"), kPrefillFields, impl);
}

void emitAttention(ForwardEmitter &e, ForwardTarget &target) {
  func::FuncOp impl = beginImpl(e, e.name("attention_impl"), kAttentionFields);
  auto arg = [&](AttentionField f) { return impl.getArgument(f); };
  Value zero = e.cIndex(0);
  KVTables kv{arg(A_kv),    arg(A_pages), arg(A_runs),
              arg(A_tiles), arg(A_part),  e.toIndex(arg(A_page_tokens))};
  Value n = e.toIndex(arg(A_n));
  Value layer = e.toIndex(arg(A_layer));
  target.attention(e, BufferRef{arg(A_q), zero}, BufferRef{arg(A_out), zero}, n,
                   arg(A_pos), kv, layer);
  e.finishFunction();
  emitEntry(e, e.name("attention"), kAttentionFields, impl);
}

void emitMaterialize(ForwardEmitter &e, ForwardTarget &target) {
  func::FuncOp impl =
      beginImpl(e, e.name("materialize_impl"), kMaterializeFields);
  auto arg = [&](MaterializeField f) { return impl.getArgument(f); };
  KVTables kv{arg(M_kv), arg(M_pages), arg(M_runs),
              Value(),   Value(),      e.toIndex(arg(M_page_tokens))};
  target.materialize(e, kv, arg(M_dst_pages));
  e.finishFunction();
  emitEntry(e, e.name("materialize"), kMaterializeFields, impl);
}

} // namespace

std::string mlir::kv::forwardEntryName(const kvrt_model_config &config,
                                       kvrt_kv_dtype dtype,
                                       const kvir::WeightFormats &formats,
                                       ForwardEntryPoint entry) {
  std::string prefix = kvir::forwardPrefix(config, dtype, formats);
  switch (entry) {
  case ForwardEntryPoint::Prefill:
    return prefix + "_prefill";
  case ForwardEntryPoint::Attention:
    return prefix + "_attention";
  case ForwardEntryPoint::Materialize:
    return prefix + "_materialize";
  }
  llvm_unreachable("unknown entry point");
}

FailureOr<kvir::WeightFormats>
mlir::kv::weightFormatsOf(ModuleOp module, const kvrt_model_config &config,
                          Location loc) {
  Attribute attr = module->getAttr(kWeightFormatsAttrName);
  if (!attr)
    return kvir::WeightFormats();
  auto bad = [&]() {
    return emitError(loc) << "'" << kWeightFormatsAttrName
                          << "' must be an array of [!kv.model, \"formats\"], "
                             "got "
                          << attr;
  };
  auto array = dyn_cast<ArrayAttr>(attr);
  if (!array)
    return bad();
  std::string key = kvir::configKey(config, KVRT_KV_F32);
  for (Attribute entry : array) {
    auto pair = dyn_cast<ArrayAttr>(entry);
    if (!pair || pair.size() != 2)
      return bad();
    auto typeAttr = dyn_cast<TypeAttr>(pair[0]);
    auto model =
        typeAttr ? dyn_cast<ModelType>(typeAttr.getValue()) : ModelType();
    auto spec = dyn_cast<StringAttr>(pair[1]);
    if (!model || !spec)
      return bad();
    if (kvir::configKey(model.getConfig(), KVRT_KV_F32) != key)
      continue;
    std::string error;
    std::optional<kvir::WeightFormats> formats =
        kvir::WeightFormats::parse(spec.getValue(), config.n_layers, error);
    if (!formats)
      return emitError(loc) << "'" << kWeightFormatsAttrName << "' entry "
                            << entry << ": " << error;
    return *formats;
  }
  return kvir::WeightFormats();
}

Attribute mlir::kv::weightFormatsEntry(MLIRContext *ctx,
                                       const kvrt_model_config &config,
                                       const kvir::WeightFormats &formats) {
  return ArrayAttr::get(ctx, {TypeAttr::get(ModelType::get(ctx, config)),
                              StringAttr::get(ctx, formats.describe())});
}

kvrt_kv_dtype mlir::kv::kvDtypeOf(Type element) {
  if (isa<Float16Type>(element))
    return KVRT_KV_F16;
  if (isa<BFloat16Type>(element))
    return KVRT_KV_BF16;
  return KVRT_KV_F32;
}

std::string mlir::kv::checkForward(const kvrt_model_config &config,
                                   const ForwardTarget &target) {
  std::string problem = kvir::describeArchitectureError(config);
  if (!problem.empty())
    return problem;
  return target.checkConfig(config);
}

LogicalResult mlir::kv::buildForward(ModuleOp module,
                                     const kvrt_model_config &config,
                                     kvrt_kv_dtype dtype,
                                     const kvir::WeightFormats &formats,
                                     ForwardTarget &target, Location loc) {
  std::string prefix = kvir::forwardPrefix(config, dtype, formats);
  std::string problem = checkForward(config, target);
  if (!problem.empty())
    return emitError(loc) << "cannot build the " << target.name()
                          << " forward of ["
                          << kvir::forwardKey(config, dtype, formats)
                          << "]: " << problem;
  if (SymbolTable::lookupSymbolIn(module, prefix + "_prefill"))
    return success();
  MLIRContext *ctx = module.getContext();
  ctx->loadDialect<arith::ArithDialect, func::FuncDialect, LLVM::LLVMDialect,
                   math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                   vector::VectorDialect>();
  // Emitted into a scratch module first: a clash with an existing symbol is
  // a diagnostic, not a renamed or broken function.
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(loc);
  ForwardEmitter e(*scratch, config, prefix, dtype);
  e.formats = formats;
  e.b.setLoc(loc);
  target.emitKernels(e);
  emitPrefill(e, target);
  emitAttention(e, target);
  emitMaterialize(e, target);
  // A declaration of an external function (a runtime entry the target
  // calls, e.g. kvrt_parallel_for) may be there already, from another
  // forward: the existing one serves, if its type is the same.
  for (Operation &op :
       llvm::make_early_inc_range(scratch->getBody()->getOperations()))
    if (auto decl = dyn_cast<func::FuncOp>(op))
      if (decl.isExternal())
        if (auto existing =
                module.lookupSymbol<func::FuncOp>(decl.getSymName()))
          if (existing.isExternal() &&
              existing.getFunctionType() == decl.getFunctionType())
            op.erase();
  for (Operation &op : scratch->getBody()->getOperations())
    if (auto symbol = dyn_cast<SymbolOpInterface>(op))
      if (SymbolTable::lookupSymbolIn(module, symbol.getName()))
        return emitError(loc)
               << "cannot build the " << target.name() << " forward of ["
               << kvir::forwardKey(config, dtype, formats) << "]: symbol @"
               << symbol.getName() << " already exists";
  for (NamedAttribute attr : (*scratch)->getAttrs())
    module->setAttr(attr.getName(), attr.getValue());
  Block *body = module.getBody();
  for (Operation &op :
       llvm::make_early_inc_range(scratch->getBody()->getOperations()))
    op.moveBefore(body, body->end());
  return success();
}

FailureOr<unsigned> mlir::kv::buildProgramForwards(ModuleOp module,
                                                   ForwardTarget &target) {
  struct Request {
    kvrt_model_config config;
    kvrt_kv_dtype dtype;
    Location loc;
  };
  std::vector<Request> requests; // a config is over 1 KiB: no inline storage
  llvm::StringSet<> seen;
  auto request = [&](ModelType model, Type element, Location loc) {
    kvrt_kv_dtype dtype = kvDtypeOf(element);
    kvrt_model_config config = model.getConfig();
    if (seen.insert(kvir::configKey(config, dtype)).second)
      requests.push_back({config, dtype, loc});
  };
  auto cacheElement = [](TypeRange types) -> Type {
    for (Type type : types)
      if (auto cache = dyn_cast<CacheType>(type))
        return cache.getElementType();
    return Float32Type::get(types.front().getContext());
  };
  module.walk([&](Operation *op) {
    if (!isa<PrefillOp, PrefillChainOp, AttentionOp, MaterializeOp,
             SelectiveRecomputeOp, LoadBlockOp>(op))
      return;
    auto model = cast<ModelType>(op->getOperand(0).getType());
    SmallVector<Type> types(op->getOperandTypes());
    llvm::append_range(types, op->getResultTypes());
    request(model, cacheElement(types), op->getLoc());
  });
  if (Attribute attr = module->getAttr(kExportForwardsAttrName)) {
    auto array = dyn_cast<ArrayAttr>(attr);
    for (Attribute entry : array ? array.getValue() : ArrayRef<Attribute>()) {
      // !kv.model (f32 pages) or [!kv.model, f16 | bf16 | f32].
      Type element = Float32Type::get(module.getContext());
      if (auto pair = dyn_cast<ArrayAttr>(entry)) {
        auto elementAttr =
            pair.size() == 2 ? dyn_cast<TypeAttr>(pair[1]) : TypeAttr();
        if (!elementAttr || !isa<Float32Type, Float16Type, BFloat16Type>(
                                elementAttr.getValue()))
          return module.emitError()
                 << "'" << kExportForwardsAttrName << "' entry " << entry
                 << " must be [!kv.model, f32 | f16 | bf16]";
        element = elementAttr.getValue();
        entry = pair[0];
      }
      auto typeAttr = dyn_cast<TypeAttr>(entry);
      auto model =
          typeAttr ? dyn_cast<ModelType>(typeAttr.getValue()) : ModelType();
      if (!model)
        return module.emitError()
               << "'" << kExportForwardsAttrName
               << "' must be an array of !kv.model types, got " << attr;
      request(model, element, module.getLoc());
    }
    if (!array)
      return module.emitError()
             << "'" << kExportForwardsAttrName
             << "' must be an array of !kv.model types, got " << attr;
    module->removeAttr(kExportForwardsAttrName);
  }
  unsigned built = 0;
  for (const Request &r : requests) {
    FailureOr<kvir::WeightFormats> formats =
        weightFormatsOf(module, r.config, r.loc);
    if (failed(formats))
      return failure();
    bool existed = SymbolTable::lookupSymbolIn(
        module, forwardEntryName(r.config, r.dtype, *formats,
                                 ForwardEntryPoint::Prefill));
    if (failed(
            buildForward(module, r.config, r.dtype, *formats, target, r.loc)))
      return failure();
    if (!existed)
      ++built;
  }
  return built;
}

Attribute mlir::kv::exportForwardEntry(MLIRContext *ctx,
                                       const kvrt_model_config &config,
                                       kvrt_kv_dtype dtype) {
  auto model = TypeAttr::get(ModelType::get(ctx, config));
  Type element;
  switch (dtype) {
  case KVRT_KV_F32:
    return model;
  case KVRT_KV_F16:
    element = Float16Type::get(ctx);
    break;
  case KVRT_KV_BF16:
    element = BFloat16Type::get(ctx);
    break;
  }
  return ArrayAttr::get(ctx, {model, TypeAttr::get(element)});
}

void mlir::kv::registerForwardDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, func::FuncDialect, LLVM::LLVMDialect,
                  math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
                  vector::VectorDialect>();
}
