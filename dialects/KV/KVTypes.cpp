//===- KVTypes.cpp - Types of the kv dialect --------------------*- C++ -*-===//

#include "dialects/KV/KVAsmUtils.h"
#include "dialects/KV/KVDialect.h"

#include "runtime/core/ModelConfig.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <limits>

using namespace mlir;
using namespace mlir::kv;

//===----------------------------------------------------------------------===//
// Parameter parsers and printers (KVTypes.td), used by the generated code
//===----------------------------------------------------------------------===//

namespace mlir::kv {
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

/// The default of a struct() parameter that is always printed
/// (KV_AlwaysPrintedParameter): the parser fills in `value` where the text
/// omits the parameter, and parameterEquals finds it equal to no value, so
/// the printer's "elide the default" guard never elides it.
template <typename T> struct AlwaysPrinted {
  T value;
  operator T() const { return value; }
};

/// The comparator of the model's parameters: what makes two types equal, and
/// (against the default) what the printer elides.
template <typename T> bool parameterEquals(const T &lhs, const T &rhs) {
  return lhs == rhs;
}
bool parameterEquals(const APFloat &lhs, const APFloat &rhs) {
  return lhs.bitwiseIsEqual(rhs);
}
template <typename T>
bool parameterEquals(const T &, const AlwaysPrinted<T> &) {
  return false;
}

FailureOr<APFloat> parseFloatParameter(AsmParser &parser) {
  double value;
  if (parser.parseFloat(value))
    return failure();
  return APFloat(value);
}

/// `true` or `false`.
FailureOr<bool> parseBoolParameter(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef word;
  if (parser.parseKeyword(&word))
    return failure();
  if (word == "true" || word == "false")
    return word == "true";
  return parser.emitError(loc)
         << "expected true or false, got '" << word << "'";
}

/// The layout's name, or llama.cpp's name of it, as the runtime spells them.
FailureOr<RopeLayout> parseRopeLayoutParameter(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef name;
  if (parser.parseKeyword(&name))
    return failure();
  std::optional<kvrt_rope_layout> alias = kvir::parseRopeLayout(name);
  std::optional<RopeLayout> layout =
      alias ? fromRuntime(*alias) : symbolizeRopeLayout(name);
  if (layout)
    return *layout;
  std::string known;
  for (unsigned i = 0; i <= getMaxEnumValForRopeLayout(); ++i)
    known +=
        (i ? (i == getMaxEnumValForRopeLayout() ? " or " : ", ") : "") +
        stringifyRopeLayout(static_cast<RopeLayout>(i)).str() + " (" +
        kvir::ropeLayoutLlamaCppName(toRuntime(static_cast<RopeLayout>(i))) +
        ")";
  return parser.emitError(loc)
         << "unknown RoPE layout '" << name << "' (expected " << known << ")";
}

FailureOr<DenseF32ArrayAttr> parseRopeFreqsParameter(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<float> factors;
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            APFloat value(0.0f);
            if (parser.parseFloat(APFloat::IEEEsingle(), value))
              return failure();
            factors.push_back(value.convertToFloat());
            return success();
          }))
    return failure();
  if (factors.empty())
    return parser.emitError(loc)
           << "model rope_freqs must not be empty (omit it)";
  return DenseF32ArrayAttr::get(parser.getContext(), factors);
}

void printRopeFreqsParameter(AsmPrinter &printer, DenseF32ArrayAttr factors) {
  printer << "[";
  llvm::interleaveComma(factors.asArrayRef(), printer, [&](float value) {
    printer << formatShortestFloat(value);
  });
  printer << "]";
}

} // namespace
} // namespace mlir::kv

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

LogicalResult ModelType::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t dim, int64_t hidden, int64_t layers,
                                int64_t heads, int64_t kvHeads, int64_t vocab,
                                RopeLayout rope, APFloat theta, APFloat eps,
                                int64_t ropeDim, APFloat ropeScale,
                                DenseF32ArrayAttr ropeFreqs, bool qkvBias) {
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
  config.qkv_bias = qkvBias ? 1 : 0;
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
  // Canonical: no scaling is 1, no factors no attribute (and the builder
  // makes rope_dim of the whole head 0), so that equal configs give the same
  // type.
  DenseF32ArrayAttr freqs;
  if (config.n_rope_freq_factors > 0)
    freqs = DenseF32ArrayAttr::get(
        context,
        ArrayRef<float>(config.rope_freq_factors, config.n_rope_freq_factors));
  return get(context, config.dim, config.hidden_dim, config.n_layers,
             config.n_heads, config.n_kv_heads, config.vocab_size,
             fromRuntime(config.rope_layout), APFloat(config.rope_theta),
             APFloat(config.rms_eps), config.rope_dim,
             APFloat(kvir::ropeScale(config)), freqs, config.qkv_bias != 0);
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
  config.qkv_bias = getQkvBias() ? 1 : 0;
  if (DenseF32ArrayAttr freqs = getRopeFreqs()) {
    config.n_rope_freq_factors = static_cast<int32_t>(freqs.size());
    llvm::copy(freqs.asArrayRef(), config.rope_freq_factors);
  }
  return config;
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
