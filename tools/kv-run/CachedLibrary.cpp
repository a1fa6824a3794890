//===- CachedLibrary.cpp - Compiled code from the cache or from kv-aot ---===//

#include "tools/kv-run/CachedLibrary.h"

#include "driver/runner/ProgramLibrary.h"
#include "runtime/core/ForwardCall.h"
#include "runtime/core/ModelConfig.h"
#include "tools/kv-run/CommandLine.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace kvir;
using namespace kvir::run;

namespace {

/// A private directory for kv-aot's output, removed with what is in it.
class ScratchDirectory {
public:
  bool create(std::string &error) {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/kvir-forward-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      error = cache::errnoText("cannot create a directory for the forward ('" +
                               pattern + "')");
      return false;
    }
    path = pattern;
    return true;
  }
  ~ScratchDirectory() {
    if (path.empty())
      return;
    for (const char *name :
         {"code.o", "libcode.so", "code.manifest", "kv-aot.log"})
      ::unlink((path + "/" + name).c_str());
    ::rmdir(path.c_str());
  }
  std::string path;
};

/// Runs `argv` with stdout and stderr into `log`; its exit status, or -1
/// with `error` when it could not start or was killed.
int runChild(const std::vector<std::string> &argv, const std::string &log,
             std::string &error) {
  std::vector<char *> args;
  for (const std::string &arg : argv)
    args.push_back(const_cast<char *>(arg.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int spawned =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    error = "cannot start " + argv[0] + ": " + std::strerror(spawned);
    return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      error = cache::errnoText("cannot wait for " + argv[0]);
      return -1;
    }
  }
  if (!WIFEXITED(status)) {
    error = argv[0] + " was killed by signal " +
            std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
  }
  return WEXITSTATUS(status);
}

/// Binds the forward `prefix` of the library at `path`; false with `why`.
bool bindLibrary(const std::string &path, const std::string &prefix,
                 const char *key, Forward &out, std::string &why) {
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *message = ::dlerror();
    why = message ? message : "dlopen failed";
    return false;
  }
  Forward f = bindForward(handle, prefix, key);
  if (!f.prefill || !f.attention || !f.materialize) {
    ::dlclose(handle);
    why = "the library lacks the entry points of " + prefix;
    return false;
  }
  // Never closed: the forward runs until the process ends.
  out = f;
  return true;
}

} // namespace

std::string kvir::run::besideThisExecutable(const std::string &name) {
  std::string self(4096, '\0');
  ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size());
  if (n <= 0 || size_t(n) >= self.size())
    return name;
  self.resize(size_t(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

bool kvir::run::loadCachedLibrary(const std::vector<std::string> &compile,
                                  const std::string &entryKey,
                                  cache::LibraryCache *cache,
                                  const LibraryOpener &open,
                                  std::string &error) {
  std::string why;
  if (cache) {
    std::string path;
    if (cache->load(entryKey, path)) {
      if (open(path, why))
        return true;
      cache->countUnusable();
    }
  }
  ScratchDirectory scratch;
  if (!scratch.create(error))
    return false;
  std::string log = scratch.path + "/kv-aot.log";
  std::vector<std::string> argv = compile;
  for (const char *arg : {"-o", "", "--name", "code"})
    argv.push_back(*arg ? arg : scratch.path);
  int status = runChild(argv, log, why);
  if (status != 0) {
    if (status > 0) {
      std::string text;
      cache::readWhole(log, text);
      while (!text.empty() && text.back() == '\n')
        text.pop_back();
      why = compile[0] + " failed" + (text.empty() ? "" : ":\n" + text);
    }
    error = why;
    return false;
  }
  std::string library = scratch.path + "/libcode.so";
  if (cache) {
    std::string bytes, problem;
    if (int readError = cache::readWhole(library, bytes)) {
      error = "cannot read " + library + ": " + std::strerror(readError);
      return false;
    }
    // The stored entry is what later runs load: load it now too (unless
    // another process evicted it already).
    if (!cache->store(entryKey, bytes, problem))
      printWarning("compile cache: cannot store the compiled code: " + problem);
    else if (open(cache->entryPath(entryKey), why))
      return true;
  }
  if (!open(library, why)) {
    error = why;
    return false;
  }
  return true;
}

bool kvir::run::loadForwardLibrary(const Runner &runner,
                                   const std::string &quantDot,
                                   cache::LibraryCache *cache,
                                   const std::string &compiler, Forward &out,
                                   std::string &error) {
  WeightFormats formats = modelWeightFormats(runner.model());
  // The keys of the forwards loaded, for the life of the process
  // (Forward::key points into them).
  static std::mutex mutex;
  static std::list<std::string> keys;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string &key = keys.emplace_back(
      forwardKey(runner.config(), runner.pageType(), formats));
  std::string prefix =
      forwardPrefix(runner.config(), runner.pageType(), formats);
  auto open = [&](const std::string &path, std::string &why) {
    return bindLibrary(path, prefix, key.c_str(), out, why);
  };
  // The library also depends on how its products are taken.
  if (loadCachedLibrary({compiler, "--forward", key, "--quant-dot", quantDot},
                        key + " quant-dot=" + quantDot, cache, open, error))
    return true;
  error = "cannot compile the forward of the model: " + error;
  return false;
}
