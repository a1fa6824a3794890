//===- GGUF.h - GGUF v3 models and tokenizers -------------------*- C++ -*-===//
//
// The reader and writer of GGUF files (the format of llama.cpp) for the llama
// architecture, beside the llama2.c reader (ModelIO.cpp). The C ABI is in
// KVRuntime.h (kvrt_model_load detects GGUF by its magic,
// kvrt_model_load_gguf_buffer, kvrt_model_save_gguf) and KVTokenizer.h
// (kvrt_tokenizer_load detects GGUF too).
//
// Reading is hardened: every count, length, shape, type, offset and size is
// checked against the bytes that are there, with overflow checks, before
// anything is allocated for it or read through it. The configuration comes
// from the llama.* keys, the weights are dequantised to f32 (F32, F16, BF16,
// Q8_0), and a tokenizer comes from the tokenizer.ggml.* keys
// (tokenizer.ggml.model = llama or gpt2; a file without tensors is a
// vocabulary alone). Error messages name the key, the tensor or
// the byte offset that is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_GGUF_H
#define KVIR_RUNTIME_CORE_GGUF_H

#include "runtime/core/KVRuntime.h"
#include "runtime/core/KVTokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvrt::gguf {

/// Whether `size` bytes at `data` begin with the GGUF magic.
bool hasMagic(const void *data, size_t size);

/// Whether the file at `path` begins with the GGUF magic (false when it
/// cannot be read).
bool fileHasMagic(const char *path);

/// Parses and validates a whole GGUF file held in memory: the entry point
/// for fuzzing. Returns "" on success, with `*model` set when `model` is not
/// null and `*tokenizer` set when `tokenizer` is not null and the file has a
/// tokenizer (else null); returns what is wrong otherwise, with nothing set.
/// Never reads outside [data, data + size) and allocates only what the
/// validated header implies (bounded by a small multiple of `size`).
std::string readBuffer(const uint8_t *data, size_t size, kvrt_model **model,
                       kvrt_tokenizer **tokenizer);

/// readBuffer on the file at `path` (mapped, not copied); messages start
/// with the file's name.
std::string readFile(const char *path, kvrt_model **model,
                     kvrt_tokenizer **tokenizer);

/// llama.cpp's Q8_0 block: 32 weights as int8 times one f16 scale.
constexpr int kQ8Block = 32;
/// Quantises `kQ8Block` floats as llama.cpp's quantize_row_q8_0 does (scale
/// max|x| / 127 rounded to f16, q = round(x / scale)) into 34 bytes.
void quantizeQ8Block(const float *x, uint8_t *block);

} // namespace kvrt::gguf

#endif // KVIR_RUNTIME_CORE_GGUF_H
