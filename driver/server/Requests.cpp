//===- Requests.cpp - kv-serve's request bodies, decoded and checked -----===//
//
// The body is checked as bytes first (size, UTF-8, nesting), then parsed by
// nlohmann::json, then read field by field: every field read is recorded, so
// that whatever is left is an unknown field. A problem unwinds as a thrown
// RequestError to the decoder's entry point, which returns it; nothing
// escapes this file.
//
//===----------------------------------------------------------------------===//

#include "driver/server/Requests.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

using namespace kvir;
using namespace kvir::serve;
using json = nlohmann::json;

namespace {

/// The deepest nesting of arrays and objects a body may have: the requests
/// need four levels; the bound keeps recursion in any JSON code shallow.
constexpr int kMaxDepth = 32;
/// The longest stop string, in bytes.
constexpr size_t kMaxStopBytes = 256;

[[noreturn]] void fail(const std::string &param, const std::string &message,
                       const char *code = "invalid_value", int status = 400) {
  throw requestError(status, code,
                     param.empty() ? message : param + ": " + message, param);
}

std::string field(const std::string &path, const std::string &key) {
  return path.empty() ? key : path + "." + key;
}

std::string element(const std::string &path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

/// What a value is, for messages: "a string", "the number 1.5", ...
std::string describe(const json &value) {
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::object:
    return "an object";
  case json::value_t::array:
    return "an array";
  case json::value_t::string:
    return "a string";
  case json::value_t::boolean:
    return value.get<bool>() ? "true" : "false";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
  case json::value_t::number_float: {
    std::string text = value.dump();
    if (text.size() > 24)
      text = text.substr(0, 24) + "...";
    return "the number " + text;
  }
  case json::value_t::binary:
  case json::value_t::discarded:
    break;
  }
  return "an unexpected value";
}

[[noreturn]] void wrongType(const std::string &param, const char *expected,
                            const json &value) {
  fail(param, std::string("expected ") + expected + ", got " + describe(value),
       "invalid_type");
}

int64_t readInteger(const json &value, const std::string &param, int64_t min,
                    int64_t max) {
  if (!value.is_number_integer())
    wrongType(param, "an integer", value);
  bool tooLarge =
      value.is_number_unsigned() &&
      value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
  int64_t v =
      tooLarge ? std::numeric_limits<int64_t>::max() : value.get<int64_t>();
  if (tooLarge || v < min || v > max)
    fail(param,
         "must be in [" + std::to_string(min) + ", " + std::to_string(max) +
             "], got " + value.dump(),
         "out_of_range");
  return v;
}

double readNumber(const json &value, const std::string &param, double min,
                  double max, bool openMin = false) {
  if (!value.is_number())
    wrongType(param, "a number", value);
  double v = value.get<double>();
  auto text = [](double x) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", x);
    return std::string(buffer);
  };
  if (!std::isfinite(v) || v < min || v > max || (openMin && v <= min))
    fail(param,
         std::string("must be in ") + (openMin ? "(" : "[") + text(min) + ", " +
             text(max) + "], got " + value.dump(),
         "out_of_range");
  return v;
}

std::string readString(const json &value, const std::string &param) {
  if (!value.is_string())
    wrongType(param, "a string", value);
  return value.get<std::string>();
}

bool readBool(const json &value, const std::string &param) {
  if (!value.is_boolean())
    wrongType(param, "true or false", value);
  return value.get<bool>();
}

/// One JSON object of a request: fields are taken one by one, and finish()
/// refuses those nobody took.
class Object {
public:
  Object(const json &value, std::string path)
      : value(value), path(std::move(path)) {
    if (!value.is_object())
      wrongType(this->path.empty() ? "body" : this->path, "a JSON object",
                value);
  }

  /// The field `key`, or null when absent or JSON null (clients send null
  /// for "not given").
  const json *take(const char *key) {
    known.insert(key);
    auto it = value.find(key);
    if (it == value.end() || it->is_null())
      return nullptr;
    return &*it;
  }
  /// The same for a field that must be there.
  const json &require(const char *key) {
    const json *v = take(key);
    if (!v)
      fail(at(key), "is required", "missing_field");
    return *v;
  }
  std::string at(const char *key) const { return field(path, key); }

  bool string(const char *key, std::string &out) {
    if (const json *v = take(key)) {
      out = readString(*v, at(key));
      return true;
    }
    return false;
  }
  bool integer(const char *key, int64_t &out, int64_t min, int64_t max) {
    if (const json *v = take(key)) {
      out = readInteger(*v, at(key), min, max);
      return true;
    }
    return false;
  }
  bool number(const char *key, double &out, double min, double max,
              bool openMin = false) {
    if (const json *v = take(key)) {
      out = readNumber(*v, at(key), min, max, openMin);
      return true;
    }
    return false;
  }
  bool boolean(const char *key, bool &out) {
    if (const json *v = take(key)) {
      out = readBool(*v, at(key));
      return true;
    }
    return false;
  }

  /// Refuses every field not taken.
  void finish() const {
    for (auto it = value.begin(); it != value.end(); ++it)
      if (!known.count(it.key()))
        fail(field(path, it.key()),
             "unknown field" + (path.empty() ? std::string() : " of " + path) +
                 " (docs/serve.md lists the fields)",
             "unknown_field");
  }

private:
  const json &value;
  std::string path;
  std::set<std::string> known;
};

/// Refuses nesting deeper than kMaxDepth before the parser sees it.
void checkDepth(const std::string &body) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth)
        fail("",
             "the body nests arrays and objects more than " +
                 std::to_string(kMaxDepth) + " deep",
             "invalid_json");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

json parseBody(const std::string &body, const RequestLimits &limits) {
  if (body.size() > limits.maxBodyBytes)
    fail("",
         "the body has " + std::to_string(body.size()) +
             " bytes, more than the limit of " +
             std::to_string(limits.maxBodyBytes) + " (--max-body-bytes)",
         "body_too_large", 413);
  if (body.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("", "the body is empty: expected a JSON object", "invalid_json");
  size_t bad = findInvalidUtf8(body);
  if (bad != std::string::npos) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", unsigned(uint8_t(body[bad])));
    fail("",
         "the body is not valid UTF-8: byte " + std::to_string(bad) + " (" +
             hex + ") does not continue a character",
         "invalid_utf8");
  }
  checkDepth(body);
  try {
    return json::parse(body);
  } catch (const json::exception &e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at ...": the part a
    // client can act on.
    size_t close = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    fail("", "malformed JSON: " + what, "invalid_json");
  }
}

std::vector<int32_t> readTokenIds(const json &value, const std::string &param,
                                  const RequestLimits &limits) {
  if (!value.is_array())
    wrongType(param, "an array of token ids", value);
  if (int64_t(value.size()) > limits.maxTokens)
    fail(param,
         "has " + std::to_string(value.size()) +
             " token ids, more than the limit of " +
             std::to_string(limits.maxTokens) +
             " per request (--max-request-tokens)",
         "too_many_tokens");
  std::vector<int32_t> tokens;
  tokens.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i)
    tokens.push_back(int32_t(readInteger(value[i], element(param, i), 0,
                                         std::numeric_limits<int32_t>::max())));
  return tokens;
}

/// `text` (with `bos` and `special`) or `tokens`, exactly one; `required`
/// says whether neither is an error.
bool readContent(Object &o, Content &out, const RequestLimits &limits,
                 bool required, const char *textKey = "text",
                 const char *tokensKey = "tokens") {
  const json *text = o.take(textKey);
  const json *tokens = o.take(tokensKey);
  if (text && tokens)
    fail(o.at(tokensKey),
         std::string("give ") + textKey + " or " + tokensKey + ", not both",
         "conflicting_fields");
  bool bosGiven = o.boolean("bos", out.bos);
  bool special = false;
  bool specialGiven = o.boolean("special", special);
  if (specialGiven)
    out.special = special;
  if (!text && !tokens) {
    if (required)
      fail(o.at(textKey),
           std::string("is required (or ") + tokensKey + ": token ids)",
           "missing_field");
    if (bosGiven)
      fail(o.at("bos"), std::string("goes with ") + textKey,
           "conflicting_fields");
    if (specialGiven)
      fail(o.at("special"), std::string("goes with ") + textKey,
           "conflicting_fields");
    return false;
  }
  if (tokens) {
    if (bosGiven && out.bos)
      fail(o.at("bos"),
           std::string("goes with ") + textKey + ": " + tokensKey +
               " are taken verbatim (put the BOS id in front)",
           "conflicting_fields");
    if (specialGiven)
      fail(o.at("special"),
           std::string("goes with ") + textKey + ": " + tokensKey +
               " are taken verbatim (special ids included)",
           "conflicting_fields");
    out.isText = false;
    out.tokens = readTokenIds(*tokens, o.at(tokensKey), limits);
    return true;
  }
  out.isText = true;
  out.text = readString(*text, o.at(textKey));
  return true;
}

std::string readName(const json &value, const std::string &param) {
  std::string name = readString(value, param);
  if (!isIdentifier(name))
    fail(param,
         "'" + name.substr(0, 80) +
             "' is not a name: use letters, digits and _, not starting with "
             "a digit, at most 64 bytes",
         "invalid_name");
  return name;
}

std::string readKind(const json &value, const std::string &param) {
  std::string kind = readString(value, param);
  for (const std::string &k : segmentKinds())
    if (k == kind)
      return kind;
  std::string list;
  for (const std::string &k : segmentKinds())
    list += (list.empty() ? "" : ", ") + k;
  fail(param, "unknown segment kind '" + kind.substr(0, 80) + "' (one of " +
                  list + ")");
}

std::vector<std::string> readNames(const json &value, const std::string &param,
                                   size_t max) {
  if (!value.is_array())
    wrongType(param, "an array of segment names", value);
  if (value.size() > max)
    fail(param, "has more than " + std::to_string(max) + " entries",
         "out_of_range");
  std::vector<std::string> names;
  for (size_t i = 0; i < value.size(); ++i)
    names.push_back(readName(value[i], element(param, i)));
  return names;
}

SegmentSpec readSegment(const json &value, const std::string &path,
                        const RequestLimits &limits, bool *prefill = nullptr) {
  Object o(value, path);
  if (prefill)
    o.boolean("prefill", *prefill);
  SegmentSpec s;
  s.name = readName(o.require("name"), o.at("name"));
  if (const json *kind = o.take("kind"))
    s.kind = readKind(*kind, o.at("kind"));
  readContent(o, s.content, limits, /*required=*/true);
  if (const json *deps = o.take("deps"))
    s.deps = readNames(*deps, o.at("deps"), limits.maxSegments);
  o.finish();
  return s;
}

Repair readRepair(const json &value, const std::string &path) {
  Object o(value, path);
  Repair r;
  int given = 0;
  if (o.integer("first_k", r.firstK, 0, 1 << 20)) {
    r.kind = Repair::Kind::FirstK;
    ++given;
  }
  if (o.number("fraction", r.amount, 0, 1)) {
    r.kind = Repair::Kind::Fraction;
    ++given;
  }
  if (o.number("deviation", r.amount, 0, 1e6)) {
    r.kind = Repair::Kind::Deviation;
    ++given;
  }
  o.finish();
  if (given != 1)
    fail(path, "give exactly one of first_k, fraction and deviation",
         given ? "conflicting_fields" : "missing_field");
  return r;
}

/// The sampling fields of generate, completions and chat.
void readSampling(Object &o, Sampling &s, const RequestLimits &limits,
                  bool chat) {
  bool maxGiven = o.integer("max_tokens", s.maxTokens, 0, limits.maxGenerate);
  if (chat) {
    int64_t completion = 0;
    if (o.integer("max_completion_tokens", completion, 0, limits.maxGenerate)) {
      if (maxGiven && completion != s.maxTokens)
        fail(o.at("max_completion_tokens"),
             "disagrees with max_tokens: give one", "conflicting_fields");
      s.maxTokens = completion;
    }
  }
  o.number("temperature", s.temperature, 0, 2);
  o.integer("top_k", s.topK, 0, 1 << 20);
  o.number("top_p", s.topP, 0, 1, /*openMin=*/true);
  int64_t seed = 0;
  if (o.integer("seed", seed, 0, std::numeric_limits<int64_t>::max())) {
    s.seedGiven = true;
    s.seed = uint64_t(seed);
  }
  if (const json *stop = o.take("stop")) {
    std::string param = o.at("stop");
    if (stop->is_string()) {
      s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > limits.maxStops)
        fail(param,
             "has " + std::to_string(stop->size()) +
                 " stop strings, more than " + std::to_string(limits.maxStops),
             "out_of_range");
      for (size_t i = 0; i < stop->size(); ++i)
        s.stop.push_back(readString((*stop)[i], element(param, i)));
    } else {
      wrongType(param, "a string or an array of strings", *stop);
    }
    for (const std::string &text : s.stop)
      if (text.empty() || text.size() > kMaxStopBytes)
        fail(param,
             "a stop string must have 1 to " + std::to_string(kMaxStopBytes) +
                 " bytes",
             "out_of_range");
  }
  o.boolean("stream", s.stream);
}

/// OpenAI fields kv-serve knows but does not implement: accepted at their
/// neutral value (what clients send by default), refused otherwise.
void readOpenAIExtras(Object &o, bool chat) {
  int64_t n = 1;
  o.integer("n", n, 1, 1);
  if (!chat) {
    int64_t bestOf = 1;
    o.integer("best_of", bestOf, 1, 1);
    if (o.take("suffix"))
      fail(o.at("suffix"), "is not supported (insertion)", "unsupported");
    if (o.take("logprobs"))
      fail(o.at("logprobs"), "is not supported", "unsupported");
  } else {
    bool logprobs = false;
    if (o.boolean("logprobs", logprobs) && logprobs)
      fail(o.at("logprobs"), "is not supported", "unsupported");
    if (o.take("top_logprobs"))
      fail(o.at("top_logprobs"), "is not supported", "unsupported");
    if (const json *tools = o.take("tools"))
      if (!tools->is_array() || !tools->empty())
        fail(o.at("tools"), "tool calls are not supported", "unsupported");
    if (const json *format = o.take("response_format")) {
      Object f(*format, o.at("response_format"));
      std::string type;
      if (!f.string("type", type) || type != "text")
        fail(o.at("response_format.type"), "only \"text\" is supported",
             "unsupported");
      f.finish();
    }
  }
  double penalty = 0;
  o.number("presence_penalty", penalty, 0, 0);
  o.number("frequency_penalty", penalty, 0, 0);
  if (const json *bias = o.take("logit_bias"))
    if (!bias->is_object() || !bias->empty())
      fail(o.at("logit_bias"), "is not supported", "unsupported");
  std::string user;
  o.string("user", user);
  if (const json *options = o.take("stream_options")) {
    Object so(*options, o.at("stream_options"));
    bool usage = false;
    so.boolean("include_usage", usage);
    so.finish();
  }
}

template <typename Fn> bool decode(RequestError &error, Fn &&fn) {
  try {
    fn();
    return true;
  } catch (RequestError &e) {
    error = std::move(e);
  } catch (const std::exception &e) {
    // Anything else from the JSON library is still the request's fault.
    error = RequestError();
    error.message = std::string("cannot read the request: ") + e.what();
  }
  return false;
}

} // namespace

RequestError kvir::serve::requestError(int status, const std::string &code,
                                       const std::string &message,
                                       const std::string &param) {
  RequestError e;
  e.status = status;
  e.code = code;
  e.param = param;
  e.message = message;
  e.type = status == 401   ? "authentication_error"
           : status == 404 ? "not_found_error"
           : status == 429 ? "rate_limit_error"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
  return e;
}

size_t kvir::serve::findInvalidUtf8(const std::string &text) {
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + extra >= n)
      return i;
    for (int k = 1; k <= extra; ++k) {
      if ((s[i + k] & 0xc0) != 0x80)
        return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    bool overlong = (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000);
    if (overlong || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return i;
    i += extra + 1;
  }
  return std::string::npos;
}

bool kvir::serve::isIdentifier(const std::string &name) {
  if (name.empty() || name.size() > 64)
    return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
      return false;
  }
  return true;
}

const std::vector<std::string> &kvir::serve::segmentKinds() {
  static const std::vector<std::string> kinds = {
      "system", "user",    "history", "tool",       "skill", "document",
      "fact",   "thought", "answer",  "correction", "other"};
  return kinds;
}

bool kvir::serve::decodeCreateContext(const std::string &body,
                                      const RequestLimits &limits,
                                      CreateContextRequest &out,
                                      RequestError &error) {
  return decode(error, [&] {
    out = CreateContextRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    const json &segments = o.require("segments");
    if (!segments.is_array())
      wrongType("segments", "an array of segments", segments);
    if (segments.size() > limits.maxSegments)
      fail("segments",
           "has " + std::to_string(segments.size()) +
               " segments, more than the limit of " +
               std::to_string(limits.maxSegments),
           "out_of_range");
    for (size_t i = 0; i < segments.size(); ++i)
      out.segments.push_back(
          readSegment(segments[i], element("segments", i), limits));
    o.finish();
  });
}

bool kvir::serve::decodeAppend(const std::string &body,
                               const RequestLimits &limits, AppendRequest &out,
                               RequestError &error) {
  return decode(error, [&] {
    out = AppendRequest();
    out.segment =
        readSegment(parseBody(body, limits), "", limits, &out.prefill);
  });
}

bool kvir::serve::decodeEdit(const std::string &body,
                             const RequestLimits &limits, EditRequest &out,
                             RequestError &error) {
  return decode(error, [&] {
    out = EditRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    out.segment = readName(o.require("segment"), "segment");
    readContent(o, out.content, limits, /*required=*/true);
    if (o.string("strategy", out.strategy) && out.strategy != "exact" &&
        out.strategy != "cot_slice" && out.strategy != "erratum")
      fail("strategy", "unknown strategy '" + out.strategy.substr(0, 80) +
                           "' (exact, cot_slice or erratum)");
    if (const json *repair = o.take("repair"))
      out.repair = readRepair(*repair, "repair");
    if (const json *correction = o.take("correction")) {
      Object c(*correction, "correction");
      readContent(c, out.correction, limits, /*required=*/true);
      c.finish();
      out.hasCorrection = true;
    }
    o.finish();
    if (out.strategy == "erratum" && !out.hasCorrection)
      fail("correction",
           "is required by the erratum strategy (the text appended before the "
           "answer, e.g. {\"text\": \"Correction: ...\"})",
           "missing_field");
    if (out.strategy != "erratum" && out.hasCorrection)
      fail("correction", "goes with the erratum strategy only",
           "conflicting_fields");
    if (out.strategy != "cot_slice" && out.repair.kind != Repair::Kind::None)
      fail("repair",
           "goes with the cot_slice strategy only (exact recomputes "
           "everything after the edit, erratum changes nothing in place)",
           "conflicting_fields");
  });
}

bool kvir::serve::decodeCompose(const std::string &body,
                                const RequestLimits &limits,
                                ComposeRequest &out, RequestError &error) {
  return decode(error, [&] {
    out = ComposeRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    out.block = readName(o.require("block"), "block");
    out.name = out.block;
    if (const json *name = o.take("name"))
      out.name = readName(*name, "name");
    if (const json *kind = o.take("kind"))
      out.kind = readKind(*kind, "kind");
    if (const json *deps = o.take("deps"))
      out.deps = readNames(*deps, "deps", limits.maxSegments);
    if (const json *repair = o.take("repair"))
      out.repair = readRepair(*repair, "repair");
    o.finish();
  });
}

bool kvir::serve::decodeBlock(const std::string &body,
                              const RequestLimits &limits, BlockRequest &out,
                              RequestError &error) {
  return decode(error, [&] {
    out = BlockRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    out.name = readName(o.require("name"), "name");
    readContent(o, out.content, limits, /*required=*/true);
    o.finish();
  });
}

bool kvir::serve::decodeGenerate(const std::string &body,
                                 const RequestLimits &limits,
                                 GenerateRequest &out, RequestError &error) {
  return decode(error, [&] {
    out = GenerateRequest();
    json value = body.find_first_not_of(" \t\r\n") == std::string::npos
                     ? json::object()
                     : parseBody(body, limits);
    Object o(value, "");
    readSampling(o, out.sampling, limits, /*chat=*/false);
    if (const json *name = o.take("name"))
      out.name = readName(*name, "name");
    if (const json *kind = o.take("kind"))
      out.kind = readKind(*kind, "kind");
    if (const json *deps = o.take("deps")) {
      out.deps = readNames(*deps, "deps", limits.maxSegments);
      out.depsGiven = true;
    }
    o.finish();
  });
}

bool kvir::serve::decodeCompletion(const std::string &body,
                                   const RequestLimits &limits,
                                   CompletionRequest &out,
                                   RequestError &error) {
  return decode(error, [&] {
    out = CompletionRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    o.string("model", out.model);
    const json &prompt = o.require("prompt");
    bool special = false;
    bool specialGiven = o.boolean("special", special);
    if (prompt.is_string()) {
      out.prompt.isText = true;
      out.prompt.text = prompt.get<std::string>();
      out.prompt.bos = true;
      if (specialGiven)
        out.prompt.special = special;
    } else if (prompt.is_array() && (prompt.empty() || prompt[0].is_number())) {
      if (specialGiven)
        fail(o.at("special"),
             "goes with a text prompt: token ids are taken verbatim (special "
             "ids included)",
             "conflicting_fields");
      out.prompt.isText = false;
      out.prompt.tokens = readTokenIds(prompt, "prompt", limits);
    } else {
      wrongType("prompt",
                "a string or an array of token ids (batches of prompts are "
                "not supported)",
                prompt);
    }
    readSampling(o, out.sampling, limits, /*chat=*/false);
    o.boolean("echo", out.echo);
    readOpenAIExtras(o, /*chat=*/false);
    o.finish();
  });
}

bool kvir::serve::decodeChat(const std::string &body,
                             const RequestLimits &limits, ChatRequest &out,
                             RequestError &error) {
  return decode(error, [&] {
    out = ChatRequest();
    json value = parseBody(body, limits);
    Object o(value, "");
    o.string("model", out.model);
    const json &messages = o.require("messages");
    if (!messages.is_array())
      wrongType("messages", "an array of messages", messages);
    if (messages.empty())
      fail("messages", "must hold at least one message");
    if (messages.size() > limits.maxMessages)
      fail("messages",
           "has more than " + std::to_string(limits.maxMessages) + " messages",
           "out_of_range");
    for (size_t i = 0; i < messages.size(); ++i) {
      std::string path = element("messages", i);
      Object m(messages[i], path);
      ChatMessage message;
      message.role = readString(m.require("role"), m.at("role"));
      if (message.role != "system" && message.role != "user" &&
          message.role != "assistant")
        fail(m.at("role"), "unknown role '" + message.role.substr(0, 80) +
                               "' (system, user or assistant)");
      const json &content = m.require("content");
      if (content.is_string()) {
        message.content = content.get<std::string>();
      } else if (content.is_array()) {
        // The newer form: a list of parts, of which kv-serve takes text.
        for (size_t p = 0; p < content.size(); ++p) {
          Object part(content[p], element(m.at("content"), p));
          std::string type = readString(part.require("type"), part.at("type"));
          if (type != "text")
            fail(part.at("type"), "only text parts are supported",
                 "unsupported");
          message.content += readString(part.require("text"), part.at("text"));
          part.finish();
        }
      } else {
        wrongType(m.at("content"), "a string or an array of text parts",
                  content);
      }
      std::string name;
      m.string("name", name);
      m.finish();
      out.messages.push_back(std::move(message));
    }
    readSampling(o, out.sampling, limits, /*chat=*/true);
    readOpenAIExtras(o, /*chat=*/true);
    o.finish();
  });
}
