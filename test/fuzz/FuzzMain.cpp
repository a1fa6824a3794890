//===- FuzzMain.cpp - Replays fuzz inputs without libFuzzer -----*- C++ -*-===//
//
// The driver of a fuzz target in a build without KVIR_BUILD_FUZZERS: runs
// LLVMFuzzerTestOneInput once on every file named on the command line and on
// every file of every directory named there (options starting with '-', as
// libFuzzer's, are ignored), so that the seed corpora and the inputs of past
// crashes run in every build's tests. A failing input aborts, as under
// libFuzzer.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc,
                                                          char ***argv);

namespace {

int runFile(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read '%s'\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  int inputs = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-')
      continue;
    std::filesystem::path path(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto &entry : std::filesystem::directory_iterator(path, ec))
        if (entry.is_regular_file())
          files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto &file : files) {
        errors += runFile(file);
        ++inputs;
      }
    } else {
      errors += runFile(path);
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "usage: %s FILE|DIR...  (replays fuzz inputs)\n",
                 argv[0]);
    return 2;
  }
  std::printf("%s: %d inputs replayed\n", argv[0], inputs);
  return errors ? 1 : 0;
}
