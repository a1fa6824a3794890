//===- KVAttrs.cpp - Attributes of the kv dialect ---------------*- C++ -*-===//

#include "dialects/KV/KVAsmUtils.h"
#include "dialects/KV/KVDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kv;

#define GET_ATTRDEF_CLASSES
#include "dialects/KV/KVAttrs.cpp.inc"

void KVDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/KV/KVAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RepairAttr
//===----------------------------------------------------------------------===//

LogicalResult RepairAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 RepairKind kind, int64_t firstK,
                                 APFloat fraction, APFloat deviation) {
  if (kind == RepairKind::FirstK && firstK < 0)
    return emitError() << "repair budget first_k must be non-negative, got "
                       << firstK;
  if (kind == RepairKind::Fraction) {
    double f = fraction.convertToDouble();
    if (!(f >= 0.0 && f <= 1.0))
      return emitError() << "repair budget fraction must be in [0, 1], got "
                         << formatShortestFloat(f);
  }
  if (kind == RepairKind::Deviation) {
    double t = deviation.convertToDouble();
    if (!(t > 0.0 && std::isfinite(t)))
      return emitError() << "repair budget deviation must be a finite "
                            "threshold > 0, got "
                         << formatShortestFloat(t);
  }
  return success();
}

RepairAttr RepairAttr::parseBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return {};
  std::optional<RepairKind> kind = symbolizeRepairKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown repair budget '" << keyword
                          << "' (expected first_k, fraction or deviation)";
    return {};
  }
  if (parser.parseEqual())
    return {};
  int64_t firstK = 0;
  double fraction = 0.0, deviation = 0.0;
  if (*kind == RepairKind::FirstK) {
    if (parser.parseInteger(firstK))
      return {};
  } else if (parser.parseFloat(*kind == RepairKind::Fraction ? fraction
                                                             : deviation)) {
    return {};
  }
  return parser.getChecked<RepairAttr>(loc, parser.getContext(), *kind, firstK,
                                       APFloat(fraction), APFloat(deviation));
}

void RepairAttr::printBody(AsmPrinter &printer) const {
  printer << stringifyRepairKind(getKind()) << " = ";
  switch (getKind()) {
  case RepairKind::FirstK:
    printer << getFirstK();
    return;
  case RepairKind::Fraction:
    printShortestFloat(printer, getFraction());
    return;
  case RepairKind::Deviation:
    printShortestFloat(printer, getDeviation());
    return;
  }
}

Attribute RepairAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  RepairAttr attr = parseBody(parser);
  if (!attr || parser.parseGreater())
    return {};
  return attr;
}

void RepairAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printBody(printer);
  printer << ">";
}

//===----------------------------------------------------------------------===//
// StrategyAttr
//===----------------------------------------------------------------------===//

LogicalResult StrategyAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   StrategyKind kind, RepairAttr repair) {
  if (repair && kind != StrategyKind::CotSlice)
    return emitError() << "a repair budget needs the cot_slice strategy, not "
                       << stringifyStrategyKind(kind);
  return success();
}

Attribute StrategyAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<StrategyKind> kind = symbolizeStrategyKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown edit strategy '" << keyword
                          << "' (expected exact, cot_slice or erratum)";
    return {};
  }
  RepairAttr repair;
  if (succeeded(parser.parseOptionalComma())) {
    repair = RepairAttr::parseBody(parser);
    if (!repair)
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<StrategyAttr>(loc, parser.getContext(), *kind,
                                         repair);
}

void StrategyAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyStrategyKind(getKind());
  if (RepairAttr repair = getRepair()) {
    printer << ", ";
    repair.printBody(printer);
  }
  printer << ">";
}
