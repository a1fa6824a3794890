//===- TokenizerFuzzer.cpp - Fuzzes the tokenizer loader and encoder ------===//
//
// The first byte chooses what the rest is:
//   even: a llama2.c tokenizer file for kvrt_tokenizer_load; a tokenizer it
//         loads must encode and decode a fixed text with ids in its
//         vocabulary;
//   odd:  a text for the stories260K tokenizer (tok512.bin, when the build
//         knows where it is), which must round-trip: decoding the encoding
//         (with BOS, which drops the dummy leading space) gives the text
//         back, byte for byte. Every byte has a byte piece, so no text is
//         lost to <unk>.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "test/fuzz/FuzzSupport.h"

#include <cstring>
#include <string>
#include <vector>

using kvir::fuzz::fail;

namespace {

kvrt_tokenizer *tok512 = nullptr;

void checkLoaded(const kvrt_tokenizer *tokenizer) {
  int32_t vocab = kvrt_tokenizer_vocab_size(tokenizer);
  if (vocab < 3)
    fail("a loaded tokenizer has fewer than 3 pieces");
  std::vector<int32_t> ids;
  if (kvir::encode(tokenizer, "Once upon a time", true, true, ids) != KVRT_OK)
    fail(std::string("encoding failed: ") + kvrt_last_error());
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      fail("an encoded id is outside the vocabulary");
  std::string text;
  if (kvir::decode(tokenizer, ids, text) != KVRT_OK)
    fail(std::string("decoding failed: ") + kvrt_last_error());
}

void checkRoundTrip(const std::string &text) {
  std::vector<int32_t> ids;
  if (kvir::encode(tok512, text, /*bos=*/true, /*eos=*/false, ids) != KVRT_OK)
    fail(std::string("encoding failed: ") + kvrt_last_error());
  if (ids.empty() || ids[0] != kvrt_tokenizer_bos_id(tok512))
    fail("the encoding does not start with BOS");
  if (ids.size() > text.size() + 2)
    fail("more tokens than bytes (plus BOS and the dummy space)");
  std::string back;
  if (kvir::decode(tok512, ids, back) != KVRT_OK)
    fail(std::string("decoding failed: ") + kvrt_last_error());
  if (back != text)
    fail("decode(encode(text)) != text");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
#ifdef KVIR_FUZZ_TOKENIZER
  if (kvrt_tokenizer_load(KVIR_FUZZ_TOKENIZER, &tok512) != KVRT_OK)
    tok512 = nullptr; // the round trip is skipped without it
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t *rest = data + 1;
  size_t restSize = size - 1;
  if ((data[0] & 1) == 0) {
    kvir::fuzz::MemoryFile file(rest, restSize);
    kvrt_tokenizer *tokenizer = nullptr;
    if (kvrt_tokenizer_load(file.c_str(), &tokenizer) != KVRT_OK) {
      if (tokenizer)
        fail("a failed load returned a tokenizer");
      if (std::strlen(kvrt_last_error()) == 0)
        fail("a failed load left no message");
      return 0;
    }
    checkLoaded(tokenizer);
    kvrt_tokenizer_release(tokenizer);
    return 0;
  }
  if (tok512)
    checkRoundTrip(std::string(reinterpret_cast<const char *>(rest), restSize));
  return 0;
}
