//===- ChatTemplate.h - Chat messages as a model's prompt -------*- C++ -*-===//
//
// /v1/chat/completions formats its messages with the model's chat template.
// kv-serve does not run Jinja: it knows the common families' templates by
// name (llama-2, chatml as Qwen uses it, llama-3) and a plain one for models
// without a template (llama2.c checkpoints), and tells which family a GGUF
// file's `tokenizer.chat_template` is from the markers it holds. A prompt is
// a list of pieces: text (encoded by the tokenizer) and special tokens
// (looked up in the vocabulary by their piece, e.g. `<|im_start|>`).
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_CHATTEMPLATE_H
#define KVIR_DRIVER_SERVER_CHATTEMPLATE_H

#include "driver/server/Requests.h"

#include <optional>
#include <string>
#include <vector>

namespace kvir::serve {

enum class ChatFormat { Plain, Llama2, ChatML, Llama3 };

/// "plain", "llama-2", "chatml", "llama-3".
const char *chatFormatName(ChatFormat format);
/// The format of a name (those above), or none.
std::optional<ChatFormat> parseChatFormat(const std::string &name);
/// The family of a Jinja chat template, from the markers it uses
/// (`<|im_start|>`: chatml, `<|start_header_id|>`: llama-3, `[INST]`:
/// llama-2), or none.
std::optional<ChatFormat> detectChatFormat(const std::string &jinja);

/// One piece of a formatted prompt: text, or a special token named by its
/// piece (`<s>` is BOS, `</s>` EOS).
struct ChatPiece {
  bool special = false;
  std::string text;
};

/// A chat as a prompt, ending where the assistant's answer begins, and the
/// special tokens that end an answer in this format.
struct ChatPrompt {
  std::vector<ChatPiece> pieces;
  std::vector<std::string> endPieces;
};

ChatPrompt formatChat(ChatFormat format,
                      const std::vector<ChatMessage> &messages);

/// The string value of the metadata key `key` of the GGUF file `path`:
/// true with `out` set, true with `found` false when the file has no such
/// key or is not a GGUF file, false with `error` when the file is malformed.
/// Reads only the header, bounded by the file's size.
bool readGgufString(const std::string &path, const std::string &key,
                    std::string &out, bool &found, std::string &error);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_CHATTEMPLATE_H
