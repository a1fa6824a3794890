//===- Requests.h - kv-serve's request bodies, checked ----------*- C++ -*-===//
//
// Every JSON body kv-serve accepts, as a plain struct, and one decoder per
// endpoint that turns a body into it or into a RequestError naming the
// problem: malformed JSON, invalid UTF-8, a nesting too deep, an unknown
// field, a wrong type, a value out of range, a limit exceeded. Decoding
// needs no model (token ids are checked against the vocabulary later, by
// the engine), so the fuzz target (test/fuzz/ServeRequestFuzzer.cpp) drives
// exactly what the server runs on untrusted bytes. docs/serve.md lists the
// fields.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_REQUESTS_H
#define KVIR_DRIVER_SERVER_REQUESTS_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvir::serve {

/// What is wrong with a request: the HTTP status, an OpenAI-style error type
/// and code, the parameter at fault (a path such as `segments[1].deps[0]`,
/// "" for the body as a whole) and a message naming the problem.
struct RequestError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code = "invalid_value";
  std::string param;
  std::string message;
};

/// A RequestError of `status` (its type follows from it: 401
/// authentication_error, 404 not_found_error, 429 rate_limit_error, 5xx
/// server_error, else invalid_request_error).
RequestError requestError(int status, const std::string &code,
                          const std::string &message,
                          const std::string &param = "");

/// The bounds on what one request may ask for.
struct RequestLimits {
  /// Bytes of a body (the HTTP layer refuses longer ones before reading).
  size_t maxBodyBytes = 1 << 20;
  /// Token ids given in one request, and tokens a generation may ask for.
  int64_t maxTokens = 8192;
  int64_t maxGenerate = 4096;
  /// Segments in one create request, and stop strings.
  size_t maxSegments = 256;
  size_t maxStops = 4;
  /// Messages of one chat request.
  size_t maxMessages = 256;
};

/// Text or token ids.
struct Content {
  bool isText = false;
  std::string text;
  std::vector<int32_t> tokens;
  /// BOS in front of the text's encoding (ignored for token ids, which are
  /// taken verbatim).
  bool bos = false;
  /// Whether special tokens written in the text (`<|im_start|>`: a
  /// byte-level BPE vocabulary's CONTROL tokens) are those tokens; unset:
  /// the server's default (kv-serve --special).
  std::optional<bool> special;
};

/// One segment of a context: a name (an identifier), a kind (the kv
/// dialect's segment kinds), its content and the earlier segments it
/// depends on.
struct SegmentSpec {
  std::string name, kind = "other";
  Content content;
  std::vector<std::string> deps;
};

/// A repair budget of an edit or a compose (none, first_k, fraction or
/// deviation: DESIGN.md §8).
struct Repair {
  enum class Kind { None, FirstK, Fraction, Deviation };
  Kind kind = Kind::None;
  int64_t firstK = 0;
  double amount = 0;
};

/// Sampling and stopping of a generation.
struct Sampling {
  int64_t maxTokens = 16;
  /// 0: greedy (argmax, ties to the lower id).
  double temperature = 1.0;
  /// 0: no top-k cut.
  int64_t topK = 0;
  double topP = 1.0;
  /// Without a seed the server draws one and reports it.
  bool seedGiven = false;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool stream = false;
};

/// POST /v1/contexts
struct CreateContextRequest {
  std::vector<SegmentSpec> segments;
};

/// POST /v1/contexts/{id}/segments: one segment, and whether to prefill it
/// now (else with the next request that needs the cache).
struct AppendRequest {
  SegmentSpec segment;
  bool prefill = false;
};

/// POST /v1/contexts/{id}/edit
struct EditRequest {
  std::string segment;
  Content content;
  /// exact, cot_slice or erratum.
  std::string strategy = "cot_slice";
  Repair repair;
  /// The correction of an erratum (required there, refused elsewhere).
  bool hasCorrection = false;
  Content correction;
};

/// POST /v1/contexts/{id}/compose: a block by name, appended as a segment.
struct ComposeRequest {
  std::string block;
  /// The segment it becomes (default: the block's name, kind tool).
  std::string name, kind = "tool";
  std::vector<std::string> deps;
  Repair repair;
};

/// POST /v1/blocks: text or ids prefilled once at position 0, kept by name.
struct BlockRequest {
  std::string name;
  Content content;
};

/// POST /v1/contexts/{id}/generate
struct GenerateRequest {
  Sampling sampling;
  /// The segment the generated tokens become (default gen<N>, kind answer,
  /// depending on every earlier segment).
  std::string name, kind = "answer";
  bool depsGiven = false;
  std::vector<std::string> deps;
};

/// POST /v1/completions (OpenAI).
struct CompletionRequest {
  std::string model;
  Content prompt;
  Sampling sampling;
  bool echo = false;
};

/// One message of a chat.
struct ChatMessage {
  std::string role, content;
};

/// POST /v1/chat/completions (OpenAI).
struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  Sampling sampling;
};

/// The decoders: true with `out` filled, or false with `error`.
bool decodeCreateContext(const std::string &body, const RequestLimits &limits,
                         CreateContextRequest &out, RequestError &error);
bool decodeAppend(const std::string &body, const RequestLimits &limits,
                  AppendRequest &out, RequestError &error);
bool decodeEdit(const std::string &body, const RequestLimits &limits,
                EditRequest &out, RequestError &error);
bool decodeCompose(const std::string &body, const RequestLimits &limits,
                   ComposeRequest &out, RequestError &error);
bool decodeBlock(const std::string &body, const RequestLimits &limits,
                 BlockRequest &out, RequestError &error);
bool decodeGenerate(const std::string &body, const RequestLimits &limits,
                    GenerateRequest &out, RequestError &error);
bool decodeCompletion(const std::string &body, const RequestLimits &limits,
                      CompletionRequest &out, RequestError &error);
bool decodeChat(const std::string &body, const RequestLimits &limits,
                ChatRequest &out, RequestError &error);

/// The byte offset of the first byte of `text` that is not part of valid
/// UTF-8 (overlong forms, surrogates and code points above U+10FFFF are
/// invalid), or npos.
size_t findInvalidUtf8(const std::string &text);

/// Whether `name` is a segment or block name: an identifier of at most 64
/// bytes ([A-Za-z_][A-Za-z0-9_]*).
bool isIdentifier(const std::string &name);

/// The segment kinds of the kv dialect (system, user, ..., other).
const std::vector<std::string> &segmentKinds();

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_REQUESTS_H
