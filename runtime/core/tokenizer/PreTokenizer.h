//===- PreTokenizer.h - Splitting rules of byte-level BPE -------*- C++ -*-===//
//
// The pre-tokenizers of byte-level BPE vocabularies: the rules that cut a
// text into words before BPE merges bytes within each word. Each is the
// sequence of regular expressions of its reference tokenizer (the HF
// tokenizer's pre_tokenizer, as llama.cpp runs it), written by hand as
// matchers over code points with real Unicode categories (Unicode.h): no
// regex engine. A stage cuts every current piece into the stretches its
// expression matches and the stretches between them, as HF's Split with
// behaviour "Isolated" does. Internal to runtime/core.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_CORE_TOKENIZER_PRETOKENIZER_H
#define KVIR_RUNTIME_CORE_TOKENIZER_PRETOKENIZER_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvrt::tok {

/// The rule sets; names are tokenizer.ggml.pre values.
enum class PreRules : uint8_t {
  Llama3,        // llama-bpe: Llama 3
  Qwen2,         // qwen2: Qwen 2, 2.5, 3
  Gpt2,          // gpt-2
  DeepseekLlm,   // deepseek-llm
  DeepseekCoder, // deepseek-coder
  Falcon,        // falcon
  Starcoder,     // starcoder
  Default,       // default: llama.cpp's rules for a vocabulary without a name
};

/// What a tokenizer.ggml.pre name selects.
struct PreTokenizerSpec {
  PreRules rules;
  /// A word that is itself a token becomes that token without merges (HF's
  /// BPE ignore_merges, set by Llama 3's tokenizer).
  bool ignoreMerges;
};

/// The rules named `name`, or nullopt for a name this runtime does not know.
std::optional<PreTokenizerSpec> findPreTokenizer(std::string_view name);

/// The names findPreTokenizer accepts, for messages: "llama-bpe, qwen2, ...".
std::string supportedPreTokenizers();

/// Cuts the `n` code points at `text` into words: appends the end offset
/// (in code points) of each word to `ends`, in order; the last is `n`.
void preTokenize(PreRules rules, const char32_t *text, size_t n,
                 std::vector<size_t> &ends);

} // namespace kvrt::tok

#endif // KVIR_RUNTIME_CORE_TOKENIZER_PRETOKENIZER_H
