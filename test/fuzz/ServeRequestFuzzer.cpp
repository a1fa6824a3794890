//===- ServeRequestFuzzer.cpp - Fuzzes kv-serve's request decoding --------===//
//
// Any bytes as the body of any kv-serve endpoint (the first byte picks the
// decoder): either a request, or an error with a 4xx status and a message,
// never a crash, a hang or an unbounded allocation. An accepted request
// holds what the limits allow and names that are identifiers.
//
//===----------------------------------------------------------------------===//

#include "driver/server/Requests.h"
#include "test/fuzz/FuzzSupport.h"

using namespace kvir::serve;
using kvir::fuzz::fail;

namespace {

void checkError(const RequestError &error) {
  if (error.status < 400 || error.status > 499)
    fail("a rejected request has status " + std::to_string(error.status));
  if (error.message.empty())
    fail("a rejected request has no message");
}

void checkContent(const Content &c, const RequestLimits &limits) {
  if (int64_t(c.tokens.size()) > limits.maxTokens)
    fail("more token ids than the limit were accepted");
  for (int32_t t : c.tokens)
    if (t < 0)
      fail("a negative token id was accepted");
  if (!c.isText && !c.text.empty())
    fail("token content carries text");
}

void checkSegment(const SegmentSpec &s, const RequestLimits &limits) {
  if (!isIdentifier(s.name))
    fail("a segment name that is not an identifier was accepted");
  for (const std::string &dep : s.deps)
    if (!isIdentifier(dep))
      fail("a dependency that is not an identifier was accepted");
  checkContent(s.content, limits);
}

void checkSampling(const Sampling &s, const RequestLimits &limits) {
  if (s.maxTokens < 0 || s.maxTokens > limits.maxGenerate)
    fail("max_tokens out of range was accepted");
  if (!(s.temperature >= 0 && s.temperature <= 2) ||
      !(s.topP > 0 && s.topP <= 1) || s.topK < 0)
    fail("a sampling parameter out of range was accepted");
  if (s.stop.size() > limits.maxStops)
    fail("too many stop strings were accepted");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  RequestLimits limits;
  limits.maxBodyBytes = 1 << 16;
  limits.maxTokens = 256;
  std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
  RequestError error;
  bool ok = false;
  switch (data[0] % 8) {
  case 0: {
    CreateContextRequest r;
    if ((ok = decodeCreateContext(body, limits, r, error))) {
      if (r.segments.size() > limits.maxSegments)
        fail("more segments than the limit were accepted");
      for (const SegmentSpec &s : r.segments)
        checkSegment(s, limits);
    }
    break;
  }
  case 1: {
    AppendRequest r;
    if ((ok = decodeAppend(body, limits, r, error)))
      checkSegment(r.segment, limits);
    break;
  }
  case 2: {
    EditRequest r;
    if ((ok = decodeEdit(body, limits, r, error))) {
      checkContent(r.content, limits);
      if (r.strategy != "exact" && r.strategy != "cot_slice" &&
          r.strategy != "erratum")
        fail("an unknown strategy was accepted");
      if ((r.strategy == "erratum") != r.hasCorrection)
        fail("a correction without erratum (or the reverse) was accepted");
    }
    break;
  }
  case 3: {
    ComposeRequest r;
    if ((ok = decodeCompose(body, limits, r, error)) &&
        (!isIdentifier(r.block) || !isIdentifier(r.name)))
      fail("a block or segment name that is not an identifier was accepted");
    break;
  }
  case 4: {
    BlockRequest r;
    if ((ok = decodeBlock(body, limits, r, error)))
      checkContent(r.content, limits);
    break;
  }
  case 5: {
    GenerateRequest r;
    if ((ok = decodeGenerate(body, limits, r, error)))
      checkSampling(r.sampling, limits);
    break;
  }
  case 6: {
    CompletionRequest r;
    if ((ok = decodeCompletion(body, limits, r, error))) {
      checkContent(r.prompt, limits);
      checkSampling(r.sampling, limits);
    }
    break;
  }
  default: {
    ChatRequest r;
    if ((ok = decodeChat(body, limits, r, error))) {
      if (r.messages.empty() || r.messages.size() > limits.maxMessages)
        fail("a message count out of range was accepted");
      checkSampling(r.sampling, limits);
    }
    break;
  }
  }
  if (!ok)
    checkError(error);
  else if (findInvalidUtf8(body) != std::string::npos)
    fail("a body that is not UTF-8 was accepted");
  return 0;
}
