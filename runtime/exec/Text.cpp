//===- Text.cpp - Text in, text out for runners of kv programs --*- C++ -*-===//

#include "runtime/exec/Text.h"
#include "runtime/core/GGUF.h"

#include <cstdio>
#include <sys/stat.h>

using namespace kvir;
using namespace kvir::exec;

namespace {

/// The length of the valid UTF-8 character at `s` (`n` bytes left), or 0
/// when the bytes there are not one (overlong forms and surrogates
/// included).
size_t utf8CharLength(const unsigned char *s, size_t n) {
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xbf) {
    return i < n && s[i] >= lo && s[i] <= hi;
  };
  unsigned char c = s[0];
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

} // namespace

std::string kvir::exec::defaultTokenizerPath(const std::string &modelFile,
                                             int32_t vocab) {
  if (modelFile.empty())
    return "";
  // A GGUF model carries its own tokenizer.
  if (kvrt::gguf::fileHasMagic(modelFile.c_str())) {
    kvrt_tokenizer *inside = nullptr;
    if (kvrt::gguf::readFile(modelFile.c_str(), nullptr, &inside).empty() &&
        inside) {
      kvrt_tokenizer_release(inside);
      return modelFile;
    }
  }
  size_t slash = modelFile.rfind('/');
  std::string dir =
      slash == std::string::npos ? "" : modelFile.substr(0, slash + 1);
  std::string path = dir + "tok" + std::to_string(vocab) + ".bin";
  return fileExists(path) ? path : "";
}

TokenizerRef kvir::exec::loadTokenizer(const std::string &path, int32_t vocab,
                                       std::string &error) {
  kvrt_tokenizer *raw = nullptr;
  if (kvrt_tokenizer_load(path.c_str(), &raw)) {
    error = std::string("cannot load the tokenizer: ") + kvrt_last_error();
    return nullptr;
  }
  TokenizerRef tokenizer(raw, kvrt_tokenizer_release);
  if (kvrt_tokenizer_check_vocab(raw, vocab)) {
    error = "the tokenizer " + path +
            " does not fit the model: " + kvrt_last_error();
    return nullptr;
  }
  return tokenizer;
}

bool kvir::exec::findTokenizer(const TextOptions &options,
                               const std::string &modelFile, int32_t vocab,
                               TokenizerRef &out, std::string &path,
                               std::string &error) {
  out = nullptr;
  path.clear();
  if (options.noTokenizer) {
    if (!options.tokenizer.empty()) {
      error = "--tokenizer and --no-tokenizer exclude each other";
      return false;
    }
    return true;
  }
  bool given = !options.tokenizer.empty();
  path = given ? options.tokenizer : defaultTokenizerPath(modelFile, vocab);
  if (path.empty())
    return true;
  out = loadTokenizer(path, vocab, error);
  if (!out && !given)
    error += " (it was found beside the model; give --tokenizer FILE, or "
             "--no-tokenizer)";
  return out != nullptr;
}

bool kvir::exec::splitNameValue(const std::string &spec,
                                const std::string &option, std::string &name,
                                std::string &value, std::string &error) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    error = option +
            " expects NAME=" + (option == "--text" ? "STRING" : "FILE") +
            ", got '" + spec + "'";
    return false;
  }
  name = spec.substr(0, eq);
  value = spec.substr(eq + 1);
  return true;
}

bool kvir::exec::encodeTextInputs(const TextOptions &options,
                                  const kvrt_tokenizer *tokenizer,
                                  InputOptions &inputs, std::string &error) {
  if (!options.texts.empty() && !tokenizer) {
    error = options.texts.front().option +
            " needs a tokenizer: give --tokenizer FILE (a llama2.c "
            "tokenizer.bin or a GGUF file), run a GGUF --model that "
            "embeds one, or a --model whose folder holds tok<vocab>.bin";
    return false;
  }
  for (const std::string &name : options.bos) {
    bool found = false;
    for (const TextOptions::Item &item : options.texts)
      found = found || item.name == name;
    if (!found) {
      error = "--bos " + name +
              " names no text argument (BOS is added to arguments given by "
              "--text or --text-file; token files are taken verbatim)";
      return false;
    }
  }
  for (const TextOptions::Item &item : options.texts) {
    if (inputs.givenTokens.count(item.name)) {
      error = item.option + " " + item.name + " is given twice";
      return false;
    }
    InputOptions::Encoded encoded;
    encoded.option = item.option;
    encoded.source = item.source;
    encoded.text = item.text;
    encoded.bos = options.bos.count(item.name) > 0;
    uint32_t flags = (encoded.bos ? KVRT_ENCODE_BOS : 0u) |
                     (options.special ? KVRT_ENCODE_SPECIAL : 0u);
    if (kvir::encode(tokenizer, item.text, flags, encoded.tokens)) {
      error = "cannot encode the text of " + item.option + " " + item.name +
              ": " + kvrt_last_error();
      return false;
    }
    inputs.givenTokens[item.name] = std::move(encoded);
  }
  return true;
}

bool kvir::exec::decodeTokens(const kvrt_tokenizer *tokenizer, int32_t prev,
                              const std::vector<int32_t> &tokens,
                              std::string &out, std::string &error) {
  out.clear();
  for (int32_t token : tokens) {
    const char *text = nullptr;
    size_t length = 0;
    if (kvrt_tokenizer_decode_token(tokenizer, prev, token, &text, &length)) {
      error = std::string("cannot decode: ") + kvrt_last_error();
      return false;
    }
    out.append(text, length);
    prev = token;
  }
  return true;
}

std::string kvir::exec::quoteText(const std::string &text) {
  std::string out = "\"";
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  for (size_t i = 0, n = text.size(); i < n;) {
    unsigned char c = s[i];
    size_t length = utf8CharLength(s + i, n - i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (length == 0 || c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
      length = 1;
    } else {
      out.append(text, i, length);
    }
    i += length ? length : 1;
  }
  return out + "\"";
}

std::string kvir::exec::validUtf8(const std::string &text) {
  std::string out;
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  for (size_t i = 0, n = text.size(); i < n;) {
    size_t length = utf8CharLength(s + i, n - i);
    if (length == 0) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}
