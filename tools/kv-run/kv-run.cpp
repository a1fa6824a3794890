//===- kv-run.cpp - Run a model over tokens, report logits ------*- C++ -*-===//
//
// First form of kv-run: prefill a token list from position 0 with one backend,
// optionally dump the logits of every position, and print a short summary.
// Backends sit side by side in `backends()`; later ones (JIT-compiled MLIR on
// CPU or GPU) take the same request and fill the same result.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/KVRuntime.h"
#include "runtime/reference/Reference.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace cl = llvm::cl;

namespace {

cl::OptionCategory kvRunCategory("kv-run options");

cl::opt<std::string> modelPath("model", cl::desc("llama2.c checkpoint to run"),
                               cl::value_desc("file"), cl::Required,
                               cl::cat(kvRunCategory));
cl::opt<std::string>
    tokensArg("tokens",
              cl::desc("whitespace-separated token ids, e.g. \"1 2 3\" "
                       "(taken verbatim: no BOS is added)"),
              cl::value_desc("ids"), cl::cat(kvRunCategory));
cl::opt<std::string>
    tokensFile("tokens-file",
               cl::desc("file of whitespace-separated token ids"),
               cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<std::string>
    dumpLogits("dump-logits",
               cl::desc("write the logits of every position as little-endian "
                        "float32 [n][vocab]"),
               cl::value_desc("file"), cl::cat(kvRunCategory));
cl::opt<std::string> backendName("backend",
                                 cl::desc("backend that computes the forward "
                                          "(available: reference)"),
                                 cl::value_desc("name"), cl::init("reference"),
                                 cl::cat(kvRunCategory));
cl::opt<int> pageTokens("page-tokens",
                        cl::desc("token slots per KV page (default 16)"),
                        cl::value_desc("n"), cl::init(16),
                        cl::cat(kvRunCategory));

/// What a backend is asked to compute.
struct Request {
  const kvrt_model *model;
  std::vector<int32_t> tokens;
  int32_t pageTokens;
};

/// What a backend returns: logits [tokens][vocab].
struct Result {
  std::vector<float> logits;
};

/// A backend: fills `result` or returns an error naming the problem.
using BackendFn = std::function<llvm::Error(const Request &, Result &)>;

/// Turns the runtime's last error into an llvm::Error.
llvm::Error runtimeError(llvm::StringRef what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 what + ": " + kvrt_last_error());
}

/// The oracle: prefill the tokens from position 0 over an empty view.
llvm::Error runReference(const Request &request, Result &result) {
  kvrt_pool_config poolConfig;
  if (kvrt_pool_config_for_model(request.model, &poolConfig))
    return runtimeError("cannot size the kv pool");
  poolConfig.page_tokens = request.pageTokens;
  int64_t n = static_cast<int64_t>(request.tokens.size());
  poolConfig.capacity_pages = (n + request.pageTokens - 1) / request.pageTokens;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&poolConfig, &pool))
    return runtimeError("cannot create the kv pool");
  kvrt_view *empty = nullptr, *filled = nullptr;
  kvrt_status status = kvrt_view_create(pool, &empty);
  kvrt_pool_release(pool);
  if (!status)
    status = kvir::reference::prefill(
        request.model, empty, request.tokens.data(), n, /*pos=*/0,
        /*label=*/nullptr, &result.logits, &filled);
  kvrt_view_release(empty);
  kvrt_view_release(filled);
  if (status)
    return runtimeError("reference prefill failed");
  return llvm::Error::success();
}

/// The backends by name.
const std::vector<std::pair<std::string, BackendFn>> &backends() {
  static const std::vector<std::pair<std::string, BackendFn>> table = {
      {"reference", runReference},
  };
  return table;
}

/// Parses whitespace-separated decimal token ids from `text`.
llvm::Expected<std::vector<int32_t>> parseTokens(llvm::StringRef text,
                                                 llvm::StringRef source) {
  constexpr llvm::StringLiteral spaces = " \t\n\v\f\r";
  llvm::SmallVector<llvm::StringRef> words;
  for (llvm::StringRef rest = text.ltrim(spaces); !rest.empty();
       rest = rest.ltrim(spaces)) {
    llvm::StringRef word = rest.take_front(rest.find_first_of(spaces));
    words.push_back(word);
    rest = rest.drop_front(word.size());
  }
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < words.size(); ++i) {
    int64_t value;
    if (words[i].getAsInteger(10, value) || value < 0 ||
        value > std::numeric_limits<int32_t>::max())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "malformed token list in " + source + ": item " + llvm::Twine(i + 1) +
              " '" + words[i] + "' is not a non-negative int32 token id");
    tokens.push_back(static_cast<int32_t>(value));
  }
  if (tokens.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no token ids in " + source);
  return tokens;
}

/// Reads the token list from --tokens or --tokens-file (exactly one).
llvm::Expected<std::vector<int32_t>> readTokens() {
  bool inline_ = tokensArg.getNumOccurrences() > 0;
  bool file = tokensFile.getNumOccurrences() > 0;
  if (inline_ == file)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "give exactly one of --tokens and --tokens-file");
  if (inline_)
    return parseTokens(tokensArg, "--tokens");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(tokensFile, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read token file '" + tokensFile +
                                       "': " + buffer.getError().message());
  return parseTokens((*buffer)->getBuffer(), "'" + tokensFile + "'");
}

/// Writes logits as little-endian float32 (the host order, checked below).
llvm::Error writeLogits(const std::vector<float> &logits,
                        llvm::StringRef path) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "logits are written in host order");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError(ec, "cannot create '" + path +
                                           "': " + ec.message());
  os.write(reinterpret_cast<const char *>(logits.data()),
           logits.size() * sizeof(float));
  os.close();
  if (os.has_error())
    return llvm::createStringError(
        os.error(), "cannot write '" + path + "': " + os.error().message());
  return llvm::Error::success();
}

/// The whole run; any failure comes back as an error to print.
llvm::Error run() {
  auto backend =
      std::find_if(backends().begin(), backends().end(), [](const auto &entry) {
        return entry.first == backendName;
      });
  if (backend == backends().end())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown backend '" + backendName +
                                       "' (available: reference)");
  if (pageTokens <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--page-tokens must be positive, got " +
                                       llvm::Twine(int(pageTokens)));
  llvm::Expected<std::vector<int32_t>> tokens = readTokens();
  if (!tokens)
    return tokens.takeError();

  kvrt_model *model = nullptr;
  if (kvrt_model_load(modelPath.c_str(), &model))
    return runtimeError("cannot load the model");
  std::unique_ptr<kvrt_model, void (*)(kvrt_model *)> owner(model,
                                                            kvrt_model_release);
  kvrt_model_config config;
  kvrt_model_get_config(model, &config);
  for (size_t i = 0; i < tokens->size(); ++i)
    if ((*tokens)[i] >= config.vocab_size)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "token " + llvm::Twine((*tokens)[i]) +
                                         " at index " + llvm::Twine(i) +
                                         " is outside the vocabulary [0, " +
                                         llvm::Twine(config.vocab_size) + ")");

  Request request{model, std::move(*tokens), pageTokens};
  Result result;
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error error = backend->second(request, result))
    return error;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  size_t n = request.tokens.size(), vocab = config.vocab_size;
  const float *last = result.logits.data() + (n - 1) * vocab;
  size_t argmax = std::max_element(last, last + vocab) - last;
  llvm::outs() << "model: " << modelPath << " (dim " << config.dim
               << ", layers " << config.n_layers << ", heads " << config.n_heads
               << "/" << config.n_kv_heads << ", vocab " << config.vocab_size
               << ")\n"
               << "backend: " << backend->first << "\n"
               << "tokens: " << n << " (positions 0.." << n - 1 << ")\n"
               << "argmax at last position: " << argmax << " (logit "
               << llvm::format("%.6f", last[argmax]) << ")\n"
               << "time: " << llvm::format("%.3f", seconds * 1e3) << " ms ("
               << llvm::format("%.1f", n / seconds) << " tokens/s)\n";
  if (!dumpLogits.empty()) {
    if (llvm::Error error = writeLogits(result.logits, dumpLogits))
      return error;
    llvm::outs() << "logits: " << n << " x " << vocab << " float32 -> "
                 << dumpLogits << "\n";
  }
  return llvm::Error::success();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(kvRunCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "kv-run: run a model over a token list and report its logits\n\n"
      "  kv-run --model M.bin --tokens \"1 2 3\" --dump-logits out.f32\n");
  if (llvm::Error error = run()) {
    llvm::WithColor::error(llvm::errs(), "kv-run")
        << llvm::toString(std::move(error)) << "\n";
    return 1;
  }
  return 0;
}
