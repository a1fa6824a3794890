//===- Session.cpp - Running a compiled kv program --------------*- C++ -*-===//

#include "runtime/exec/Session.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/ModelCost.h"
#include "runtime/core/Support.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

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

/// Names and sites travel as single words: '%', whitespace and control
/// characters are percent-escaped.
std::string escape(const std::string &text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '%' || c <= ' ' || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out.empty() ? "%" : out;
}

bool unescape(const std::string &word, std::string &out) {
  out.clear();
  if (word == "%")
    return true;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '%') {
      out += word[i];
      continue;
    }
    if (i + 2 >= word.size())
      return false;
    char hex[3] = {word[i + 1], word[i + 2], 0};
    char *end = nullptr;
    long value = std::strtol(hex, &end, 16);
    if (*end)
      return false;
    out += char(value);
    i += 2;
  }
  return true;
}

bool parseInt(const std::string &word, int64_t &out) {
  if (word.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(word.c_str(), &end, 10);
  if (*end || errno)
    return false;
  out = value;
  return true;
}

bool parseDouble(const std::string &word, double &out) {
  if (word.empty())
    return false;
  char *end = nullptr;
  out = std::strtod(word.c_str(), &end);
  return !*end;
}

const ValueKind kAllKinds[] = {ValueKind::Model,  ValueKind::Index,
                               ValueKind::Tokens, ValueKind::Logits,
                               ValueKind::Cache,  ValueKind::Tensor};

bool parseKind(const std::string &word, ValueKind &out) {
  for (ValueKind kind : kAllKinds)
    if (word == valueKindName(kind)) {
      out = kind;
      return true;
    }
  return false;
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

/// The RoPE frequency variants of a model argument as one manifest word
/// (`rope-ext=DIM,SCALE[,FACTOR...]`, hexadecimal floats), "" for none.
std::string ropeExtensionWord(const kvrt_model_config &m) {
  if (ropeDims(m) == headSize(m) && !ropeHasFrequencyDivisor(m))
    return "";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%d,%a", m.rope_dim, ropeScale(m));
  std::string word = str("rope-ext=", buf);
  for (int32_t i = 0; i < m.n_rope_freq_factors; ++i) {
    std::snprintf(buf, sizeof(buf), ",%a", double(m.rope_freq_factors[i]));
    word += buf;
  }
  return word;
}

/// Parses ropeExtensionWord's word into `m`.
bool parseRopeExtensionWord(const std::string &word, kvrt_model_config &m) {
  const std::string prefix = "rope-ext=";
  if (word.compare(0, prefix.size(), prefix) != 0)
    return false;
  std::vector<std::string> items;
  std::istringstream in(word.substr(prefix.size()));
  for (std::string item; std::getline(in, item, ',');)
    items.push_back(item);
  int64_t dim;
  if (items.size() < 2 || items.size() - 2 > KVRT_MAX_ROPE_PAIRS ||
      !parseInt(items[0], dim) || dim < 0 || dim > INT32_MAX ||
      !parseDouble(items[1], m.rope_scale))
    return false;
  m.rope_dim = int32_t(dim);
  m.n_rope_freq_factors = int32_t(items.size() - 2);
  for (size_t i = 2; i < items.size(); ++i) {
    double factor;
    if (!parseDouble(items[i], factor))
      return false;
    m.rope_freq_factors[i - 2] = float(factor);
  }
  return true;
}

/// Parses whitespace-separated numbers; false with a message naming the
/// first bad item.
template <typename T, typename Parse>
bool parseList(const std::string &text, const std::string &source,
               const char *what, Parse parse, std::vector<T> &out,
               std::string &error) {
  std::istringstream in(text);
  std::string word;
  for (size_t i = 1; in >> word; ++i) {
    T value;
    if (!parse(word, value)) {
      error = str("malformed ", what, " list in ", source, ": item ", i, " '",
                  word, "' is not ",
                  what == std::string("token") ? "a non-negative int32 token id"
                                               : "a finite float");
      return false;
    }
    out.push_back(value);
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// The entry's signature
//===----------------------------------------------------------------------===//

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

std::string kvir::exec::entrySymbol(const std::string &entry) {
  return "_kvrt_entry_" + entry;
}

std::string kvir::exec::manifestSymbol(const std::string &entry) {
  return "_kvrt_manifest_" + entry;
}

std::string EntryManifest::serialize() const {
  std::ostringstream os;
  os << "kvir-manifest 1\n";
  os << "entry " << escape(entry) << "\n";
  os << "target " << escape(target) << "\n";
  os << "kv-dtype " << kvDtypeName(kvDtype) << "\n";
  os << "plan-ops " << (hasPlanOps ? 1 : 0) << "\n";
  for (const ArgSpec &a : args) {
    os << "arg " << valueKindName(a.kind) << " " << escape(a.name) << " "
       << a.dims[0] << " " << a.dims[1] << " " << a.dims[2] << " "
       << a.sampleLength;
    if (a.kind == ValueKind::Model) {
      const kvrt_model_config &m = a.model;
      char buf[96];
      std::snprintf(buf, sizeof(buf), " %a %a", m.rope_theta, m.rms_eps);
      os << " " << m.dim << " " << m.hidden_dim << " " << m.n_layers << " "
         << m.n_heads << " " << m.n_kv_heads << " " << m.vocab_size << " "
         << ropeLayoutName(m.rope_layout) << buf;
      if (std::string ext = ropeExtensionWord(m); !ext.empty())
        os << " " << ext;
    }
    os << "\n";
  }
  for (ValueKind kind : results)
    os << "result " << valueKindName(kind) << "\n";
  for (const std::string &site : sites)
    os << "site " << escape(site) << "\n";
  os << "end\n";
  return os.str();
}

bool EntryManifest::parse(const std::string &text, EntryManifest &out,
                          std::string &error) {
  out = EntryManifest();
  std::istringstream in(text);
  std::string line;
  size_t lineNo = 0;
  bool ended = false;
  auto bad = [&](const std::string &why) {
    error = str("malformed program manifest, line ", lineNo, ": ", why);
    return false;
  };
  while (std::getline(in, line)) {
    ++lineNo;
    // Every line, 'end' included, ends with a newline: one without it is the
    // cut-off tail of a manifest, whatever its words say.
    if (in.eof())
      return bad("cut off before its newline (truncated?)");
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;)
      w.push_back(word);
    if (w.empty())
      continue;
    if (lineNo == 1) {
      if (w.size() != 2 || w[0] != "kvir-manifest" || w[1] != "1")
        return bad("expected 'kvir-manifest 1'");
      continue;
    }
    if (w[0] == "entry" && w.size() == 2) {
      if (!unescape(w[1], out.entry))
        return bad("bad entry name");
    } else if (w[0] == "target" && w.size() == 2) {
      if (!unescape(w[1], out.target) ||
          (out.target != "cpu" && out.target != "gpu"))
        return bad("unknown target '" + w[1] + "'");
    } else if (w[0] == "kv-dtype" && w.size() == 2) {
      std::optional<kvrt_kv_dtype> dtype = parseKvDtype(w[1]);
      if (!dtype)
        return bad("unknown kv-dtype '" + w[1] + "'");
      out.kvDtype = *dtype;
    } else if (w[0] == "plan-ops" && w.size() == 2) {
      out.hasPlanOps = w[1] == "1";
    } else if (w[0] == "arg" && w.size() >= 7) {
      ArgSpec a;
      if (!parseKind(w[1], a.kind) || !unescape(w[2], a.name) ||
          !parseInt(w[3], a.dims[0]) || !parseInt(w[4], a.dims[1]) ||
          !parseInt(w[5], a.dims[2]) || !parseInt(w[6], a.sampleLength))
        return bad("bad argument");
      if (a.kind == ValueKind::Model) {
        int64_t v[6];
        if (w.size() != 16 && w.size() != 17)
          return bad("a model argument needs its architecture");
        for (int i = 0; i < 6; ++i)
          if (!parseInt(w[7 + i], v[i]) || v[i] <= 0 || v[i] > INT32_MAX)
            return bad("bad model size");
        kvrt_model_config &m = a.model;
        m.dim = int32_t(v[0]);
        m.hidden_dim = int32_t(v[1]);
        m.n_layers = int32_t(v[2]);
        m.n_heads = int32_t(v[3]);
        m.n_kv_heads = int32_t(v[4]);
        m.vocab_size = int32_t(v[5]);
        std::optional<kvrt_rope_layout> rope = parseRopeLayout(w[13]);
        if (!rope || !parseDouble(w[14], m.rope_theta) ||
            !parseDouble(w[15], m.rms_eps))
          return bad("bad model RoPE, theta or eps");
        m.rope_layout = *rope;
        m.seq_len = 0;
        m.shared_classifier = 1;
        if (w.size() == 17 && !parseRopeExtensionWord(w[16], m))
          return bad("bad model RoPE variants '" + w[16] + "'");
      }
      out.args.push_back(a);
    } else if (w[0] == "result" && w.size() == 2) {
      ValueKind kind;
      if (!parseKind(w[1], kind))
        return bad("bad result kind '" + w[1] + "'");
      out.results.push_back(kind);
    } else if (w[0] == "site" && w.size() == 2) {
      std::string site;
      if (!unescape(w[1], site))
        return bad("bad site");
      out.sites.push_back(site);
    } else if (w[0] == "end" && w.size() == 1) {
      ended = true;
      break;
    } else {
      return bad("unexpected '" + w[0] + "'");
    }
  }
  if (lineNo == 0)
    return bad("empty");
  if (!ended)
    return bad("no 'end' (truncated?)");
  if (out.entry.empty())
    return bad("no entry name");
  return true;
}

//===----------------------------------------------------------------------===//
// Binding and running
//===----------------------------------------------------------------------===//

kvrt_model *kvir::exec::loadModel(const std::string &file,
                                  const std::string &synthetic, uint64_t seed,
                                  std::string &description,
                                  std::string &error) {
  kvrt_model *model = nullptr;
  if (!file.empty()) {
    if (kvrt_model_load(file.c_str(), &model)) {
      error = str("cannot load the model: ", kvrt_last_error());
      return nullptr;
    }
    description = file;
    return model;
  }
  kvrt_model_config c;
  kvrt_model_config_init(&c);
  uint64_t presetSeed = 1;
  std::string what;
  if (synthetic == "default") {
    what = "stories260K's shape, random weights: pass --model FILE for a "
           "trained checkpoint";
  } else if (synthetic == "synthetic-test") {
    c.dim = 256;
    c.hidden_dim = 512;
    c.n_layers = 3;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.vocab_size = 300;
    c.rope_layout = KVRT_ROPE_HALF;
    c.rope_theta = 1000000.0;
    c.seq_len = 1 << 16;
    c.shared_classifier = 0;
    presetSeed = 7;
    what = "dim 256, 4/2 heads of 64, half RoPE, theta 1e6";
  } else if (synthetic == "synthetic-bench") {
    c.dim = 1024;
    c.hidden_dim = 2816;
    c.n_layers = 8;
    c.n_heads = 8;
    c.n_kv_heads = 8;
    c.vocab_size = 1024;
    c.seq_len = 1 << 16;
    c.shared_classifier = 0;
    what = "dim 1024, 8 layers, 8 heads of 128";
  } else {
    error = "unknown synthetic model '" + synthetic +
            "' (available: default, synthetic-test, synthetic-bench)";
    return nullptr;
  }
  if (seed == 0)
    seed = presetSeed;
  if (kvrt_model_synthetic(&c, seed, &model)) {
    error = str("cannot build the synthetic model: ", kvrt_last_error());
    return nullptr;
  }
  description = str(synthetic == "default" ? "built-in synthetic model"
                                           : "synthetic model " + synthetic,
                    " (seed ", seed, ", ", what, ")");
  return model;
}

bool kvir::exec::parseTokenList(const std::string &text,
                                const std::string &source,
                                std::vector<int32_t> &out, std::string &error) {
  out.clear();
  if (!parseList<int32_t>(
          text, source, "token",
          [](const std::string &w, int32_t &v) {
            int64_t x;
            if (!parseInt(w, x) || x < 0 ||
                x > std::numeric_limits<int32_t>::max())
              return false;
            v = int32_t(x);
            return true;
          },
          out, error))
    return false;
  if (out.empty()) {
    error = "no token ids in " + source;
    return false;
  }
  return true;
}

bool kvir::exec::readFile(const std::string &path, std::string &out,
                          std::string &error, const char *what,
                          uint64_t maxBytes) {
  kvrt::File file;
  uint64_t bytes = 0;
  bool regular = false;
  if (kvrt::openInputFile(path.c_str(), what, file, &bytes, &regular)) {
    error = kvrt_last_error();
    return false;
  }
  auto tooLong = [&](uint64_t size, const char *qualifier) {
    error = str(what, " '", path, "' has ", qualifier, size,
                " bytes, more than the ", maxBytes, " a runner reads");
    out.clear();
    return false;
  };
  if (regular && bytes > maxBytes)
    return tooLong(bytes, "");
  // A pipe or a device has no size: read until its end, or past the bound.
  out.clear();
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) {
    if (out.size() + n > maxBytes)
      return tooLong(out.size() + n, "at least ");
    out.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    error = str("cannot read ", what, " '", path, "': ", std::strerror(errno));
    out.clear();
    return false;
  }
  return true;
}

ViewRef kvir::exec::adoptView(kvrt_view *view) {
  return ViewRef(view, [](kvrt_view *v) { kvrt_view_release(v); });
}

namespace {

/// Whether an input of `length` tokens (or rows) may be synthesized: a
/// length is an allocation and then work, so it is bounded first.
bool synthesizable(const std::string &what, int64_t length,
                   const InputOptions &options, std::string &error) {
  if (length >= 0 && length <= options.maxSynthesized)
    return true;
  error = str("cannot synthesize ", length, " tokens for ", what,
              ": more than the ", options.maxSynthesized,
              " the run's context may hold (--max-context)");
  return false;
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
        int64_t length = spec.dims[0] >= 0        ? spec.dims[0]
                         : spec.sampleLength >= 0 ? spec.sampleLength
                                                  : options.dynamicLength;
        if (!synthesizable(what, length, options, error))
          return false;
        uint64_t state = options.seed * 0x100000001b3ULL + i;
        for (int64_t t = 0; t < length; ++t)
          value.tokens.push_back(
              int32_t(splitmix64(state) % uint64_t(config.vocab_size)));
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
      if (spec.dims[0] >= 0 && size != spec.dims[0]) {
        error = str(what, " has ", spec.dims[0],
                    " tokens in its type, its "
                    "input has ",
                    size);
        return false;
      }
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
        if (!parseList<float>(
                given->first, given->second, "float",
                [](const std::string &w, float &v) {
                  double d;
                  if (!parseDouble(w, d) || !std::isfinite(d))
                    return false;
                  v = float(d);
                  return true;
                },
                tensor->data, error))
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
        int64_t rows = spec.dims[0] >= 0        ? spec.dims[0]
                       : spec.sampleLength >= 0 ? spec.sampleLength
                                                : options.dynamicLength;
        if (!synthesizable(what, rows, options, error))
          return false;
        uint64_t state = options.seed * 0x100000001b3ULL + i;
        for (int64_t f = 0; f < rows * rowFloats; ++f)
          tensor->data.push_back(
              float(double(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0));
        synthesized = true;
      } else {
        error = "no input for " + what + " (an f32 tensor): give --input " +
                name + "=FILE of floats, or --synthesize-inputs";
        return false;
      }
      size = int64_t(tensor->data.size()) / rowFloats;
      if (spec.dims[0] >= 0 && size != spec.dims[0]) {
        error = str(what, " has ", spec.dims[0],
                    " rows in its type, its "
                    "input has ",
                    size);
        return false;
      }
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

namespace {

WorkStats toStats(const kvrt_exec_work &w) {
  WorkStats s;
  s.prefillCalls = w.prefill_calls;
  s.prefillTokens = w.prefill_tokens;
  s.logitsRows = w.logits_rows;
  s.scanTokens = w.scan_tokens;
  s.flops = w.flops;
  s.kvBytesWritten = w.kv_bytes_written;
  s.seconds = w.seconds;
  return s;
}

/// A new reference to a view the context owns.
ViewRef retained(kvrt_view *view) {
  if (!view)
    return nullptr;
  kvrt_exec_view_retain(view);
  return adoptView(view);
}

using ContextPtr =
    std::unique_ptr<kvrt_exec_context, void (*)(kvrt_exec_context *)>;

} // namespace

int64_t kvir::exec::defaultMaxContext(const kvrt_model_config &config) {
  return 8 * int64_t(config.seq_len > 0 ? config.seq_len : 512);
}

RunOutcome kvir::exec::runEntry(EntryFn entry, const EntryManifest &manifest,
                                ComputeBackend &backend,
                                const kvrt_model *model, kvrt_pool *pool,
                                const std::vector<Value> &args,
                                int64_t maxContext,
                                const BlockStoreBinding *blockStore) {
  RunOutcome outcome;
  auto fail = [&](const std::string &message) {
    outcome.failed = true;
    outcome.status = KVRT_ERR_INVALID_ARGUMENT;
    outcome.message = message;
    return outcome;
  };
  if (!entry)
    return fail("the program has no compiled entry");
  if (args.size() != manifest.args.size())
    return fail(str("@", manifest.entry, " takes ", manifest.args.size(),
                    " arguments, ", args.size(), " were bound"));
  ContextPtr ctx(createExecContext(backend, model, pool, maxContext),
                 kvrt_exec_context_destroy);
  if (!ctx)
    return fail("cannot create the execution context");
  if (blockStore && blockStore->store)
    kvrt_exec_set_block_store(ctx.get(), blockStore->store, blockStore->policy);

  std::vector<int64_t> slots;
  for (const Value &arg : args) {
    switch (arg.kind) {
    case ValueKind::Model:
      slots.push_back(int64_t(reinterpret_cast<intptr_t>(model)));
      break;
    case ValueKind::Tokens:
      slots.push_back(
          int64_t(reinterpret_cast<intptr_t>(kvrt_exec_tokens_constant(
              ctx.get(), KVRT_EXEC_NO_SITE, arg.tokens.data(),
              int64_t(arg.tokens.size())))));
      break;
    case ValueKind::Tensor:
      slots.push_back(
          int64_t(reinterpret_cast<intptr_t>(kvrt_exec_tensor_create(
              ctx.get(), arg.tensor->data.data(), arg.tensor->dims[0],
              arg.tensor->dims[1], arg.tensor->dims[2]))));
      break;
    case ValueKind::Index:
      slots.push_back(arg.index);
      break;
    case ValueKind::Logits:
    case ValueKind::Cache:
      return fail("a runner binds models, token lists, tensors and integers "
                  "only");
    }
  }
  std::vector<int64_t> results(manifest.results.size() + 1, 0);
  // A program without edit, compose or logits ops is all plan.
  if (!manifest.hasPlanOps)
    kvrt_exec_plan_begin(ctx.get());
  if (!kvrt_exec_failed(ctx.get()))
    entry(ctx.get(), slots.data(), results.data());

  kvrt_exec_work work;
  kvrt_exec_get_work(ctx.get(), 1, &work);
  outcome.plan = toStats(work);
  kvrt_exec_get_work(ctx.get(), 0, &work);
  outcome.setup = toStats(work);
  outcome.contextTokens = kvrt_exec_context_tokens(ctx.get());
  outcome.repairs.resize(kvrt_exec_num_repairs(ctx.get()));
  for (size_t i = 0; i < outcome.repairs.size(); ++i)
    kvrt_exec_get_repair(ctx.get(), int64_t(i), &outcome.repairs[i]);
  outcome.blockEvents.resize(kvrt_exec_num_block_events(ctx.get()));
  for (size_t i = 0; i < outcome.blockEvents.size(); ++i) {
    BlockEvent &e = outcome.blockEvents[i];
    kvrt_exec_get_block_event(ctx.get(), int64_t(i), &e.event);
    e.key = e.event.key;
    e.message = e.event.message;
    e.event.key = e.event.message = nullptr;
  }
  if (kvrt_exec_failed(ctx.get())) {
    outcome.failed = true;
    outcome.status = kvrt_exec_error_status(ctx.get());
    outcome.message = kvrt_exec_error_message(ctx.get());
    outcome.site = kvrt_exec_error_site(ctx.get());
    return outcome;
  }

  for (size_t i = 0; i < manifest.results.size(); ++i) {
    int64_t slot = results[i];
    void *pointer = reinterpret_cast<void *>(intptr_t(slot));
    Value value;
    value.kind = manifest.results[i];
    switch (value.kind) {
    case ValueKind::Cache:
      value.cache = retained(static_cast<kvrt_view *>(pointer));
      break;
    case ValueKind::Model:
      break;
    case ValueKind::Tokens: {
      auto *tokens = static_cast<kvrt_exec_tokens *>(pointer);
      const int32_t *data = kvrt_exec_tokens_data(tokens);
      value.tokens.assign(data,
                          data + kvrt_exec_tokens_size(ctx.get(), tokens));
      break;
    }
    case ValueKind::Logits: {
      auto *handle = static_cast<kvrt_exec_logits *>(pointer);
      auto logits = std::make_shared<Logits>();
      logits->rows = kvrt_exec_logits_rows(handle);
      logits->vocab = kvrt_exec_logits_vocab(handle);
      const float *data = kvrt_exec_logits_data(handle);
      logits->data.assign(data, data + logits->rows * logits->vocab);
      logits->context = retained(kvrt_exec_logits_context(handle));
      logits->result = retained(kvrt_exec_logits_result(handle));
      const kvrt_exec_tokens *tokens = kvrt_exec_logits_tokens(handle);
      const int32_t *ids = kvrt_exec_tokens_data(tokens);
      logits->tokens.assign(ids,
                            ids + kvrt_exec_tokens_size(ctx.get(), tokens));
      logits->position = kvrt_exec_logits_position(handle);
      logits->lastOnly = kvrt_exec_logits_last_only(handle);
      value.logits = std::move(logits);
      break;
    }
    case ValueKind::Tensor: {
      auto *handle = static_cast<kvrt_exec_tensor *>(pointer);
      auto tensor = std::make_shared<Tensor>();
      for (int d = 0; d < 3; ++d)
        tensor->dims[d] = kvrt_exec_tensor_size(handle, d);
      const float *data = kvrt_exec_tensor_data(handle);
      tensor->data.assign(data, data + tensor->dims[0] * tensor->dims[1] *
                                           tensor->dims[2]);
      value.tensor = std::move(tensor);
      break;
    }
    case ValueKind::Index:
      value.index = slot;
      break;
    }
    outcome.results.push_back(std::move(value));
  }
  return outcome;
}

//===----------------------------------------------------------------------===//
// Measurements
//===----------------------------------------------------------------------===//

std::vector<int32_t> kvir::exec::viewTokens(const kvrt_view *view) {
  std::vector<int32_t> tokens;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) == KVRT_OK)
      tokens.insert(tokens.end(), run.tokens, run.tokens + run.n_tokens);
  }
  return tokens;
}

bool kvir::exec::hasContiguousPositions(const kvrt_view *view) {
  int64_t next = 0;
  for (int64_t r = 0, e = kvrt_view_num_runs(view); r < e; ++r) {
    kvrt_run run;
    if (kvrt_view_get_run(view, r, &run) != KVRT_OK ||
        run.base_pos + run.delta != next)
      return false;
    next += run.n_tokens;
  }
  return true;
}

int64_t kvir::exec::endPosition(const kvrt_view *view) {
  int64_t n = kvrt_view_num_runs(view);
  kvrt_run run;
  if (n == 0 || kvrt_view_get_run(view, n - 1, &run) != KVRT_OK)
    return 0;
  return run.base_pos + run.delta + run.n_tokens;
}

bool kvir::exec::fullPrefill(ComputeBackend &backend, const Forward &forward,
                             const kvrt_model *model, kvrt_pool *pool,
                             const std::vector<int32_t> &tokens, int64_t rows,
                             Logits &out, WorkStats &work, std::string &error) {
  int64_t n = tokens.size();
  if (n == 0 || rows < 1 || rows > n) {
    error = str("full prefill needs 1 <= rows <= tokens (", rows, " rows of ",
                n, " tokens)");
    return false;
  }
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  ModelCost cost = costOnPool(config, pool);
  auto start = std::chrono::steady_clock::now();
  kvrt_view *empty = nullptr;
  if (kvrt_view_create(pool, &empty)) {
    error = kvrt_last_error();
    return false;
  }
  ViewRef view = adoptView(empty);
  out = Logits();
  out.vocab = config.vocab_size;
  int64_t head = n - rows;
  std::vector<float> scratch;
  if (head > 0) {
    kvrt_view *next = nullptr;
    if (backend.prefill(forward, model, view.get(), tokens.data(), head, 0,
                        nullptr, /*lastOnly=*/true, &scratch, &next)) {
      error = str("full prefill: ", kvrt_last_error());
      return false;
    }
    view = adoptView(next);
    ++work.prefillCalls;
    work.logitsRows += 1;
    work.flops += cost.prefillFlops(0, head, 0);
  }
  out.context = view;
  kvrt_view *next = nullptr;
  if (backend.prefill(forward, model, view.get(), tokens.data() + head, rows,
                      head, nullptr, rows == 1, &out.data, &next)) {
    error = str("full prefill: ", kvrt_last_error());
    return false;
  }
  out.result = adoptView(next);
  out.rows = rows;
  out.tokens.assign(tokens.begin() + head, tokens.end());
  out.position = head;
  out.lastOnly = rows == 1;
  ++work.prefillCalls;
  work.prefillTokens += n;
  // Like with like: the logits of the compared rows only (the head's one
  // extra row is not counted).
  work.logitsRows += rows;
  work.flops += cost.prefillFlops(head, rows, rows);
  work.kvBytesWritten += cost.kvBytes(n);
  work.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return true;
}

bool kvir::exec::greedyContinue(ComputeBackend &backend, const Forward &forward,
                                const kvrt_model *model, const Logits &logits,
                                ViewRef cache, int64_t n,
                                std::vector<int32_t> &out, std::string &error) {
  out.clear();
  if (logits.rows == 0) {
    error = "no logits to continue from";
    return false;
  }
  std::vector<float> row(logits.data.end() - logits.vocab, logits.data.end());
  int64_t position = endPosition(cache.get());
  for (int64_t i = 0; i < n; ++i) {
    int32_t next =
        int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(next);
    if (i + 1 == n)
      break;
    kvrt_view *view = nullptr;
    if (backend.prefill(forward, model, cache.get(), &next, 1, position,
                        nullptr, true, &row, &view)) {
      error = str("greedy continuation: ", kvrt_last_error());
      return false;
    }
    cache = adoptView(view);
    ++position;
  }
  return true;
}

Fidelity kvir::exec::compareLogits(const float *approx, const float *full,
                                   int64_t rows, int64_t vocab) {
  Fidelity f;
  f.rows = rows;
  if (rows == 0)
    return f;
  f.cosineMin = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const float *a = approx + r * vocab, *b = full + r * vocab;
    double dot = 0, na = 0, nb = 0, maxA = -INFINITY, maxB = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) {
      dot += double(a[i]) * b[i];
      na += double(a[i]) * a[i];
      nb += double(b[i]) * b[i];
      maxA = std::max(maxA, double(a[i]));
      maxB = std::max(maxB, double(b[i]));
      f.maxAbsDiff = std::max(f.maxAbsDiff, std::fabs(double(a[i]) - b[i]));
    }
    double cosine = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
    f.cosineMin = std::min(f.cosineMin, cosine);
    f.cosineMean += cosine / rows;
    // log-softmax of both, then KL(full || approx).
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      sa += std::exp(a[i] - maxA);
      sb += std::exp(b[i] - maxB);
    }
    double lseA = maxA + std::log(sa), lseB = maxB + std::log(sb), kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      double lb = b[i] - lseB, la = a[i] - lseA;
      kl += std::exp(lb) * (lb - la);
    }
    kl = std::max(kl, 0.0);
    f.klMean += kl / rows;
    f.klMax = std::max(f.klMax, kl);
    if (std::max_element(a, a + vocab) - a ==
        std::max_element(b, b + vocab) - b)
      ++f.top1Agree;
  }
  return f;
}

std::vector<int32_t> kvir::exec::topK(const float *row, int64_t vocab,
                                      int64_t k) {
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) {
                      return row[a] > row[b] || (row[a] == row[b] && a < b);
                    });
  order.resize(k);
  return order;
}
