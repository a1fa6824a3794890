//===- TokenList.cpp - kv-run's token-list form ---------------------------===//

#include "tools/kv-run/TokenList.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

using namespace kvir;
using namespace kvir::run;

namespace {

/// Reads the token list from --tokens, --tokens-file or the text of --text
/// or --text-file (exactly one), encoding text with `tokenizer`.
bool readTokens(const KvRunOptions &options, const exec::TextOptions &prompt,
                const kvrt_tokenizer *tokenizer, std::vector<int32_t> &tokens,
                std::string &error) {
  if (options.tokensGiven + options.tokensFileGiven + prompt.texts.size() !=
      1) {
    error = "give exactly one of --tokens and --tokens-file, or one --text "
            "or --text-file";
    return false;
  }
  if (!prompt.texts.empty()) {
    exec::InputOptions encoded;
    if (!exec::encodeTextInputs(prompt, tokenizer, encoded, error))
      return false;
    tokens = encoded.givenTokens["prompt"].tokens;
    if (tokens.empty()) {
      error = "the text encodes to no tokens: the first form needs at least "
              "one";
      return false;
    }
    return true;
  }
  std::string text = options.tokens, source = "--tokens";
  if (options.tokensFileGiven) {
    source = "'" + options.tokensFile + "'";
    if (!exec::readFile(options.tokensFile, text, error, "token file"))
      return false;
  }
  return exec::parseTokenList(text, source, tokens, error);
}

/// `bytes` as a quoted C-like literal: printable ASCII and whole UTF-8
/// characters as they are, quotes and backslashes escaped, other bytes
/// (controls, a character's bytes split across tokens) as \n, \t or \xHH.
std::string quoted(std::string_view bytes) {
  std::string out = "'";
  for (size_t i = 0; i < bytes.size();) {
    unsigned char c = bytes[i];
    // A whole UTF-8 sequence: its lead byte's length, continuation bytes.
    size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool whole = n > 0 && c < 0xF5 && i + n <= bytes.size();
    for (size_t k = 1; whole && k < n; ++k)
      whole = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    if (whole) {
      out += bytes.substr(i, n);
      i += n;
      continue;
    }
    if (c == '\'' || c == '\\')
      out += std::string("\\") + char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c >= 0x20 && c < 0x7F)
      out += char(c);
    else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02X", unsigned(c));
      out += hex;
    }
    ++i;
  }
  return out + "'";
}

/// --print-tokens: each token's id, its piece as the vocabulary spells it,
/// and the text it decodes to alone (special tokens included).
bool printTokens(const kvrt_tokenizer *tokenizer,
                 const std::vector<int32_t> &tokens, std::string &error) {
  std::printf("tokens: %zu\n", tokens.size());
  for (int32_t id : tokens) {
    const char *piece = nullptr, *text = nullptr;
    size_t pieceLength = 0, textLength = 0;
    if (kvrt_tokenizer_get_piece(tokenizer, id, &piece, &pieceLength,
                                 nullptr) ||
        kvrt_tokenizer_decode_token_ex(tokenizer, -1, id, KVRT_DECODE_SPECIAL,
                                       &text, &textLength)) {
      error =
          "cannot print token " + std::to_string(id) + ": " + kvrt_last_error();
      return false;
    }
    // Padded to 24 characters (UTF-8 lead bytes), not bytes.
    std::string shown = quoted(std::string_view(piece, pieceLength));
    size_t width = 0;
    for (char c : shown)
      width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    shown.append(width < 24 ? 24 - width : 0, ' ');
    std::printf("%8d  %s %s\n", id, shown.c_str(),
                quoted(std::string_view(text, textLength)).c_str());
  }
  return true;
}

} // namespace

void kvir::run::warnBeyondTraining(const Runner &runner, int64_t tokens) {
  std::string warning = runner.contextWarning(tokens);
  if (!warning.empty())
    printWarning(warning);
}

std::unique_ptr<Runner> kvir::run::makeRunner(const RunnerOptions &given,
                                              std::string &error) {
  RunnerOptions options = given;
  if (!options.backendGiven)
    options.backend = "cpu";
  return Runner::create(options, error);
}

bool kvir::run::runTokenList(const KvRunOptions &options,
                             const ForwardSource &forwardSource,
                             std::string &error) {
  const RunOptions &o = options.run;
  auto fail = [&](const std::string &message) {
    error = message;
    return false;
  };
  if (!options.tokensGiven && !options.tokensFileGiven &&
      o.request.texts.empty())
    return fail(
        "nothing to run: give a program (kv-run PROGRAM.mlir, e.g. kv-run "
        "examples/agent-edit.mlir --synthesize-inputs) or a token list "
        "(--tokens, --tokens-file, --text or --text-file); kv-run --help "
        "lists the options");
  if (options.attribute)
    return fail("--attribute belongs to the program form (kv-run "
                "PROGRAM.mlir --attribute)");
  if (options.retarget)
    return fail("--retarget-model belongs to the program form: a token "
                "list runs on any model as it is");
  if (options.printTokens && o.request.texts.empty())
    return fail("--print-tokens shows what a text became: give --text "
                "or --text-file");
  if (o.runner.storeGiven)
    return fail("--kv-store belongs to the program form: blocks are "
                "loaded and stored by kv.load_block and kv.store_block");
  exec::TextOptions text;
  if (!readTextOptions(o.runner, o.request, /*onePrompt=*/true, text, error))
    return false;
  if (text.texts.empty() && !text.bos.empty())
    return fail("--bos " + *text.bos.begin() +
                " names no text: the first form takes --bos prompt with "
                "--text or --text-file (token ids are taken verbatim)");
  // Token ids are checked before anything loads; text needs the tokenizer.
  std::vector<int32_t> tokens;
  if (text.texts.empty() && !readTokens(options, text, nullptr, tokens, error))
    return false;
  std::unique_ptr<Runner> runner = makeRunner(o.runner, error);
  if (!runner)
    return false;
  Runner &r = *runner;
  if (!text.texts.empty()) {
    if (!readTokens(options, text, r.tokenizer(), tokens, error))
      return false;
    if (options.printTokens)
      return printTokens(r.tokenizer(), tokens, error);
  }
  if (!r.checkTokenList(tokens, o.request.greedyTokens(), error))
    return false;
  warnBeyondTraining(r, int64_t(tokens.size()) +
                            std::max<int64_t>(o.request.greedyTokens() - 1, 0));
  if (!r.preparePool(KVRT_KV_F32, /*fromProgram=*/false, error))
    return false;
  Forward forward;
  if (r.backend().runsGeneratedCode() && !forwardSource(r, forward, error))
    return false;
  TokenListRun run;
  run.tokens = std::move(tokens);
  run.allRows = o.request.dumpLogitsGiven;
  run.greedy = o.request.greedyTokens();
  if (!text.texts.empty()) {
    run.fromText = true;
    run.text = text.texts.front().text;
    run.bos = text.bos.count("prompt") > 0;
  }
  if (!r.prefillTokenList(forward, run, error) ||
      !r.printTokenList(run, o.request.dumpLogits, o.request.json, error))
    return false;
  if (std::string note = r.hugePageNote(); !note.empty())
    printNote(note);
  return true;
}
