//===- KvRunTest.cpp - kv-run end to end, without a shell -------*- C++ -*-===//
//
// Runs the kv-run binary with posix_spawn and checks its logits against
// llama2.c's and its errors against the documented messages.
//
//===----------------------------------------------------------------------===//

#include "test/unit/TestSupport.h"

#include <algorithm>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>

extern char **environ;

using namespace kvir::test;

namespace {

struct Outcome {
  int exitCode = -1;
  std::string out, err;
};

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Runs kv-run with `args`, capturing stdout and stderr through files.
Outcome runKvRun(const TempDir &dir, std::vector<std::string> args) {
  args.insert(args.begin(), KVIR_KV_RUN_PATH);
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string outPath = dir.file("stdout"), errPath = dir.file("stderr");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, outPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, errPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  Outcome outcome;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
  if (rc != 0)
    return outcome;
  int status = 0;
  waitpid(pid, &status, 0);
  outcome.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.out = slurp(outPath);
  outcome.err = slurp(errPath);
  return outcome;
}

std::string joined(const std::vector<int32_t> &tokens) {
  std::ostringstream os;
  for (int32_t t : tokens)
    os << t << ' ';
  return os.str();
}

TEST(KvRunTest, ReproducesLlama2cLogits) {
  KVIR_REQUIRE_TEST_MODEL();
  TempDir dir;
  std::string dump = dir.file("logits.f32");
  Outcome o = runKvRun(dir, {"--model", testModelPath(), "--tokens-file",
                             greedyTokensPath(), "--dump-logits", dump});
  ASSERT_EQ(o.exitCode, 0) << o.err;
  std::vector<float> logits = readFloats(dump);
  std::vector<float> expected = readFloats(greedyLogitsPath());
  ASSERT_EQ(logits.size(), expected.size());
  EXPECT_LT(maxAbsDiff(logits.data(), expected.data(), expected.size()), 1e-3);
  EXPECT_NE(o.out.find("tokens: 81"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("argmax at last position: "), std::string::npos);
}

TEST(KvRunTest, PrefixesAndSmallPagesMatchLlama2c) {
  KVIR_REQUIRE_TEST_MODEL();
  TempDir dir;
  std::vector<int32_t> tokens = readTokenFile(greedyTokensPath());
  std::vector<float> expected = readFloats(greedyLogitsPath());
  // Logits are causal: any prefix's logits are llama2.c's first rows, and
  // each argmax is the next token of the greedy chain.
  for (auto [n, pageTokens] :
       {std::pair<size_t, int>{1, 16}, {17, 3}, {64, 7}}) {
    std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + n);
    std::string dump = dir.file("prefix.f32");
    Outcome o = runKvRun(dir, {"--model", testModelPath(), "--tokens",
                               joined(prefix), "--dump-logits", dump,
                               "--page-tokens", std::to_string(pageTokens)});
    ASSERT_EQ(o.exitCode, 0) << o.err;
    std::vector<float> logits = readFloats(dump);
    ASSERT_EQ(logits.size(), n * 512);
    EXPECT_LT(maxAbsDiff(logits.data(), expected.data(), logits.size()), 1e-3)
        << n << " tokens";
    EXPECT_NE(
        o.out.find("argmax at last position: " + std::to_string(tokens[n])),
        std::string::npos)
        << o.out;
  }
}

/// Expects kv-run to fail with a message containing `needle`.
void expectFailure(std::vector<std::string> args, const std::string &needle) {
  TempDir dir;
  Outcome o = runKvRun(dir, std::move(args));
  EXPECT_NE(o.exitCode, 0);
  EXPECT_NE(o.err.find(needle), std::string::npos)
      << "stderr '" << o.err << "' lacks '" << needle << "'";
}

TEST(KvRunTest, ClearErrorsWithoutAModel) {
  TempDir dir;
  expectFailure({"--model", dir.file("absent.bin"), "--tokens", "1 2"},
                "cannot open model");
}

TEST(KvRunTest, BuiltInModelWithoutModelFlag) {
  TempDir dir;
  Outcome o = runKvRun(dir, {"--tokens", "1 2"});
  ASSERT_EQ(o.exitCode, 0) << o.err;
  EXPECT_NE(o.out.find("model: built-in synthetic model"), std::string::npos)
      << o.out;
}

TEST(KvRunTest, ClearErrors) {
  KVIR_REQUIRE_TEST_MODEL();
  TempDir dir;
  std::string absent = dir.file("absent.bin");
  std::string model = testModelPath();
  expectFailure({"--model", model, "--tokens", "1 512"},
                "token 512 at index 1 is outside the vocabulary [0, 512)");
  expectFailure({"--model", model, "--tokens", "1 x2 3"},
                "item 2 'x2' is not a non-negative int32 token id");
  expectFailure({"--model", model, "--tokens", "1 -4"}, "'-4'");
  expectFailure({"--model", model, "--tokens", "  "}, "no token ids");
  expectFailure({"--model", model},
                "nothing to run: give a program (kv-run PROGRAM.mlir");
  expectFailure(
      {"--model", model, "--tokens", "1", "--tokens-file", greedyTokensPath()},
      "exactly one of");
  expectFailure({"--model", model, "--tokens-file", absent},
                "cannot open token file '" + absent +
                    "': No such file or directory");
  // A file that never ends is read up to the bound, not to the end.
  expectFailure({"--model", model, "--tokens-file", "/dev/zero"},
                "token file '/dev/zero' has at least");
  expectFailure({"--model", model, "--tokens-file", "/dev/zero"},
                "bytes, more than the 268435456 a runner reads");
  expectFailure({"--model", "/dev/zero", "--tokens", "1"},
                "cannot open model '/dev/zero': not a regular file");
  expectFailure({"--model", model, "--tokens", "1", "--backend", "gpu"},
                "unknown backend 'gpu'");
  expectFailure({"--model", model, "--tokens", "1", "--page-tokens", "0"},
                "--page-tokens must be positive");
  expectFailure({"--model", model, "--tokens", "1", "--dump-logits",
                 dir.file("no/such/dir/out.f32")},
                "cannot create");
}

} // namespace
