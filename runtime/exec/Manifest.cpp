//===- Manifest.cpp - The signature of an entry -----------------*- C++ -*-===//

#include "runtime/exec/Manifest.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/exec/TokenInput.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

using namespace kvir;
using namespace kvir::exec;
using kvrt::str;

namespace {

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
      !parseIntWord(items[0], dim) || dim < 0 || dim > INT32_MAX ||
      !parseFloatWord(items[1], m.rope_scale))
    return false;
  m.rope_dim = int32_t(dim);
  m.n_rope_freq_factors = int32_t(items.size() - 2);
  for (size_t i = 2; i < items.size(); ++i) {
    double factor;
    if (!parseFloatWord(items[i], factor))
      return false;
    m.rope_freq_factors[i - 2] = float(factor);
  }
  return true;
}

} // namespace

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
  if (!weightFormats.empty())
    os << "weights " << escape(weightFormats) << "\n";
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
      // Q/K/V biases (qwen2): a word of its own, only where set.
      if (m.qkv_bias)
        os << " qkv-bias";
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
    } else if (w[0] == "weights" && w.size() == 2) {
      if (!unescape(w[1], out.weightFormats))
        return bad("bad weights");
    } else if (w[0] == "plan-ops" && w.size() == 2) {
      out.hasPlanOps = w[1] == "1";
    } else if (w[0] == "arg" && w.size() >= 7) {
      ArgSpec a;
      if (!parseKind(w[1], a.kind) || !unescape(w[2], a.name) ||
          !parseIntWord(w[3], a.dims[0]) || !parseIntWord(w[4], a.dims[1]) ||
          !parseIntWord(w[5], a.dims[2]) || !parseIntWord(w[6], a.sampleLength))
        return bad("bad argument");
      if (a.kind == ValueKind::Model) {
        int64_t v[6];
        if (w.size() < 16 || w.size() > 18)
          return bad("a model argument needs its architecture");
        for (int i = 0; i < 6; ++i)
          if (!parseIntWord(w[7 + i], v[i]) || v[i] <= 0 || v[i] > INT32_MAX)
            return bad("bad model size");
        kvrt_model_config &m = a.model;
        m.dim = int32_t(v[0]);
        m.hidden_dim = int32_t(v[1]);
        m.n_layers = int32_t(v[2]);
        m.n_heads = int32_t(v[3]);
        m.n_kv_heads = int32_t(v[4]);
        m.vocab_size = int32_t(v[5]);
        std::optional<kvrt_rope_layout> rope = parseRopeLayout(w[13]);
        if (!rope || !parseFloatWord(w[14], m.rope_theta) ||
            !parseFloatWord(w[15], m.rms_eps))
          return bad("bad model RoPE, theta or eps");
        m.rope_layout = *rope;
        m.seq_len = 0;
        m.shared_classifier = 1;
        // Then the RoPE variants, then qkv-bias, each where present.
        size_t next = 16;
        if (next < w.size() && w[next] != "qkv-bias" &&
            !parseRopeExtensionWord(w[next++], m))
          return bad("bad model RoPE variants '" + w[16] + "'");
        if (next < w.size() && w[next++] != "qkv-bias")
          return bad("bad model word '" + w[next - 1] + "'");
        m.qkv_bias = w.back() == "qkv-bias" ? 1 : 0;
        if (next != w.size())
          return bad("a model argument needs its architecture");
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
