//===- TextTest.cpp - Text in, text out for runners -------------*- C++ -*-===//
//
// Finding and checking tokenizers, encoding text arguments and binding them,
// decoding continuations, quoting text for reports. The tests that need
// tok512.bin skip, with the reason, where it is absent.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Text.h"
#include "test/unit/TestSupport.h"

#include <fstream>

using namespace kvir;
using namespace kvir::exec;
using namespace kvir::test;

namespace {

std::string tokenizerPath() { return KVIR_TEST_TOKENIZER; }

bool haveTokenizer() { return std::ifstream(tokenizerPath()).good(); }

#define REQUIRE_TOKENIZER()                                                    \
  do {                                                                         \
    if (!haveTokenizer())                                                      \
      GTEST_SKIP() << "tok512.bin not found at " << tokenizerPath()            \
                   << " (set KVIR_TEST_MODEL at configure time)";              \
  } while (0)

/// A llama2.c tokenizer file of `pieces` (score 0 each).
void writeTokenizer(const std::string &path,
                    const std::vector<std::string> &pieces) {
  std::ofstream out(path, std::ios::binary);
  int32_t maxLength = 1;
  for (const std::string &p : pieces)
    maxLength = std::max<int32_t>(maxLength, int32_t(p.size()));
  out.write(reinterpret_cast<const char *>(&maxLength), 4);
  for (const std::string &p : pieces) {
    float score = 0;
    int32_t length = int32_t(p.size());
    out.write(reinterpret_cast<const char *>(&score), 4);
    out.write(reinterpret_cast<const char *>(&length), 4);
    out.write(p.data(), length);
  }
}

/// The manifest of an entry taking a model and the given token arguments
/// (name, static size or -1).
EntryManifest
manifestOf(const std::vector<std::pair<std::string, int64_t>> &tokenArgs,
           const kvrt_model_config &config) {
  EntryManifest m;
  m.entry = "main";
  ArgSpec model;
  model.kind = ValueKind::Model;
  model.model = config;
  m.args.push_back(model);
  for (const auto &[name, size] : tokenArgs) {
    ArgSpec a;
    a.kind = ValueKind::Tokens;
    a.name = name;
    a.dims[0] = size;
    m.args.push_back(a);
  }
  return m;
}

TEST(Text, QuoteEscapesControlCharactersAndBrokenUtf8) {
  EXPECT_EQ(quoteText("Once upon"), "\"Once upon\"");
  EXPECT_EQ(quoteText("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(quoteText("l1\nl2\tx\r"), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(quoteText(std::string("\x01\x7f\0z", 4)), "\"\\x01\\x7f\\x00z\"");
  // Valid UTF-8 passes; a character cut short, or a stray continuation
  // byte, is escaped byte by byte.
  EXPECT_EQ(quoteText("caf\xc3\xa9 \xe2\x98\x83"),
            "\"caf\xc3\xa9 \xe2\x98\x83\"");
  EXPECT_EQ(quoteText("x\xe2\x98"), "\"x\\xe2\\x98\"");
  EXPECT_EQ(quoteText("\x80\xc0\xaf"), "\"\\x80\\xc0\\xaf\"");
}

TEST(Text, ValidUtf8ReplacesBrokenBytes) {
  EXPECT_EQ(validUtf8("ok \xc3\xa9"), "ok \xc3\xa9");
  EXPECT_EQ(validUtf8("a\xe2\x98"), "a\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(validUtf8("\xed\xa0\x80"), // a surrogate: not valid UTF-8
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}

TEST(Text, SplitNameValue) {
  std::string name, value, error;
  EXPECT_TRUE(
      splitNameValue("city=Paris=France", "--text", name, value, error));
  EXPECT_EQ(name, "city");
  EXPECT_EQ(value, "Paris=France");
  EXPECT_TRUE(splitNameValue("city=", "--text", name, value, error));
  EXPECT_EQ(value, "");
  EXPECT_FALSE(splitNameValue("city", "--text", name, value, error));
  EXPECT_EQ(error, "--text expects NAME=STRING, got 'city'");
  EXPECT_FALSE(splitNameValue("=x", "--text-file", name, value, error));
  EXPECT_EQ(error, "--text-file expects NAME=FILE, got '=x'");
}

TEST(Text, DefaultTokenizerIsBesideTheModel) {
  TempDir dir;
  std::string model = dir.file("m.bin");
  EXPECT_EQ(defaultTokenizerPath(model, 512), "");
  writeTokenizer(dir.file("tok512.bin"), {"a", "b", "c"});
  EXPECT_EQ(defaultTokenizerPath(model, 512), dir.file("tok512.bin"));
  EXPECT_EQ(defaultTokenizerPath(model, 300), "");
  EXPECT_EQ(defaultTokenizerPath("", 512), ""); // a synthetic model
}

TEST(Text, FindTokenizerChecksTheVocabulary) {
  TempDir dir;
  writeTokenizer(dir.file("tok4.bin"), {"a", "b", "c"});
  TextOptions options;
  TokenizerRef tokenizer;
  std::string path, error;
  // Found beside the model: three pieces, the model has four.
  EXPECT_FALSE(
      findTokenizer(options, dir.file("m.bin"), 4, tokenizer, path, error));
  EXPECT_NE(error.find("the tokenizer has 3 pieces, the model's vocabulary "
                       "has 4"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("found beside the model"), std::string::npos);
  // --no-tokenizer: none, no error.
  options.noTokenizer = true;
  EXPECT_TRUE(
      findTokenizer(options, dir.file("m.bin"), 4, tokenizer, path, error));
  EXPECT_EQ(tokenizer, nullptr);
  // Given: it must fit.
  options.noTokenizer = false;
  options.tokenizer = dir.file("tok4.bin");
  EXPECT_FALSE(findTokenizer(options, "", 4, tokenizer, path, error));
  EXPECT_TRUE(findTokenizer(options, "", 3, tokenizer, path, error)) << error;
  EXPECT_EQ(kvrt_tokenizer_vocab_size(tokenizer.get()), 3);
  EXPECT_EQ(path, dir.file("tok4.bin"));
  // A file cut short: the loader's message.
  std::ofstream(dir.file("cut.bin"), std::ios::binary).write("\x04\x00\x00", 3);
  options.tokenizer = dir.file("cut.bin");
  EXPECT_FALSE(findTokenizer(options, "", 3, tokenizer, path, error));
  EXPECT_NE(error.find("cannot load the tokenizer"), std::string::npos);
}

TEST(Text, TextNeedsATokenizerAndBosNamesATextArgument) {
  TextOptions options;
  options.texts.push_back({"city", "Paris", "--text", "--text"});
  InputOptions inputs;
  std::string error;
  EXPECT_FALSE(encodeTextInputs(options, nullptr, inputs, error));
  EXPECT_NE(error.find("--text needs a tokenizer: give --tokenizer FILE"),
            std::string::npos)
      << error;

  TempDir dir;
  writeTokenizer(dir.file("t.bin"), {"<unk>", "<s>", "</s>", " ", "a", "b"});
  TokenizerRef tokenizer = loadTokenizer(dir.file("t.bin"), 6, error);
  ASSERT_TRUE(tokenizer) << error;
  options.bos = {"town"};
  EXPECT_FALSE(encodeTextInputs(options, tokenizer.get(), inputs, error));
  EXPECT_NE(error.find("--bos town names no text argument"), std::string::npos);
  options.bos = {"city"};
  options.texts = {{"city", "ab", "--text", "--text"},
                   {"empty", "", "--text", "--text"}};
  ASSERT_TRUE(encodeTextInputs(options, tokenizer.get(), inputs, error))
      << error;
  // BOS, the dummy space, then the characters (no merges: no piece " a").
  EXPECT_EQ(inputs.givenTokens["city"].tokens,
            (std::vector<int32_t>{1, 3, 4, 5}));
  EXPECT_TRUE(inputs.givenTokens["city"].bos);
  EXPECT_TRUE(inputs.givenTokens["empty"].tokens.empty());
  // The same name twice.
  options.bos.clear();
  options.texts = {{"city", "a", "--text", "--text"},
                   {"city", "b", "--text-file", "'f'"}};
  InputOptions again;
  EXPECT_FALSE(encodeTextInputs(options, tokenizer.get(), again, error));
  EXPECT_EQ(error, "--text-file city is given twice");
}

TEST(Text, BindingEncodedText) {
  kvrt_model_config config = makeConfig(16, 32, 1, 2, 1, 512, 64);
  EntryManifest m = manifestOf({{"story", -1}, {"fixed", 2}}, config);
  auto bind = [&](const InputOptions &inputs, std::vector<Value> &args,
                  std::vector<BoundInput> &bound, std::string &error) {
    bound.clear();
    return bindArguments(m, config, inputs, args, &bound, error);
  };
  InputOptions inputs;
  inputs.givenTokens["story"] = {{}, "--text", "--text", "", false};
  inputs.givenTokens["arg2"] = {{7, 8}, "--text", "--text", "hi", true};
  std::vector<Value> args;
  std::vector<BoundInput> bound;
  std::string error;
  // An empty text is 0 tokens for a dynamic argument.
  ASSERT_TRUE(bind(inputs, args, bound, error)) << error;
  ASSERT_EQ(args.size(), 3u);
  EXPECT_TRUE(args[1].tokens.empty());
  EXPECT_EQ(args[2].tokens, (std::vector<int32_t>{7, 8}));
  ASSERT_EQ(bound.size(), 3u);
  EXPECT_TRUE(bound[2].fromText);
  EXPECT_EQ(bound[2].text, "hi");
  EXPECT_TRUE(bound[2].bos);
  EXPECT_EQ(bound[1].size, 0);

  // ... which a static size rejects with the usual message.
  inputs.givenTokens["arg2"].tokens.clear();
  EXPECT_FALSE(bind(inputs, args, bound, error));
  EXPECT_EQ(error, "argument arg2 (fixed) of @main has 2 tokens in its type, "
                   "its input has 0");
  // Given twice, by --input and by --text.
  inputs.givenTokens["arg2"].tokens = {1, 2};
  inputs.given["fixed"] = {"3 4", "'f'"};
  EXPECT_FALSE(bind(inputs, args, bound, error));
  EXPECT_EQ(error, "argument arg2 (fixed) of @main is given twice (as --input "
                   "fixed and --text arg2)");
  inputs.given.clear();
  // A name that is no argument.
  inputs.givenTokens["town"] = {{1}, "--text-file", "'t'", "x", false};
  EXPECT_FALSE(bind(inputs, args, bound, error));
  EXPECT_EQ(error, "--text-file town names no argument of @main (use argN or "
                   "the argument's kv.name)");
}

TEST(Text, Stories260KTokenizerRoundTrips) {
  REQUIRE_TOKENIZER();
  std::string error;
  TokenizerRef tokenizer = loadTokenizer(tokenizerPath(), 512, error);
  ASSERT_TRUE(tokenizer) << error;
  TextOptions options;
  options.texts = {{"a", "Once upon a time", "--text", "--text"},
                   {"b", "Zoë saw a 🐉!", "--text", "--text"}};
  options.bos = {"a"};
  InputOptions inputs;
  ASSERT_TRUE(encodeTextInputs(options, tokenizer.get(), inputs, error))
      << error;
  EXPECT_EQ(inputs.givenTokens["a"].tokens,
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  // Byte fallback: the dragon is four byte pieces (byte + 3).
  const std::vector<int32_t> &b = inputs.givenTokens["b"].tokens;
  std::vector<int32_t> dragon = {0xf0 + 3, 0x9f + 3, 0x90 + 3, 0x89 + 3};
  EXPECT_NE(std::search(b.begin(), b.end(), dragon.begin(), dragon.end()),
            b.end());
  // Decoding after BOS drops the dummy space; after another token it stays.
  std::string text;
  ASSERT_TRUE(decodeTokens(tokenizer.get(), -1, inputs.givenTokens["a"].tokens,
                           text, error));
  EXPECT_EQ(text, "Once upon a time");
  ASSERT_TRUE(decodeTokens(tokenizer.get(), 378, b, text, error));
  EXPECT_EQ(text, " Zoë saw a 🐉!");
  EXPECT_FALSE(decodeTokens(tokenizer.get(), -1, {512}, text, error));
}

} // namespace
