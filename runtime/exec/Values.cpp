//===- Values.cpp - What crosses the entry of a program ---------*- C++ -*-===//

#include "runtime/exec/Values.h"

using namespace kvir;
using namespace kvir::exec;

const char *kvir::exec::valueKindName(ValueKind kind) {
  switch (kind) {
  case ValueKind::Model:
    return "model";
  case ValueKind::Index:
    return "index";
  case ValueKind::Tokens:
    return "tokens";
  case ValueKind::Logits:
    return "logits";
  case ValueKind::Cache:
    return "cache";
  case ValueKind::Tensor:
    return "tensor";
  }
  return "unknown";
}

ViewRef kvir::exec::adoptView(kvrt_view *view) {
  return ViewRef(view, [](kvrt_view *v) { kvrt_view_release(v); });
}
