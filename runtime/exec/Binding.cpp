//===- Binding.cpp - The arguments of an entry ------------------*- C++ -*-===//

#include "runtime/exec/Binding.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/exec/TokenInput.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

using namespace kvir;
using namespace kvir::exec;
using kvrt::str;

namespace {

/// splitmix64, as the synthetic models use.
uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The first field in which a program's model type and the loaded model
/// differ, as "field = a, the model has field = b", or "".
std::string modelMismatch(const kvrt_model_config &type,
                          const kvrt_model_config &c) {
  struct Field {
    const char *name;
    int64_t expected, actual;
  };
  for (Field f : {Field{"dim", type.dim, c.dim},
                  Field{"hidden", type.hidden_dim, c.hidden_dim},
                  Field{"layers", type.n_layers, c.n_layers},
                  Field{"heads", type.n_heads, c.n_heads},
                  Field{"kv_heads", type.n_kv_heads, c.n_kv_heads},
                  Field{"vocab", type.vocab_size, c.vocab_size}})
    if (f.expected != f.actual)
      return str(f.name, " = ", f.expected, ", the model has ", f.name, " = ",
                 f.actual);
  if (type.qkv_bias != c.qkv_bias)
    return str("qkv_bias = ", type.qkv_bias ? "true" : "false",
               ", the model has qkv_bias = ", c.qkv_bias ? "true" : "false");
  if (type.rope_layout != c.rope_layout)
    return str("rope = ", ropeLayoutName(type.rope_layout),
               ", the model has rope = ", ropeLayoutName(c.rope_layout));
  auto close = [](double a, double b) {
    return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
  };
  if (!close(type.rope_theta, c.rope_theta))
    return str("theta = ", type.rope_theta,
               ", the model has theta = ", c.rope_theta);
  if (!close(type.rms_eps, c.rms_eps))
    return str("eps = ", type.rms_eps, ", the model has eps = ", c.rms_eps);
  if (ropeDims(type) != ropeDims(c))
    return str("rope_dim = ", ropeDims(type),
               ", the model has rope_dim = ", ropeDims(c));
  if (!close(ropeScale(type), ropeScale(c)))
    return str("rope_scale = ", ropeScale(type),
               ", the model has rope_scale = ", ropeScale(c));
  if (type.n_rope_freq_factors != c.n_rope_freq_factors)
    return str(type.n_rope_freq_factors, " rope_freqs, the model has ",
               c.n_rope_freq_factors);
  for (int32_t i = 0; i < c.n_rope_freq_factors; ++i)
    if (type.rope_freq_factors[i] != c.rope_freq_factors[i])
      return str("rope_freqs[", i, "] = ", type.rope_freq_factors[i],
                 ", the model has rope_freqs[", i,
                 "] = ", c.rope_freq_factors[i]);
  return "";
}

/// Fails unless an input of `size` tokens (or rows: `unit`) fits the static
/// size of `spec`, where it has one.
bool fitsStaticSize(const ArgSpec &spec, int64_t size, const char *unit,
                    const std::string &what, std::string &error) {
  if (spec.dims[0] < 0 || size == spec.dims[0])
    return true;
  error = str(what, " has ", spec.dims[0], " ", unit,
              " in its type, its input has ", size);
  return false;
}

/// Appends to `out` the synthesized values of argument `i`: its static
/// size, else its sample length, else the default length, in tokens or rows
/// of `perRow` values, each `draw(state)` from splitmix64 seeded by --seed
/// and the position. False (with `error`) when that length may not be
/// synthesized: a length is an allocation and then work, so it is bounded
/// first.
template <typename T, typename Draw>
bool synthesize(const ArgSpec &spec, size_t i, const std::string &what,
                const InputOptions &options, int64_t perRow, Draw draw,
                std::vector<T> &out, std::string &error) {
  int64_t length = spec.dims[0] >= 0        ? spec.dims[0]
                   : spec.sampleLength >= 0 ? spec.sampleLength
                                            : options.dynamicLength;
  if (length < 0 || length > options.maxSynthesized) {
    error = str("cannot synthesize ", length, " tokens for ", what,
                ": more than the ", options.maxSynthesized, " ",
                options.maxSynthesizedBy);
    return false;
  }
  uint64_t state = options.seed * 0x100000001b3ULL + i;
  for (int64_t k = 0; k < length * perRow; ++k)
    out.push_back(draw(state));
  return true;
}

} // namespace

bool kvir::exec::bindArguments(const EntryManifest &manifest,
                               const kvrt_model_config &config,
                               const InputOptions &options,
                               std::vector<Value> &args,
                               std::vector<BoundInput> *bound,
                               std::string &error) {
  args.clear();
  std::set<std::string> used;
  int64_t headSize = config.dim / config.n_heads;
  for (size_t i = 0; i < manifest.args.size(); ++i) {
    const ArgSpec &spec = manifest.args[i];
    std::string position = "arg" + std::to_string(i);
    const std::string &name = spec.name.empty() ? position : spec.name;
    std::string what = "argument " + position +
                       (name != position ? " (" + name + ")" : "") + " of @" +
                       manifest.entry;
    Value value;
    value.kind = spec.kind;
    switch (spec.kind) {
    case ValueKind::Model: {
      std::string mismatch = modelMismatch(spec.model, config);
      if (!mismatch.empty()) {
        error = what +
                " does not match the loaded model: the program's "
                "!kv.model has " +
                mismatch;
        return false;
      }
      args.push_back(value);
      if (bound)
        bound->push_back({name, -1, false});
      continue;
    }
    case ValueKind::Tokens:
    case ValueKind::Tensor:
      break;
    case ValueKind::Index:
    case ValueKind::Logits:
    case ValueKind::Cache:
      error = what + " is a " + valueKindName(spec.kind) +
              ", which a runner cannot bind (it binds !kv.model, token "
              "tensors and f32 query tensors)";
      return false;
    }
    const std::pair<std::string, std::string> *given = nullptr;
    const InputOptions::Encoded *encoded = nullptr;
    std::vector<std::string> keys = {name};
    if (name != position)
      keys.push_back(position);
    // Who gave it, e.g. "--input t" and "--text arg1": one at most.
    std::vector<std::string> givers;
    for (const std::string &key : keys) {
      if (auto it = options.given.find(key); it != options.given.end()) {
        given = &it->second;
        givers.push_back("--input " + key);
        used.insert(key);
      }
      if (auto it = options.givenTokens.find(key);
          it != options.givenTokens.end()) {
        encoded = &it->second;
        givers.push_back(it->second.option + " " + key);
        used.insert(key);
      }
    }
    if (givers.size() > 1) {
      error =
          what + " is given twice (as " + givers[0] + " and " + givers[1] + ")";
      return false;
    }
    if (encoded && spec.kind != ValueKind::Tokens) {
      error = what + " is an f32 tensor: " + encoded->option +
              " binds token arguments";
      return false;
    }
    bool synthesized = false;
    int64_t size = 0;
    if (spec.kind == ValueKind::Tokens) {
      if (encoded) {
        value.tokens = encoded->tokens;
      } else if (given) {
        if (!parseTokenList(given->first, given->second, value.tokens, error))
          return false;
      } else if (options.synthesize) {
        auto token = [&](uint64_t &state) {
          return int32_t(splitmix64(state) % uint64_t(config.vocab_size));
        };
        if (!synthesize(spec, i, what, options, 1, token, value.tokens, error))
          return false;
        synthesized = true;
      } else {
        error =
            "no input for " + what + " (tokens): give --input " + name +
            "=FILE" +
            (options.givenTokens.empty() ? "" : ", --text " + name + "=...") +
            ", or --synthesize-inputs";
        return false;
      }
      size = int64_t(value.tokens.size());
      if (!fitsStaticSize(spec, size, "tokens", what, error))
        return false;
      for (size_t t = 0; t < value.tokens.size(); ++t)
        if (value.tokens[t] >= config.vocab_size) {
          error = str(
              "token ", value.tokens[t], " at index ", t, " of the input for ",
              what, " is outside the vocabulary [0, ", config.vocab_size, ")");
          return false;
        }
    } else {
      auto tensor = std::make_shared<Tensor>();
      int64_t rowFloats = int64_t(config.n_heads) * headSize;
      if (spec.dims[1] != config.n_heads || spec.dims[2] != headSize) {
        error = str(what, " is a ", spec.dims[0], "x", spec.dims[1], "x",
                    spec.dims[2], " tensor; the model's queries are n x ",
                    config.n_heads, " x ", headSize);
        return false;
      }
      if (given) {
        if (!parseFloatList(given->first, given->second, tensor->data, error))
          return false;
        if (tensor->data.empty()) {
          error = "no floats in " + given->second;
          return false;
        }
        if (tensor->data.size() % rowFloats != 0) {
          error = str("the input for ", what, " has ", tensor->data.size(),
                      " floats, not a multiple of ", rowFloats,
                      " (heads x head size)");
          return false;
        }
      } else if (options.synthesize) {
        // Uniform in [-1, 1).
        auto uniform = [](uint64_t &state) {
          return float(double(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
        };
        if (!synthesize(spec, i, what, options, rowFloats, uniform,
                        tensor->data, error))
          return false;
        synthesized = true;
      } else {
        error = "no input for " + what + " (an f32 tensor): give --input " +
                name + "=FILE of floats, or --synthesize-inputs";
        return false;
      }
      size = int64_t(tensor->data.size()) / rowFloats;
      if (!fitsStaticSize(spec, size, "rows", what, error))
        return false;
      tensor->dims[0] = size;
      tensor->dims[1] = config.n_heads;
      tensor->dims[2] = headSize;
      value.tensor = std::move(tensor);
    }
    if (bound) {
      bound->push_back({name, size, synthesized});
      if (encoded) {
        bound->back().fromText = true;
        bound->back().text = encoded->text;
        bound->back().bos = encoded->bos;
      }
    }
    args.push_back(std::move(value));
  }
  for (const auto &[key, text] : options.given)
    if (!used.count(key)) {
      error = "--input " + key + " names no argument of @" + manifest.entry +
              " (use argN or the argument's kv.name)";
      return false;
    }
  for (const auto &[key, encoded] : options.givenTokens)
    if (!used.count(key)) {
      error = encoded.option + " " + key + " names no argument of @" +
              manifest.entry + " (use argN or the argument's kv.name)";
      return false;
    }
  return true;
}
