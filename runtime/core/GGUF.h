//===- GGUF.h - GGUF v3 models and tokenizers -------------------*- C++ -*-===//
//
// The reader and writer of GGUF files (the format of llama.cpp) for the llama
// and qwen2 architectures (kArchitectures), beside the llama2.c reader
// (ModelIO.cpp). The C ABI is in KVRuntime.h (kvrt_model_load detects GGUF by
// its magic, kvrt_model_load_gguf_buffer, kvrt_model_save_gguf) and
// KVTokenizer.h (kvrt_tokenizer_load detects GGUF too).
//
// Reading is hardened: every count, length, shape, type, offset and size is
// checked against the bytes that are there, with overflow checks, before
// anything is allocated for it or read through it. The configuration comes
// from the <architecture>.* keys, the weights stay in their formats (F32, F16,
// BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; every block's scales checked), and a
// tokenizer comes from the tokenizer.ggml.* keys
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

/// A GGUF architecture KVIR reads and writes: its general.architecture
/// name, the prefix of its keys, and what llama.cpp's forward for it does
/// that the config spells: its RoPE layout, and whether it reads the RoPE
/// frequency variants (a rope_freqs tensor, rope.dimension_count below the
/// head size: llama does, qwen2 rotates whole heads without factors). Q/K/V
/// biases (attn_{q,k,v}.bias) and output.weight are optional in both.
struct Architecture {
  const char *name;
  kvrt_rope_layout rope;
  bool ropeVariants;
};
inline constexpr Architecture kArchitectures[] = {
    // Llama 1, 2 and 3.x (BPE vocabulary, rope_freqs factors), Mistral.
    {"llama", KVRT_ROPE_INTERLEAVED, true},
    // Qwen 2 and 2.5: NEOX RoPE, biases on Q, K and V.
    {"qwen2", KVRT_ROPE_HALF, false},
};

/// The supported architectures' names, for messages: "llama and qwen2".
std::string architectureNames();

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

/// readBuffer on the file at `path`, mapped read-only (at a 2 MiB-aligned
/// address, advised MADV_HUGEPAGE: HugePages.h): the model keeps the mapping
/// and its weights point into it (a model read by readBuffer keeps a copy of
/// the data section instead). With `read`, the file is read into memory the
/// model owns instead of mapped (KVRT_LOAD_READ). Messages start with the
/// file's name.
std::string readFile(const char *path, kvrt_model **model,
                     kvrt_tokenizer **tokenizer, bool read = false);

} // namespace kvrt::gguf

#endif // KVIR_RUNTIME_CORE_GGUF_H
