//===- ChatTemplate.cpp - Chat messages as a model's prompt ----*- C++ -*-===//

#include "driver/server/ChatTemplate.h"

#include <cstdio>
#include <cstring>
#include <memory>

using namespace kvir;
using namespace kvir::serve;

const char *kvir::serve::chatFormatName(ChatFormat format) {
  switch (format) {
  case ChatFormat::Plain:
    return "plain";
  case ChatFormat::Llama2:
    return "llama-2";
  case ChatFormat::ChatML:
    return "chatml";
  case ChatFormat::Llama3:
    return "llama-3";
  }
  return "plain";
}

std::optional<ChatFormat> kvir::serve::parseChatFormat(const std::string &n) {
  for (ChatFormat f : {ChatFormat::Plain, ChatFormat::Llama2,
                       ChatFormat::ChatML, ChatFormat::Llama3})
    if (n == chatFormatName(f))
      return f;
  return std::nullopt;
}

std::optional<ChatFormat>
kvir::serve::detectChatFormat(const std::string &jinja) {
  if (jinja.find("<|im_start|>") != std::string::npos)
    return ChatFormat::ChatML;
  if (jinja.find("<|start_header_id|>") != std::string::npos)
    return ChatFormat::Llama3;
  if (jinja.find("[INST]") != std::string::npos)
    return ChatFormat::Llama2;
  return std::nullopt;
}

namespace {

void text(ChatPrompt &p, std::string t) {
  if (!t.empty())
    p.pieces.push_back({false, std::move(t)});
}
void special(ChatPrompt &p, const char *piece) {
  p.pieces.push_back({true, piece});
}

/// Meta's Llama 2 chat: the system prompt inside the first [INST].
ChatPrompt llama2(const std::vector<ChatMessage> &messages) {
  ChatPrompt p;
  p.endPieces = {"</s>"};
  std::string system, pending;
  bool open = false;
  for (const ChatMessage &m : messages) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else if (m.role == "user") {
      if (open) {
        // Two user turns in a row: one [INST] holds both.
        pending += "\n" + m.content;
        continue;
      }
      std::string body = m.content;
      if (!system.empty()) {
        body = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + body;
        system.clear();
      }
      pending = "[INST] " + body;
      open = true;
    } else {
      special(p, "<s>");
      text(p, (open ? pending + " [/INST]" : std::string()) + " " + m.content +
                  " ");
      special(p, "</s>");
      open = false;
      pending.clear();
    }
  }
  if (!open && !system.empty()) {
    pending = "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n";
    open = true;
  }
  special(p, "<s>");
  text(p, (open ? pending : std::string("[INST] ")) + " [/INST]");
  return p;
}

/// ChatML (Qwen): <|im_start|>role\ncontent<|im_end|>\n per message.
ChatPrompt chatml(const std::vector<ChatMessage> &messages) {
  ChatPrompt p;
  p.endPieces = {"<|im_end|>", "<|endoftext|>"};
  for (const ChatMessage &m : messages) {
    special(p, "<|im_start|>");
    text(p, m.role + "\n" + m.content);
    special(p, "<|im_end|>");
    text(p, "\n");
  }
  special(p, "<|im_start|>");
  text(p, "assistant\n");
  return p;
}

/// Llama 3: headers between special tokens, <|eot_id|> after each message.
ChatPrompt llama3(const std::vector<ChatMessage> &messages) {
  ChatPrompt p;
  p.endPieces = {"<|eot_id|>", "<|end_of_text|>"};
  special(p, "<|begin_of_text|>");
  auto header = [&](const std::string &role) {
    special(p, "<|start_header_id|>");
    text(p, role);
    special(p, "<|end_header_id|>");
  };
  for (const ChatMessage &m : messages) {
    header(m.role);
    text(p, "\n\n" + m.content);
    special(p, "<|eot_id|>");
  }
  header("assistant");
  text(p, "\n\n");
  return p;
}

/// Models without a template (llama2.c checkpoints): BOS, the system
/// prompt, then "User: ...\n" and "Assistant: ...\n" lines, ending in
/// "Assistant:".
ChatPrompt plain(const std::vector<ChatMessage> &messages) {
  ChatPrompt p;
  p.endPieces = {"</s>"};
  special(p, "<s>");
  std::string body;
  for (const ChatMessage &m : messages) {
    if (m.role == "system")
      body += m.content + "\n\n";
    else
      body += (m.role == "user" ? "User: " : "Assistant: ") + m.content + "\n";
  }
  text(p, body + "Assistant:");
  return p;
}

/// A bounded reader of a file's header.
class Reader {
public:
  explicit Reader(std::FILE *file) : file(file) {
    std::fseek(file, 0, SEEK_END);
    size = std::ftell(file);
    std::fseek(file, 0, SEEK_SET);
  }
  bool bytes(void *out, uint64_t n) {
    if (n > uint64_t(size - offset))
      return false;
    if (n && std::fread(out, 1, n, file) != n)
      return false;
    offset += int64_t(n);
    return true;
  }
  bool skip(uint64_t n) {
    if (n > uint64_t(size - offset))
      return false;
    offset += int64_t(n);
    return std::fseek(file, offset, SEEK_SET) == 0;
  }
  template <typename T> bool scalar(T &out) { return bytes(&out, sizeof(T)); }
  int64_t at() const { return offset; }

private:
  std::FILE *file;
  int64_t size = 0, offset = 0;
};

/// Bytes of a GGUF scalar type, 0 for strings and arrays, -1 for unknown.
int scalarBytes(uint32_t type) {
  static const int bytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return type < 13 ? bytes[type] : -1;
}

/// Skips one value of `type`; false when malformed.
bool skipValue(Reader &r, uint32_t type, int depth) {
  int bytes = scalarBytes(type);
  if (bytes > 0)
    return r.skip(uint64_t(bytes));
  if (type == 8) {
    uint64_t length;
    return r.scalar(length) && r.skip(length);
  }
  if (type != 9 || depth > 4)
    return false;
  uint32_t element;
  uint64_t count;
  if (!r.scalar(element) || !r.scalar(count))
    return false;
  int elementBytes = scalarBytes(element);
  if (elementBytes > 0) {
    if (count > UINT64_MAX / uint64_t(elementBytes))
      return false;
    return r.skip(count * uint64_t(elementBytes));
  }
  for (uint64_t i = 0; i < count; ++i)
    if (!skipValue(r, element, depth + 1))
      return false;
  return true;
}

} // namespace

ChatPrompt kvir::serve::formatChat(ChatFormat format,
                                   const std::vector<ChatMessage> &messages) {
  switch (format) {
  case ChatFormat::Llama2:
    return llama2(messages);
  case ChatFormat::ChatML:
    return chatml(messages);
  case ChatFormat::Llama3:
    return llama3(messages);
  case ChatFormat::Plain:
    break;
  }
  return plain(messages);
}

bool kvir::serve::readGgufString(const std::string &path,
                                 const std::string &key, std::string &out,
                                 bool &found, std::string &error) {
  found = false;
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(
      std::fopen(path.c_str(), "rb"), std::fclose);
  if (!file)
    return true;
  Reader r(file.get());
  char magic[4];
  if (!r.bytes(magic, 4) || std::memcmp(magic, "GGUF", 4) != 0)
    return true;
  uint32_t version;
  uint64_t tensors, count;
  if (!r.scalar(version) || !r.scalar(tensors) || !r.scalar(count)) {
    error = path + ": a truncated GGUF header";
    return false;
  }
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t length;
    int64_t where = r.at();
    if (!r.scalar(length) || length > (1 << 16)) {
      error =
          path + ": a malformed metadata key at byte " + std::to_string(where);
      return false;
    }
    std::string name(length, '\0');
    uint32_t type;
    if (!r.bytes(name.data(), length) || !r.scalar(type)) {
      error = path + ": a truncated metadata entry at byte " +
              std::to_string(where);
      return false;
    }
    if (name == key && type == 8) {
      uint64_t size;
      // A chat template is a few KiB; 1 MiB bounds what a file can make
      // the server hold.
      if (!r.scalar(size) || size > (1 << 20)) {
        error = path + ": the value of " + key + " is malformed or too long";
        return false;
      }
      out.assign(size, '\0');
      if (!r.bytes(out.data(), size)) {
        error = path + ": the value of " + key + " is truncated";
        return false;
      }
      found = true;
      return true;
    }
    if (!skipValue(r, type, 0)) {
      error = path + ": a malformed value of " + name.substr(0, 64) +
              " at byte " + std::to_string(where);
      return false;
    }
  }
  return true;
}
