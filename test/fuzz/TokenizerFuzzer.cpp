//===- TokenizerFuzzer.cpp - Fuzzes the tokenizer loader and encoder ------===//
//
// The first byte's two low bits choose what the rest is:
//   0: a llama2.c tokenizer file for kvrt_tokenizer_load; a tokenizer it
//      loads must encode and decode a fixed text with ids in its
//      vocabulary;
//   1: a text for the stories260K tokenizer (tok512.bin, when the build
//      knows where it is), which must round-trip: decoding the encoding
//      (with BOS, which drops the dummy leading space) gives the text
//      back, byte for byte. Every byte has a byte piece, so no text is
//      lost to <unk>;
//   2: a GGUF file for kvrt_tokenizer_load (byte-level BPE vocabularies
//      among the seeds): a tokenizer it loads must encode and decode, with
//      and without special tokens, with ids in its vocabulary;
//   3: a text for a byte-level BPE tokenizer (the llama-bpe test vocabulary
//      of test/golden/tokenizer, when the build knows where it is): decoding
//      the encoding gives the text back with each byte that is not UTF-8
//      replaced by U+FFFD, at most 3 tokens a byte, and the streaming decoder
//      gives pieces that add up to the same text.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"
#include "runtime/core/tokenizer/Unicode.h"
#include "test/fuzz/FuzzSupport.h"

#include <cstring>
#include <string>
#include <vector>

using kvir::fuzz::fail;

namespace {

kvrt_tokenizer *tok512 = nullptr;
kvrt_tokenizer *bpe = nullptr;

void checkLoaded(const kvrt_tokenizer *tokenizer, bool gguf) {
  int32_t vocab = kvrt_tokenizer_vocab_size(tokenizer);
  if (vocab < (gguf ? 1 : 3))
    fail("a loaded tokenizer has too few pieces");
  for (uint32_t flags : {0u, uint32_t(KVRT_ENCODE_SPECIAL)}) {
    std::vector<int32_t> ids;
    // BOS and EOS only where the vocabulary has them.
    if (kvrt_tokenizer_bos_id(tokenizer) >= 0)
      flags |= KVRT_ENCODE_BOS;
    if (kvrt_tokenizer_eos_id(tokenizer) >= 0)
      flags |= KVRT_ENCODE_EOS;
    kvrt_status status = kvir::encode(
        tokenizer, "Once upon a time <|eot_id|> caf\xc3\xa9 42", flags, ids);
    // Encoding may fail only where a byte has no token and there is no unk.
    if (status != KVRT_OK) {
      if (std::string(kvrt_last_error()).find("has no token") ==
              std::string::npos &&
          std::string(kvrt_last_error()).find("is no piece") ==
              std::string::npos)
        fail(std::string("encoding failed: ") + kvrt_last_error());
      continue;
    }
    for (int32_t id : ids)
      if (id < 0 || id >= vocab)
        fail("an encoded id is outside the vocabulary");
    std::string text;
    if (kvir::decode(tokenizer, ids, text, KVRT_DECODE_SPECIAL) != KVRT_OK)
      fail(std::string("decoding failed: ") + kvrt_last_error());
  }
}

void checkByteLevel(const std::string &text) {
  std::vector<int32_t> ids;
  if (kvir::encode(bpe, text, 0u, ids) != KVRT_OK)
    fail(std::string("encoding failed: ") + kvrt_last_error());
  if (ids.size() > 3 * text.size())
    fail("more than 3 tokens a byte");
  std::string back, expected;
  if (kvir::decode(bpe, ids, back) != KVRT_OK)
    fail(std::string("decoding failed: ") + kvrt_last_error());
  for (char32_t c : kvrt::unicode::decodeUtf8(text))
    kvrt::unicode::appendUtf8(c, expected);
  if (back != expected)
    fail("decode(encode(text)) != text with U+FFFD for bytes not UTF-8");
  kvrt_decode_stream stream;
  kvrt_decode_stream_init(&stream, 0);
  std::string streamed;
  std::vector<char> buffer(KVRT_TOKENIZER_MAX_PIECE_BYTES + 4);
  for (int32_t id : ids) {
    size_t n = 0;
    if (kvrt_tokenizer_decode_next(bpe, &stream, id, buffer.data(),
                                   buffer.size(), &n) != KVRT_OK)
      fail(std::string("streaming failed: ") + kvrt_last_error());
    streamed.append(buffer.data(), n);
  }
  size_t n = 0;
  kvrt_tokenizer_decode_finish(&stream, buffer.data(), buffer.size(), &n);
  streamed.append(buffer.data(), n);
  if (streamed != back)
    fail("the streamed pieces do not add up to the decoded text");
  std::vector<int32_t> special;
  if (kvir::encode(bpe, text, KVRT_ENCODE_SPECIAL, special) != KVRT_OK)
    fail(std::string("encoding with special tokens failed: ") +
         kvrt_last_error());
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
#ifdef KVIR_FUZZ_BPE_VOCAB
  if (kvrt_tokenizer_load(KVIR_FUZZ_BPE_VOCAB, &bpe) != KVRT_OK)
    bpe = nullptr; // as above
#endif
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const uint8_t *rest = data + 1;
  size_t restSize = size - 1;
  int mode = data[0] & 3;
  if (mode == 0 || mode == 2) {
    kvir::fuzz::MemoryFile file(rest, restSize);
    kvrt_tokenizer *tokenizer = nullptr;
    if (kvrt_tokenizer_load(file.c_str(), &tokenizer) != KVRT_OK) {
      if (tokenizer)
        fail("a failed load returned a tokenizer");
      if (std::strlen(kvrt_last_error()) == 0)
        fail("a failed load left no message");
      return 0;
    }
    checkLoaded(tokenizer, mode == 2);
    kvrt_tokenizer_release(tokenizer);
    return 0;
  }
  std::string text(reinterpret_cast<const char *>(rest), restSize);
  if (mode == 1 && tok512)
    checkRoundTrip(text);
  if (mode == 3 && bpe)
    checkByteLevel(text);
  return 0;
}
