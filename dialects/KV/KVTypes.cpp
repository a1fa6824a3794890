//===- KVTypes.cpp - Types of the kv dialect --------------------*- C++ -*-===//

#include "dialects/KV/KVAsmUtils.h"
#include "dialects/KV/KVDialect.h"

#include "runtime/core/ModelConfig.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::kv;

#define GET_TYPEDEF_CLASSES
#include "dialects/KV/KVTypes.cpp.inc"

void KVDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/KV/KVTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ModelType
//===----------------------------------------------------------------------===//

namespace {

/// RopeLayout <-> kvrt_rope_layout: exhaustive in both directions.
kvrt_rope_layout toRuntime(RopeLayout layout) {
  switch (layout) {
  case RopeLayout::Interleaved:
    return KVRT_ROPE_INTERLEAVED;
  case RopeLayout::Half:
    return KVRT_ROPE_HALF;
  }
  llvm_unreachable("unknown RoPE layout");
}

RopeLayout fromRuntime(kvrt_rope_layout layout) {
  switch (layout) {
  case KVRT_ROPE_INTERLEAVED:
    return RopeLayout::Interleaved;
  case KVRT_ROPE_HALF:
    return RopeLayout::Half;
  }
  llvm_unreachable("unknown RoPE layout");
}

} // namespace

LogicalResult ModelType::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t dim, int64_t hidden, int64_t layers,
                                int64_t heads, int64_t kvHeads, int64_t vocab,
                                RopeLayout rope, APFloat theta, APFloat eps,
                                int64_t ropeDim, APFloat ropeScale,
                                DenseF32ArrayAttr ropeFreqs) {
  std::pair<StringRef, int64_t> sizes[] = {
      {"dim", dim},     {"hidden", hidden},    {"layers", layers},
      {"heads", heads}, {"kv_heads", kvHeads}, {"vocab", vocab}};
  for (auto [name, value] : sizes)
    if (value <= 0 || value > std::numeric_limits<int32_t>::max())
      return emitError() << "model " << name << " must be in [1, 2^31), got "
                         << value;
  // The runtime's validation of the same fields, so that a type verifies
  // exactly when a model of its architecture loads.
  kvrt_model_config config{};
  config.dim = dim;
  config.hidden_dim = hidden;
  config.n_layers = layers;
  config.n_heads = heads;
  config.n_kv_heads = kvHeads;
  config.vocab_size = vocab;
  config.rope_layout = toRuntime(rope);
  config.rope_theta = theta.convertToDouble();
  config.rms_eps = eps.convertToDouble();
  if (ropeDim < 0 || ropeDim > std::numeric_limits<int32_t>::max())
    return emitError() << "model rope_dim must be in [0, 2^31), got "
                       << ropeDim;
  config.rope_dim = static_cast<int32_t>(ropeDim);
  config.rope_scale = ropeScale.convertToDouble();
  if (config.rope_scale <= 0)
    return emitError() << "model rope_scale must be positive, got "
                       << config.rope_scale;
  if (ropeFreqs) {
    if (ropeFreqs.size() > KVRT_MAX_ROPE_PAIRS)
      return emitError() << "model rope_freqs has " << ropeFreqs.size()
                         << " factors, more than the " << KVRT_MAX_ROPE_PAIRS
                         << " a config holds";
    config.n_rope_freq_factors = static_cast<int32_t>(ropeFreqs.size());
    llvm::copy(ropeFreqs.asArrayRef(), config.rope_freq_factors);
  }
  std::string problem = kvir::describeArchitectureError(config);
  if (!problem.empty())
    return emitError() << "invalid model type: " << problem;
  return success();
}

ModelType ModelType::get(MLIRContext *context,
                         const kvrt_model_config &config) {
  // Canonical: the whole head is rope_dim 0, no scaling is 1, no factors no
  // attribute, so that equal configs give the same type.
  int64_t ropeDim =
      kvir::ropeDims(config) == kvir::headSize(config) ? 0 : config.rope_dim;
  DenseF32ArrayAttr freqs;
  if (config.n_rope_freq_factors > 0)
    freqs = DenseF32ArrayAttr::get(
        context,
        ArrayRef<float>(config.rope_freq_factors, config.n_rope_freq_factors));
  return get(context, config.dim, config.hidden_dim, config.n_layers,
             config.n_heads, config.n_kv_heads, config.vocab_size,
             fromRuntime(config.rope_layout), APFloat(config.rope_theta),
             APFloat(config.rms_eps), ropeDim, APFloat(kvir::ropeScale(config)),
             freqs);
}

kvrt_model_config ModelType::getConfig() const {
  kvrt_model_config config{};
  config.dim = getDim();
  config.hidden_dim = getHidden();
  config.n_layers = getLayers();
  config.n_heads = getHeads();
  config.n_kv_heads = getKvHeads();
  config.vocab_size = getVocab();
  config.seq_len = 0;
  config.shared_classifier = 1;
  config.rope_layout = toRuntime(getRope());
  config.rope_theta = getThetaValue();
  config.rms_eps = getEpsValue();
  config.rope_dim = static_cast<int32_t>(getRopeDim());
  config.rope_scale = getRopeScale().convertToDouble();
  if (DenseF32ArrayAttr freqs = getRopeFreqs()) {
    config.n_rope_freq_factors = static_cast<int32_t>(freqs.size());
    llvm::copy(freqs.asArrayRef(), config.rope_freq_factors);
  }
  return config;
}

Type ModelType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  llvm::StringMap<int64_t> sizes;
  RopeLayout rope = RopeLayout::Interleaved;
  double theta = 10000.0, eps = 1e-5, ropeScale = 1.0;
  int64_t ropeDim = 0;
  SmallVector<float> ropeFreqs;
  bool hasRopeFreqs = false;
  llvm::StringSet<> seen;
  static constexpr StringRef kSizeKeys[] = {"dim",   "hidden",   "layers",
                                            "heads", "kv_heads", "vocab"};

  auto parseEntry = [&]() -> ParseResult {
    SMLoc keyLoc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return parser.emitError(keyLoc)
             << "model parameter '" << key << "' is given twice";
    if (llvm::is_contained(kSizeKeys, key))
      return parser.parseInteger(sizes[key]);
    if (key == "theta")
      return parser.parseFloat(theta);
    if (key == "eps")
      return parser.parseFloat(eps);
    if (key == "rope_dim")
      return parser.parseInteger(ropeDim);
    if (key == "rope_scale")
      return parser.parseFloat(ropeScale);
    if (key == "rope_freqs") {
      hasRopeFreqs = true;
      return parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            APFloat value(0.0f);
            if (parser.parseFloat(APFloat::IEEEsingle(), value))
              return failure();
            ropeFreqs.push_back(value.convertToFloat());
            return success();
          });
    }
    if (key == "rope") {
      SMLoc valueLoc = parser.getCurrentLocation();
      StringRef value;
      if (parser.parseKeyword(&value))
        return failure();
      // llama.cpp's names of the layouts, as the runtime spells them.
      std::optional<kvrt_rope_layout> alias = kvir::parseRopeLayout(value);
      std::optional<RopeLayout> layout =
          alias ? fromRuntime(*alias) : symbolizeRopeLayout(value);
      if (!layout) {
        std::string known;
        for (unsigned i = 0; i <= getMaxEnumValForRopeLayout(); ++i)
          known +=
              (i ? (i == getMaxEnumValForRopeLayout() ? " or " : ", ") : "") +
              stringifyRopeLayout(static_cast<RopeLayout>(i)).str() + " (" +
              kvir::ropeLayoutLlamaCppName(
                  toRuntime(static_cast<RopeLayout>(i))) +
              ")";
        return parser.emitError(valueLoc) << "unknown RoPE layout '" << value
                                          << "' (expected " << known << ")";
      }
      rope = *layout;
      return success();
    }
    return parser.emitError(keyLoc)
           << "unknown model parameter '" << key
           << "' (expected dim, hidden, layers, heads, kv_heads, vocab, rope, "
              "theta, eps, rope_dim, rope_scale or rope_freqs)";
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater,
                                     parseEntry))
    return {};
  for (StringRef key : kSizeKeys)
    if (!sizes.count(key)) {
      parser.emitError(loc) << "model type is missing '" << key << "'";
      return {};
    }
  // rope_dim = head size is the whole head: the canonical form omits it.
  if (sizes["heads"] > 0 && ropeDim == sizes["dim"] / sizes["heads"])
    ropeDim = 0;
  DenseF32ArrayAttr freqs;
  if (hasRopeFreqs) {
    if (ropeFreqs.empty()) {
      parser.emitError(loc) << "model rope_freqs must not be empty (omit it)";
      return {};
    }
    freqs = DenseF32ArrayAttr::get(parser.getContext(), ropeFreqs);
  }
  return parser.getChecked<ModelType>(
      loc, parser.getContext(), sizes["dim"], sizes["hidden"], sizes["layers"],
      sizes["heads"], sizes["kv_heads"], sizes["vocab"], rope, APFloat(theta),
      APFloat(eps), ropeDim, APFloat(ropeScale), freqs);
}

void ModelType::print(AsmPrinter &printer) const {
  printer << "<dim = " << getDim() << ", hidden = " << getHidden()
          << ", layers = " << getLayers() << ", heads = " << getHeads()
          << ", kv_heads = " << getKvHeads() << ", vocab = " << getVocab()
          << ", rope = " << stringifyRopeLayout(getRope()) << ", theta = ";
  printShortestFloat(printer, getTheta());
  printer << ", eps = ";
  printShortestFloat(printer, getEps());
  if (getRopeDim() != 0)
    printer << ", rope_dim = " << getRopeDim();
  if (getRopeScale().convertToDouble() != 1.0) {
    printer << ", rope_scale = ";
    printShortestFloat(printer, getRopeScale());
  }
  if (DenseF32ArrayAttr freqs = getRopeFreqs()) {
    printer << ", rope_freqs = [";
    llvm::interleaveComma(freqs.asArrayRef(), printer, [&](float value) {
      printer << formatShortestFloat(value);
    });
    printer << "]";
  }
  printer << ">";
}

//===----------------------------------------------------------------------===//
// CacheType
//===----------------------------------------------------------------------===//

LogicalResult CacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t layers, int64_t kvHeads,
                                int64_t headSize, Type elementType,
                                FlatSymbolRefAttr) {
  std::pair<StringRef, int64_t> sizes[] = {
      {"layers", layers}, {"KV heads", kvHeads}, {"head size", headSize}};
  for (auto [name, value] : sizes)
    if (value <= 0)
      return emitError() << "cache " << name << " must be positive, got "
                         << value;
  if (headSize % 2 != 0)
    return emitError() << "cache head size " << headSize
                       << " is odd; RoPE rotates pairs of dimensions";
  if (!elementType || !isa<Float32Type, Float16Type, BFloat16Type>(elementType))
    return emitError() << "cache element type must be f32, f16 or bf16, got "
                       << elementType;
  return success();
}

Type CacheType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> dims;
  Type elementType;
  if (parser.parseLess() ||
      parser.parseDimensionList(dims, /*allowDynamic=*/false,
                                /*withTrailingX=*/true) ||
      parser.parseType(elementType))
    return {};
  if (dims.size() != 3) {
    parser.emitError(loc) << "expected a cache shape "
                             "`layers x kv_heads x head_size x element type`, "
                             "got "
                          << dims.size() << " dimensions";
    return {};
  }
  FlatSymbolRefAttr contextName;
  if (succeeded(parser.parseOptionalComma())) {
    StringAttr name;
    if (parser.parseSymbolName(name))
      return {};
    contextName = FlatSymbolRefAttr::get(name);
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<CacheType>(loc, parser.getContext(), dims[0],
                                      dims[1], dims[2], elementType,
                                      contextName);
}

void CacheType::print(AsmPrinter &printer) const {
  printer << "<" << getLayers() << "x" << getKvHeads() << "x" << getHeadSize()
          << "x" << getElementType();
  if (FlatSymbolRefAttr name = getContextName())
    printer << ", " << name;
  printer << ">";
}
