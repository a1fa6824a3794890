//===- Text.h - Text in, text out for runners of kv programs ----*- C++ -*-===//
//
// What kv-run and kv-aot-run share to take text instead of token ids and to
// print text next to them: finding and checking the tokenizer of a model,
// encoding `--text NAME=STRING` / `--text-file NAME=FILE` into the token
// arguments of an entry (llama2.c's conventions: a dummy space in front of
// non-empty text, BOS only where asked), decoding continuations, and quoting
// text for reports. No MLIR (docs/kv-run.md, "Text").
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_RUNTIME_EXEC_TEXT_H
#define KVIR_RUNTIME_EXEC_TEXT_H

#include "runtime/core/KVTokenizer.h"
#include "runtime/exec/Session.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvir::exec {

/// A shared reference to a tokenizer (immutable once loaded).
using TokenizerRef = std::shared_ptr<kvrt_tokenizer>;

/// What a runner was asked about text.
struct TextOptions {
  /// `--tokenizer FILE` ("": not given).
  std::string tokenizer;
  /// `--no-tokenizer`: run without one, even where one lies beside the model.
  bool noTokenizer = false;
  /// `--text NAME=STRING` and `--text-file NAME=FILE`, in order: the
  /// argument's name, the text, the option and where it came from (for
  /// messages: the option, or the file's name).
  struct Item {
    std::string name, text, option, source;
  };
  std::vector<Item> texts;
  /// `--bos NAME`: the text arguments encoded with BOS in front.
  std::set<std::string> bos;
  /// `--special`: special (CONTROL) tokens written in the text, such as
  /// `<|im_start|>`, are those tokens (KVRT_ENCODE_SPECIAL); else they are
  /// plain text.
  bool special = false;
};

/// `modelFile` itself when it is a GGUF file with a tokenizer, else
/// `tok<vocab>.bin` in the folder of `modelFile` where that file exists,
/// else "" (also for a synthetic model, `modelFile` == "").
std::string defaultTokenizerPath(const std::string &modelFile, int32_t vocab);

/// Loads the llama2.c tokenizer file `path` and checks that it has `vocab`
/// pieces. Null with `error` (the loader's message, or one naming both
/// sizes).
TokenizerRef loadTokenizer(const std::string &path, int32_t vocab,
                           std::string &error);

/// The tokenizer `options` ask for: `--tokenizer`, else the default beside
/// `modelFile`, else none (null, no error; also with `--no-tokenizer`).
/// `path` says which file was loaded. False with `error` when a file does
/// not load or its vocabulary is not `vocab` pieces.
bool findTokenizer(const TextOptions &options, const std::string &modelFile,
                   int32_t vocab, TokenizerRef &out, std::string &path,
                   std::string &error);

/// Encodes every text of `options` with `tokenizer` into `inputs.givenTokens`
/// (BOS in front for the names in `options.bos`). False with `error` when
/// there are texts but no tokenizer (the message says how to get one), when
/// a name is given twice, or when `--bos` names no text argument.
bool encodeTextInputs(const TextOptions &options,
                      const kvrt_tokenizer *tokenizer, InputOptions &inputs,
                      std::string &error);

/// Parses `NAME=VALUE` of `option` (e.g. `--text`); false with a message
/// when the name is empty or there is no `=`. The value may be empty.
bool splitNameValue(const std::string &spec, const std::string &option,
                    std::string &name, std::string &value, std::string &error);

/// The text of `tokens` decoded one after the other, the first after `prev`
/// (-1: the start of a sequence; after BOS a leading space is dropped, as
/// llama2.c does). False with `error` for an id outside the vocabulary.
bool decodeTokens(const kvrt_tokenizer *tokenizer, int32_t prev,
                  const std::vector<int32_t> &tokens, std::string &out,
                  std::string &error);

/// `text` in double quotes for a text report: `\"`, `\\`, `\n`, `\r`, `\t`,
/// and `\xHH` for other control bytes and for bytes that are not part of
/// valid UTF-8 (a continuation can stop inside a character).
std::string quoteText(const std::string &text);

/// `text` with every byte that is not part of valid UTF-8 replaced by
/// U+FFFD, so that it can go into JSON.
std::string validUtf8(const std::string &text);

} // namespace kvir::exec

#endif // KVIR_RUNTIME_EXEC_TEXT_H
