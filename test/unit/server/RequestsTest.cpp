//===- RequestsTest.cpp - kv-serve's request decoding -----------*- C++ -*-===//
//
// Every decoder on good bodies, and bad input of every class the server must
// answer with a 4xx naming the problem: malformed JSON, invalid UTF-8, deep
// nesting, unknown fields, wrong types, out-of-range values, limits.
//
//===----------------------------------------------------------------------===//

#include "driver/server/Requests.h"
#include "driver/server/ChatTemplate.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using namespace kvir::serve;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.maxBodyBytes = 4096;
  l.maxTokens = 64;
  l.maxGenerate = 100;
  return l;
}

/// Decodes `body` as a create request; the error's message on failure.
std::string createError(const std::string &body, int *status = nullptr,
                        std::string *param = nullptr) {
  CreateContextRequest request;
  RequestError error;
  if (decodeCreateContext(body, limits(), request, error))
    return "";
  if (status)
    *status = error.status;
  if (param)
    *param = error.param;
  return error.message;
}

TEST(ServeRequests, CreateContext) {
  CreateContextRequest r;
  RequestError e;
  ASSERT_TRUE(decodeCreateContext(
      R"({"segments": [{"name": "system", "kind": "system", "text": "Hi",
                        "bos": true},
                       {"name": "city", "kind": "fact", "tokens": [5, 6]},
                       {"name": "answer", "kind": "answer", "text": "x",
                        "deps": ["city"]}]})",
      limits(), r, e))
      << e.message;
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_TRUE(r.segments[0].content.isText);
  EXPECT_TRUE(r.segments[0].content.bos);
  EXPECT_EQ(r.segments[1].content.tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.segments[2].deps, (std::vector<std::string>{"city"}));
  EXPECT_EQ(r.segments[1].kind, "fact");
}

// "special" goes with text: unset by default (the server's default
// applies), set either way where given, refused with token ids or alone.
TEST(ServeRequests, SpecialTokensInText) {
  CreateContextRequest r;
  RequestError e;
  ASSERT_TRUE(decodeCreateContext(
      R"({"segments": [{"name": "a", "text": "<|im_start|>x", "special": true},
                       {"name": "b", "text": "<|im_start|>x", "special": false},
                       {"name": "c", "text": "<|im_start|>x"}]})",
      limits(), r, e))
      << e.message;
  EXPECT_EQ(r.segments[0].content.special, std::optional<bool>(true));
  EXPECT_EQ(r.segments[1].content.special, std::optional<bool>(false));
  EXPECT_FALSE(r.segments[2].content.special.has_value());
  std::string param;
  EXPECT_NE(createError(R"({"segments": [{"name": "a", "tokens": [1],
                                          "special": true}]})",
                        nullptr, &param)
                .find("goes with text: tokens are taken verbatim"),
            std::string::npos);
  EXPECT_EQ(param, "segments[0].special");
  EXPECT_NE(createError(R"({"segments": [{"name": "a", "special": "yes",
                                          "text": "x"}]})")
                .find("special"),
            std::string::npos);

  CompletionRequest c;
  ASSERT_TRUE(decodeCompletion(
      R"({"prompt": "<|im_start|>x", "special": true})", limits(), c, e))
      << e.message;
  EXPECT_EQ(c.prompt.special, std::optional<bool>(true));
  ASSERT_TRUE(decodeCompletion(R"({"prompt": "x"})", limits(), c, e));
  EXPECT_FALSE(c.prompt.special.has_value());
  EXPECT_FALSE(decodeCompletion(R"({"prompt": [1, 2], "special": true})",
                                limits(), c, e));
  EXPECT_EQ(e.code, "conflicting_fields");
  EXPECT_EQ(e.param, "special");

  EditRequest edit;
  ASSERT_TRUE(decodeEdit(R"({"segment": "a", "text": "<|im_end|>",
                             "special": true})",
                         limits(), edit, e))
      << e.message;
  EXPECT_EQ(edit.content.special, std::optional<bool>(true));
}

TEST(ServeRequests, MalformedBodies) {
  int status = 0;
  EXPECT_NE(createError("", &status).find("empty"), std::string::npos);
  EXPECT_EQ(status, 400);
  EXPECT_NE(createError(R"({"segments": [)").find("malformed JSON"),
            std::string::npos);
  EXPECT_NE(createError("[1, 2]").find("expected a JSON object, got an array"),
            std::string::npos);
  EXPECT_NE(createError(std::string(R"({"segments": ")") + "\xff\xfe" + "\"}")
                .find("not valid UTF-8: byte 14 (0xff)"),
            std::string::npos);
  // An overlong encoding and a surrogate are not UTF-8 either.
  EXPECT_EQ(findInvalidUtf8("a\xc0\xaf"), 1u);
  EXPECT_EQ(findInvalidUtf8("\xed\xa0\x80"), 0u);
  EXPECT_EQ(findInvalidUtf8("caf\xc3\xa9 \xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(findInvalidUtf8("\xe2\x82"), 0u);
  std::string deep(100, '[');
  EXPECT_NE(createError(deep).find("nests"), std::string::npos);
  std::string big =
      R"({"segments": [], "x": ")" + std::string(5000, 'a') + "\"}";
  EXPECT_NE(createError(big, &status).find("more than the limit of 4096"),
            std::string::npos);
  EXPECT_EQ(status, 413);
}

TEST(ServeRequests, FieldsAndTypes) {
  std::string param;
  EXPECT_EQ(createError(R"({"segments": [], "extra": 1})", nullptr, &param),
            "extra: unknown field (docs/serve.md lists the fields)");
  EXPECT_EQ(param, "extra");
  EXPECT_EQ(createError(R"({"segments": [{"name": "a", "text": "x", "z": 1}]})",
                        nullptr, &param),
            "segments[0].z: unknown field of segments[0] (docs/serve.md "
            "lists the fields)");
  EXPECT_EQ(createError(R"({"segments": {}})"),
            "segments: expected an array of segments, got an object");
  EXPECT_EQ(createError(R"({})"), "segments: is required");
  EXPECT_EQ(createError(R"({"segments": [{"name": 3, "text": "x"}]})"),
            "segments[0].name: expected a string, got the number 3");
  EXPECT_NE(createError(R"({"segments": [{"name": "1a", "text": "x"}]})")
                .find("is not a name"),
            std::string::npos);
  EXPECT_NE(createError(R"({"segments": [{"name": "a", "kind": "poem",
                                          "text": "x"}]})")
                .find("unknown segment kind 'poem'"),
            std::string::npos);
  EXPECT_EQ(createError(R"({"segments": [{"name": "a"}]})"),
            "segments[0].text: is required (or tokens: token ids)");
  EXPECT_EQ(createError(R"({"segments": [{"name": "a", "text": "x",
                                          "tokens": [1]}]})"),
            "segments[0].tokens: give text or tokens, not both");
  EXPECT_EQ(createError(R"({"segments": [{"name": "a", "tokens": [1, -2]}]})"),
            "segments[0].tokens[1]: must be in [0, 2147483647], got -2");
  EXPECT_EQ(createError(R"({"segments": [{"name": "a", "tokens": [1.5]}]})"),
            "segments[0].tokens[0]: expected an integer, got the number 1.5");
  EXPECT_EQ(createError(R"({"segments": [{"name": "a",
                                          "tokens": [99999999999]}]})"),
            "segments[0].tokens[0]: must be in [0, 2147483647], got "
            "99999999999");
  std::string many = R"({"segments": [{"name": "a", "tokens": [)";
  for (int i = 0; i < 65; ++i)
    many += (i ? ",1" : "1");
  EXPECT_NE(createError(many + "]}]}").find("more than the limit of 64"),
            std::string::npos);
  EXPECT_EQ(createError(R"({"segments": [{"name": "a", "tokens": [1],
                                          "bos": true}]})"),
            "segments[0].bos: goes with text: tokens are taken verbatim (put "
            "the BOS id in front)");
}

TEST(ServeRequests, Edit) {
  EditRequest r;
  RequestError e;
  ASSERT_TRUE(decodeEdit(R"({"segment": "city", "text": "Paris",
                             "repair": {"first_k": 4}})",
                         limits(), r, e))
      << e.message;
  EXPECT_EQ(r.strategy, "cot_slice");
  EXPECT_EQ(r.repair.kind, Repair::Kind::FirstK);
  EXPECT_EQ(r.repair.firstK, 4);
  EXPECT_FALSE(decodeEdit(R"({"segment": "city", "text": "Paris",
                              "strategy": "erratum"})",
                          limits(), r, e));
  EXPECT_EQ(e.param, "correction");
  EXPECT_FALSE(decodeEdit(R"({"segment": "c", "text": "P",
                              "strategy": "fast"})",
                          limits(), r, e));
  EXPECT_NE(e.message.find("unknown strategy 'fast'"), std::string::npos);
  EXPECT_FALSE(decodeEdit(R"({"segment": "c", "text": "P",
                              "repair": {"fraction": 1.5}})",
                          limits(), r, e));
  EXPECT_EQ(e.message, "repair.fraction: must be in [0, 1], got 1.5");
  EXPECT_FALSE(decodeEdit(R"({"segment": "c", "text": "P",
                              "repair": {"first_k": 1, "fraction": 0.1}})",
                          limits(), r, e));
  EXPECT_NE(e.message.find("exactly one"), std::string::npos);
  EXPECT_FALSE(decodeEdit(R"({"segment": "c", "text": "P", "strategy": "exact",
                              "repair": {"first_k": 1}})",
                          limits(), r, e));
  EXPECT_EQ(e.param, "repair");
  ASSERT_TRUE(decodeEdit(R"({"segment": "c", "text": "P",
                             "strategy": "erratum",
                             "correction": {"text": "No: P."}})",
                         limits(), r, e))
      << e.message;
  EXPECT_TRUE(r.hasCorrection);
}

TEST(ServeRequests, Sampling) {
  GenerateRequest g;
  RequestError e;
  ASSERT_TRUE(decodeGenerate("", limits(), g, e)) << e.message;
  EXPECT_EQ(g.sampling.maxTokens, 16);
  ASSERT_TRUE(decodeGenerate(R"({"max_tokens": 5, "temperature": 0,
                                 "top_k": 3, "top_p": 0.5, "seed": 7,
                                 "stop": ["\n", "."], "stream": true,
                                 "deps": ["a"]})",
                             limits(), g, e))
      << e.message;
  EXPECT_TRUE(g.sampling.seedGiven);
  EXPECT_EQ(g.sampling.stop.size(), 2u);
  EXPECT_TRUE(g.depsGiven);
  EXPECT_FALSE(decodeGenerate(R"({"max_tokens": 101})", limits(), g, e));
  EXPECT_EQ(e.message, "max_tokens: must be in [0, 100], got 101");
  EXPECT_FALSE(decodeGenerate(R"({"temperature": -1})", limits(), g, e));
  EXPECT_FALSE(decodeGenerate(R"({"top_p": 0})", limits(), g, e));
  EXPECT_EQ(e.message, "top_p: must be in (0, 1], got 0");
  EXPECT_FALSE(decodeGenerate(R"({"stop": [""]})", limits(), g, e));
  EXPECT_FALSE(decodeGenerate(R"({"stop": 5})", limits(), g, e));
  EXPECT_EQ(e.message,
            "stop: expected a string or an array of strings, got the number 5");
  EXPECT_FALSE(decodeGenerate(R"({"stream": "yes"})", limits(), g, e));
  EXPECT_EQ(e.message, "stream: expected true or false, got a string");
}

TEST(ServeRequests, OpenAI) {
  CompletionRequest c;
  RequestError e;
  ASSERT_TRUE(decodeCompletion(R"({"model": "m", "prompt": "Once",
                                   "max_tokens": 4, "n": 1, "user": "u",
                                   "logit_bias": {}, "seed": null,
                                   "stream_options": {"include_usage": true},
                                   "presence_penalty": 0})",
                               limits(), c, e))
      << e.message;
  EXPECT_TRUE(c.prompt.isText);
  ASSERT_TRUE(decodeCompletion(R"({"prompt": [1, 2, 3]})", limits(), c, e));
  EXPECT_EQ(c.prompt.tokens.size(), 3u);
  EXPECT_FALSE(decodeCompletion(R"({"prompt": ["a", "b"]})", limits(), c, e));
  EXPECT_NE(e.message.find("batches of prompts are not supported"),
            std::string::npos);
  EXPECT_FALSE(decodeCompletion(R"({"prompt": "x", "n": 2})", limits(), c, e));
  EXPECT_FALSE(
      decodeCompletion(R"({"prompt": "x", "logprobs": 2})", limits(), c, e));
  EXPECT_EQ(e.code, "unsupported");

  ChatRequest chat;
  ASSERT_TRUE(decodeChat(R"({"messages": [{"role": "system", "content": "S"},
                            {"role": "user", "content": [{"type": "text",
                                                          "text": "Hi"}]}],
                             "max_completion_tokens": 7})",
                         limits(), chat, e))
      << e.message;
  EXPECT_EQ(chat.messages[1].content, "Hi");
  EXPECT_EQ(chat.sampling.maxTokens, 7);
  EXPECT_FALSE(decodeChat(R"({"messages": []})", limits(), chat, e));
  EXPECT_FALSE(
      decodeChat(R"({"messages": [{"role": "robot", "content": "x"}]})",
                 limits(), chat, e));
  EXPECT_NE(e.message.find("unknown role 'robot'"), std::string::npos);
  EXPECT_FALSE(decodeChat(R"({"messages": [{"role": "user", "content": "x"}],
                             "tools": [{"type": "function"}]})",
                          limits(), chat, e));
}

TEST(ServeRequests, Names) {
  EXPECT_TRUE(isIdentifier("city_2"));
  EXPECT_TRUE(isIdentifier("_x"));
  EXPECT_FALSE(isIdentifier(""));
  EXPECT_FALSE(isIdentifier("2x"));
  EXPECT_FALSE(isIdentifier("a-b"));
  EXPECT_FALSE(isIdentifier(std::string(65, 'a')));
}

TEST(ServeChat, Formats) {
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}};
  auto text = [](const ChatPrompt &p) {
    std::string t;
    for (const ChatPiece &piece : p.pieces)
      t += piece.special ? "{" + piece.text + "}" : piece.text;
    return t;
  };
  EXPECT_EQ(text(formatChat(ChatFormat::ChatML, m)),
            "{<|im_start|>}system\nBe brief.{<|im_end|>}\n{<|im_start|>}user\n"
            "Hi{<|im_end|>}\n{<|im_start|>}assistant\n");
  EXPECT_EQ(text(formatChat(ChatFormat::Llama3, m)),
            "{<|begin_of_text|>}{<|start_header_id|>}system{<|end_header_id|>}"
            "\n\nBe brief.{<|eot_id|>}{<|start_header_id|>}user"
            "{<|end_header_id|>}\n\nHi{<|eot_id|>}{<|start_header_id|>}"
            "assistant{<|end_header_id|>}\n\n");
  EXPECT_EQ(text(formatChat(ChatFormat::Llama2, m)),
            "{<s>}[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
  m.push_back({"assistant", "Hello."});
  m.push_back({"user", "Bye"});
  EXPECT_EQ(text(formatChat(ChatFormat::Llama2, m)),
            "{<s>}[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. "
            "{</s>}{<s>}[INST] Bye [/INST]");
  EXPECT_EQ(text(formatChat(ChatFormat::Plain, m)),
            "{<s>}Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Bye\n"
            "Assistant:");
  EXPECT_EQ(formatChat(ChatFormat::ChatML, m).endPieces[0], "<|im_end|>");
}

TEST(ServeChat, Detection) {
  EXPECT_EQ(detectChatFormat("{% for m in messages %}<|im_start|>{{ m.role }}"),
            ChatFormat::ChatML);
  EXPECT_EQ(detectChatFormat("<|start_header_id|>"), ChatFormat::Llama3);
  EXPECT_EQ(detectChatFormat("{{ bos_token + '[INST] ' }}"),
            ChatFormat::Llama2);
  EXPECT_FALSE(detectChatFormat("{{ messages }}").has_value());
  EXPECT_EQ(parseChatFormat("llama-3"), ChatFormat::Llama3);
  EXPECT_FALSE(parseChatFormat("jinja").has_value());
}

/// A GGUF header with a few keys of several types, then the template.
std::string writeGguf(const std::string &jinja, bool truncate) {
  std::string bytes = "GGUF";
  auto u32 = [&](uint32_t v) { bytes.append(reinterpret_cast<char *>(&v), 4); };
  auto u64 = [&](uint64_t v) { bytes.append(reinterpret_cast<char *>(&v), 8); };
  auto str = [&](const std::string &s) {
    u64(s.size());
    bytes += s;
  };
  u32(3);
  u64(0);
  u64(4);
  str("general.architecture");
  u32(8);
  str("llama");
  str("llama.context_length");
  u32(4);
  u32(4096);
  str("tokenizer.ggml.tokens");
  u32(9);
  u32(8);
  u64(2);
  str("<s>");
  str("</s>");
  str("tokenizer.chat_template");
  u32(8);
  str(jinja);
  if (truncate)
    bytes.resize(bytes.size() - 3);
  std::string path =
      testing::TempDir() + "/chat-" + std::to_string(truncate) + ".gguf";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(ServeChat, GgufTemplate) {
  std::string value, error;
  bool found = false;
  ASSERT_TRUE(readGgufString(writeGguf("<|im_start|>x", false),
                             "tokenizer.chat_template", value, found, error));
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "<|im_start|>x");
  EXPECT_FALSE(readGgufString(writeGguf("<|im_start|>x", true),
                              "tokenizer.chat_template", value, found, error));
  EXPECT_NE(error.find("truncated"), std::string::npos);
  // Not a GGUF file: no template, no error.
  std::string other = testing::TempDir() + "/not.gguf";
  std::ofstream(other) << "llama2.c";
  ASSERT_TRUE(
      readGgufString(other, "tokenizer.chat_template", value, found, error));
  EXPECT_FALSE(found);
}

} // namespace
