//===- WeightFormat.cpp - Weight formats and what a forward reads -*- C++ -*-=//

#include "runtime/core/WeightFormat.h"

#include <algorithm>
#include <cctype>
#include <iterator>

using namespace kvrt;
using kvir::WeightFormats;

BlockLayout kvrt::blockLayout(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return {1, 4};
  case KVRT_WEIGHT_F16:
  case KVRT_WEIGHT_BF16:
    return {1, 2};
  case KVRT_WEIGHT_Q8_0:
    return {32, 34};
  case KVRT_WEIGHT_Q4_0:
    return {32, 18};
  case KVRT_WEIGHT_Q4_K:
    return {256, 144};
  case KVRT_WEIGHT_Q5_K:
    return {256, 176};
  case KVRT_WEIGHT_Q6_K:
    return {256, 210};
  }
  return {1, 0};
}

bool kvrt::isBlockFormat(kvrt_weight_format format) {
  return blockLayout(format).elements > 1;
}

const char *kvrt::weightFormatName(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return "f32";
  case KVRT_WEIGHT_F16:
    return "f16";
  case KVRT_WEIGHT_BF16:
    return "bf16";
  case KVRT_WEIGHT_Q8_0:
    return "q8_0";
  case KVRT_WEIGHT_Q4_0:
    return "q4_0";
  case KVRT_WEIGHT_Q4_K:
    return "q4_k";
  case KVRT_WEIGHT_Q5_K:
    return "q5_k";
  case KVRT_WEIGHT_Q6_K:
    return "q6_k";
  }
  return "unknown";
}

std::optional<kvrt_weight_format> kvrt::weightFormatOf(int64_t value) {
  if (value < 0 || value >= KVRT_WEIGHT_FORMAT_COUNT)
    return std::nullopt;
  return static_cast<kvrt_weight_format>(value);
}

std::optional<kvrt_weight_format>
kvrt::parseWeightFormat(std::string_view name) {
  std::string lower;
  for (char c : name)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int f = 0; f < KVRT_WEIGHT_FORMAT_COUNT; ++f)
    if (lower == weightFormatName(static_cast<kvrt_weight_format>(f)))
      return static_cast<kvrt_weight_format>(f);
  return std::nullopt;
}

uint32_t kvrt::ggmlTypeOf(kvrt_weight_format format) {
  switch (format) {
  case KVRT_WEIGHT_F32:
    return 0;
  case KVRT_WEIGHT_F16:
    return 1;
  case KVRT_WEIGHT_BF16:
    return 30;
  case KVRT_WEIGHT_Q8_0:
    return 8;
  case KVRT_WEIGHT_Q4_0:
    return 2;
  case KVRT_WEIGHT_Q4_K:
    return 12;
  case KVRT_WEIGHT_Q5_K:
    return 13;
  case KVRT_WEIGHT_Q6_K:
    return 14;
  }
  return UINT32_MAX;
}

std::optional<kvrt_weight_format> kvrt::formatOfGgmlType(uint32_t type) {
  for (int f = 0; f < KVRT_WEIGHT_FORMAT_COUNT; ++f)
    if (ggmlTypeOf(static_cast<kvrt_weight_format>(f)) == type)
      return static_cast<kvrt_weight_format>(f);
  return std::nullopt;
}

const char *kvrt::ggmlTypeName(uint32_t type) {
  static const char *names[] = {
      "F32",        "F16",        "Q4_0",       "Q4_1",     "Q4_2",    "Q4_3",
      "Q5_0",       "Q5_1",       "Q8_0",       "Q8_1",     "Q2_K",    "Q3_K",
      "Q4_K",       "Q5_K",       "Q6_K",       "Q8_K",     "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS",    "IQ1_S",      "IQ4_NL",     "IQ3_S",    "IQ2_S",   "IQ4_XS",
      "I8",         "I16",        "I32",        "I64",      "F64",     "IQ1_M",
      "BF16",       "Q4_0_4_4",   "Q4_0_4_8",   "Q4_0_8_8", "TQ1_0",   "TQ2_0",
      "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return type < std::size(names) ? names[type] : "";
}

int64_t kvrt::weightRowBytes(kvrt_weight_format format, int64_t cols) {
  BlockLayout block = blockLayout(format);
  if (cols < 0 || cols % block.elements != 0)
    return -1;
  return cols / block.elements * block.bytes;
}

//===----------------------------------------------------------------------===//
// WeightFormats
//===----------------------------------------------------------------------===//

namespace {

/// The tensors a forward's formats name: the ones it reads.
bool readByForward(const TensorDecl &t) {
  return t.reader == TensorReader::Forward;
}

} // namespace

WeightFormats WeightFormats::of(const kvrt_model_weights &weights,
                                int32_t layers) {
  WeightFormats out;
  for (const TensorDecl &t : kTensors) {
    if (!readByForward(t))
      continue;
    const kvrt_weight &w = weights.*t.member;
    for (int64_t s = 0; s < w.n_slices; ++s)
      if (w.slices[s].format != KVRT_WEIGHT_F32)
        out.set(t.id, s, t.scope == TensorScope::Layer ? layers : 1,
                w.slices[s].format);
  }
  return out;
}

kvrt_weight_format WeightFormats::at(TensorId id, int64_t layer) const {
  const std::vector<kvrt_weight_format> &f = formats[static_cast<size_t>(id)];
  if (f.empty())
    return KVRT_WEIGHT_F32;
  return f[std::min<size_t>(static_cast<size_t>(layer), f.size() - 1)];
}

void WeightFormats::set(TensorId id, int64_t layer, int64_t layers,
                        kvrt_weight_format format) {
  std::vector<kvrt_weight_format> &f = formats[static_cast<size_t>(id)];
  if (f.empty())
    f.assign(static_cast<size_t>(std::max<int64_t>(layers, 1)),
             KVRT_WEIGHT_F32);
  if (layer >= 0 && static_cast<size_t>(layer) < f.size())
    f[static_cast<size_t>(layer)] = format;
}

bool WeightFormats::allF32() const {
  for (const std::vector<kvrt_weight_format> &f : formats)
    for (kvrt_weight_format format : f)
      if (format != KVRT_WEIGHT_F32)
        return false;
  return true;
}

std::string WeightFormats::spec() const {
  std::string out;
  for (const TensorDecl &t : kTensors) {
    const std::vector<kvrt_weight_format> &f =
        formats[static_cast<size_t>(t.id)];
    if (std::all_of(f.begin(), f.end(),
                    [](kvrt_weight_format x) { return x == KVRT_WEIGHT_F32; }))
      continue;
    out += out.empty() ? "" : ";";
    out += std::string(t.field) + ":";
    bool uniform = std::all_of(f.begin(), f.end(),
                               [&](kvrt_weight_format x) { return x == f[0]; });
    if (uniform) {
      out += weightFormatName(f[0]);
      continue;
    }
    for (size_t i = 0; i < f.size();) {
      size_t j = i;
      while (j < f.size() && f[j] == f[i])
        ++j;
      out += std::string(i ? "," : "") + weightFormatName(f[i]);
      if (j - i > 1)
        out += "*" + std::to_string(j - i);
      i = j;
    }
  }
  return out;
}

std::string WeightFormats::describe() const {
  return allF32() ? "f32" : spec();
}

std::optional<WeightFormats> WeightFormats::parse(std::string_view spec,
                                                  int32_t layers,
                                                  std::string &error) {
  WeightFormats out;
  if (spec.empty() || spec == "f32")
    return out;
  while (!spec.empty()) {
    size_t end = spec.find(';');
    std::string_view item = spec.substr(0, end);
    spec = end == std::string_view::npos ? std::string_view()
                                         : spec.substr(end + 1);
    size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      error = "'" + std::string(item) + "' is not FIELD:FORMATS";
      return std::nullopt;
    }
    std::string_view field = item.substr(0, colon);
    const TensorDecl *decl = nullptr;
    for (const TensorDecl &t : kTensors)
      if (field == t.field)
        decl = &t;
    if (!decl || !readByForward(*decl)) {
      error = "'" + std::string(field) +
              "' is not a weight the forward reads (ModelTensors.def)";
      return std::nullopt;
    }
    if (decl->kind != TensorKind::Matrix) {
      error = "'" + std::string(field) +
              "' is a vector (a norm or a bias): the forward reads it as "
              "f32";
      return std::nullopt;
    }
    int64_t slices = decl->scope == TensorScope::Layer ? layers : 1;
    std::vector<kvrt_weight_format> list;
    std::string_view rest = item.substr(colon + 1);
    while (true) {
      size_t comma = rest.find(',');
      std::string_view run = rest.substr(0, comma);
      size_t star = run.find('*');
      int64_t count = 1;
      if (star != std::string_view::npos) {
        std::string digits(run.substr(star + 1));
        count =
            digits.empty() || digits.size() > 9 ||
                    digits.find_first_not_of("0123456789") != std::string::npos
                ? 0
                : std::stoll(digits);
        if (count <= 0) {
          error = "bad count in '" + std::string(run) + "'";
          return std::nullopt;
        }
        run = run.substr(0, star);
      }
      std::optional<kvrt_weight_format> format = kvrt::parseWeightFormat(run);
      if (!format) {
        error = "unknown weight format '" + std::string(run) +
                "' (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k)";
        return std::nullopt;
      }
      if (int64_t(list.size()) + count > slices) {
        error = "'" + std::string(item) + "' names more than the " +
                std::to_string(slices) + " slices of " + decl->field;
        return std::nullopt;
      }
      list.insert(list.end(), static_cast<size_t>(count), *format);
      if (comma == std::string_view::npos)
        break;
      rest = rest.substr(comma + 1);
    }
    if (list.size() == 1)
      list.assign(static_cast<size_t>(slices), list[0]);
    if (int64_t(list.size()) != slices) {
      error = "'" + std::string(item) + "' names " +
              std::to_string(list.size()) + " slices of " + decl->field +
              ", which has " + std::to_string(slices);
      return std::nullopt;
    }
    out.formats[static_cast<size_t>(decl->id)] = list;
  }
  return out;
}

std::vector<kvrt_weight_format> WeightFormats::used() const {
  std::vector<bool> seen(KVRT_WEIGHT_FORMAT_COUNT, false);
  seen[KVRT_WEIGHT_F32] = true;
  for (const std::vector<kvrt_weight_format> &f : formats)
    for (kvrt_weight_format format : f)
      seen[format] = true;
  std::vector<kvrt_weight_format> out;
  for (int f = 0; f < KVRT_WEIGHT_FORMAT_COUNT; ++f)
    if (seen[f])
      out.push_back(static_cast<kvrt_weight_format>(f));
  return out;
}
