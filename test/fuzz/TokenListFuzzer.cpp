//===- TokenListFuzzer.cpp - Fuzzes the token-list parser -----------------===//
//
// Any text given as a token file (kv-run --input, --tokens-file): either a
// message naming the problem, or non-negative int32 ids that print and parse
// back to the same list.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Session.h"
#include "test/fuzz/FuzzSupport.h"

using kvir::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::vector<int32_t> tokens;
  std::string error;
  if (!kvir::exec::parseTokenList(text, "fuzz input", tokens, error)) {
    if (error.empty())
      fail("a rejected token list has no message");
    return 0;
  }
  if (tokens.empty())
    fail("an accepted token list is empty");
  std::string printed;
  for (int32_t t : tokens) {
    if (t < 0)
      fail("a negative token id was accepted");
    printed += std::to_string(t) + "\n";
  }
  std::vector<int32_t> again;
  if (!kvir::exec::parseTokenList(printed, "reprinted", again, error) ||
      again != tokens)
    fail("a printed token list does not parse back to itself");
  return 0;
}
