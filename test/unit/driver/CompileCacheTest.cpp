//===- CompileCacheTest.cpp - The compile cache on disk ---------*- C++ -*-===//
//
// The cache alone (hits, misses, corrupt and stale entries, two processes
// writing one key, the size bound, an unsafe directory), then through
// compileProgram: a program compiled once is loaded the second time and
// computes the same bits, and an entry that cannot be used is compiled
// afresh.
//
//===----------------------------------------------------------------------===//

#include "driver/compiler/CompileCache.h"
#include "driver/compiler/Compiler.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/exec/Session.h"
#include "test/unit/TestSupport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvir::compiler;
using namespace kvir::test;

namespace {

namespace fs = std::filesystem;

CacheKey keyOf(const std::string &text) {
  return CacheKeyBuilder().add("test", text).finish();
}

std::unique_ptr<CompileCache> openCache(const std::string &dir,
                                        const std::string &identity = "A",
                                        uint64_t maxBytes = 1 << 30) {
  CompileCache::Config config;
  config.directory = dir;
  config.identity = identity;
  config.maxBytes = maxBytes;
  std::string error;
  std::unique_ptr<CompileCache> cache = CompileCache::open(config, error);
  EXPECT_TRUE(cache) << error;
  return cache;
}

/// Files of `dir` whose names end in `suffix`.
std::vector<std::string> filesEndingIn(const std::string &dir,
                                       const std::string &suffix) {
  std::vector<std::string> out;
  for (const auto &entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(entry.path());
  }
  return out;
}

void setAge(const std::string &path, int seconds) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(CompileCache, MissThenHit) {
  TempDir dir;
  auto cache = openCache(dir.file("cache"));
  ASSERT_TRUE(cache);
  CacheEntry entry;
  std::string why;
  EXPECT_FALSE(cache->load(keyOf("k"), entry, &why));
  EXPECT_EQ(why, "no entry");
  std::string error;
  std::string object(100000, '\0');
  for (size_t i = 0; i < object.size(); ++i)
    object[i] = char(i * 7);
  ASSERT_TRUE(cache->store(keyOf("k"), {object, "sites"}, error)) << error;
  ASSERT_TRUE(cache->load(keyOf("k"), entry, &why)) << why;
  EXPECT_EQ(entry.object, object);
  EXPECT_EQ(entry.metadata, "sites");
  // Another key is another entry.
  EXPECT_FALSE(cache->load(keyOf("k2"), entry));
  CacheStats s = cache->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.rejected, 0);
  EXPECT_EQ(s.stored, 1);
  // The file is private, and no temporary file is left.
  struct stat st;
  ASSERT_EQ(stat(cache->entryPath(keyOf("k")).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(filesEndingIn(dir.file("cache"), ".tmp").empty());
  EXPECT_NE(describeCacheStats(*cache).find("1 hit, 2 misses, 0 rejected"),
            std::string::npos)
      << describeCacheStats(*cache);
}

TEST(CompileCache, KeysSeparateTheirParts) {
  // "ab" + "c" and "a" + "bc" are different keys.
  EXPECT_FALSE(CacheKeyBuilder().add("x", "ab").add("y", "c").finish() ==
               CacheKeyBuilder().add("x", "a").add("y", "bc").finish());
  EXPECT_TRUE(CacheKeyBuilder().add("x", "ab").finish() ==
              CacheKeyBuilder().add("x", "ab").finish());
  EXPECT_EQ(keyOf("k").hex().size(), 64u);
}

TEST(CompileCache, CorruptEntriesAreRejectedAndRebuilt) {
  TempDir dir;
  auto cache = openCache(dir.file("cache"));
  ASSERT_TRUE(cache);
  std::string error, path = cache->entryPath(keyOf("k"));
  ASSERT_TRUE(
      cache->store(keyOf("k"), {std::string(5000, 'o'), "meta"}, error));
  std::string good = readFileBytes(path);
  struct Case {
    const char *name;
    std::string bytes;
    const char *reason;
  };
  std::string flipped = good;
  flipped[good.size() - 100] ^= 1;
  std::string flippedMeta = good;
  flippedMeta.back() ^= 1;
  std::string badMagic = good;
  badMagic[0] = 'X';
  std::string badFormat = good;
  badFormat[8] = 9;
  std::string longer = good + "x";
  std::vector<Case> cases = {
      {"a flipped object byte", flipped, "corrupt: digest mismatch"},
      {"a flipped metadata byte", flippedMeta, "corrupt: digest mismatch"},
      {"truncated", good.substr(0, good.size() - 1),
       "corrupt: its sizes do not match the file's"},
      {"a byte too many", longer, "corrupt: its sizes do not match the file's"},
      {"the header cut", good.substr(0, 40), "shorter than its header"},
      {"empty", "", "shorter than its header"},
      {"another magic", badMagic, "not an entry (bad magic)"},
      {"another format", badFormat, "stale: format 9"},
  };
  int64_t rejected = 0;
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    writeFileBytes(path, c.bytes);
    CacheEntry entry;
    std::string why;
    EXPECT_FALSE(cache->load(keyOf("k"), entry, &why));
    EXPECT_EQ(why, c.reason);
    EXPECT_EQ(cache->stats().rejected, ++rejected);
    // What a caller does next: compile and store over it.
    ASSERT_TRUE(
        cache->store(keyOf("k"), {std::string(5000, 'o'), "meta"}, error));
    EXPECT_TRUE(cache->load(keyOf("k"), entry, &why)) << why;
  }
  // An entry copied under another key's name is stale, not used.
  std::string other = cache->entryPath(keyOf("other"));
  writeFileBytes(other, good);
  CacheEntry entry;
  std::string why;
  EXPECT_FALSE(cache->load(keyOf("other"), entry, &why));
  EXPECT_EQ(why, "stale: another key");
}

TEST(CompileCache, AnotherToolchainsEntryIsStale) {
  TempDir dir;
  auto a = openCache(dir.file("cache"), "kvir 0.1; llvm 22.1.8; cpu x");
  auto b = openCache(dir.file("cache"), "kvir 0.2; llvm 22.1.8; cpu x");
  ASSERT_TRUE(a && b);
  std::string error;
  ASSERT_TRUE(a->store(keyOf("k"), {"object of 0.1", ""}, error));
  // Each version names its entries apart: both are kept side by side.
  EXPECT_NE(a->entryPath(keyOf("k")), b->entryPath(keyOf("k")));
  CacheEntry entry;
  std::string why;
  EXPECT_FALSE(b->load(keyOf("k"), entry, &why));
  EXPECT_EQ(why, "no entry");
  // An entry of 0.1 found where 0.2 looks is stale: ignored, then rebuilt.
  fs::copy_file(a->entryPath(keyOf("k")), b->entryPath(keyOf("k")));
  EXPECT_FALSE(b->load(keyOf("k"), entry, &why));
  EXPECT_EQ(why, "stale: another toolchain");
  EXPECT_EQ(b->stats().rejected, 1);
  ASSERT_TRUE(b->store(keyOf("k"), {"object of 0.2", ""}, error));
  ASSERT_TRUE(b->load(keyOf("k"), entry, &why)) << why;
  EXPECT_EQ(entry.object, "object of 0.2");
  ASSERT_TRUE(a->load(keyOf("k"), entry, &why)) << why;
  EXPECT_EQ(entry.object, "object of 0.1");
}

// Writers in several processes store the same key over and over while a
// reader loads it: every load is a miss or a whole entry of one writer,
// never a mix or a part, and no temporary file is left.
TEST(CompileCache, ProcessesRacingOnOneKey) {
  TempDir dir;
  std::string cacheDir = dir.file("cache");
  ASSERT_TRUE(openCache(cacheDir));
  constexpr int kWriters = 4, kStores = 15;
  constexpr size_t kSize = 1 << 20;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto cache = openCache(cacheDir);
      std::string error;
      bool ok = cache != nullptr;
      for (int i = 0; ok && i < kStores; ++i)
        ok = cache->store(
            keyOf("k"),
            {std::string(kSize, char('a' + w)), "writer " + std::to_string(w)},
            error);
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  pid_t reader = fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) {
    auto cache = openCache(cacheDir);
    int bad = cache ? 0 : 1;
    for (int i = 0; i < 400 && !bad; ++i) {
      CacheEntry entry;
      if (!cache->load(keyOf("k"), entry))
        continue;
      char c = entry.object.empty() ? 0 : entry.object[0];
      if (entry.object != std::string(kSize, c) ||
          entry.metadata != "writer " + std::to_string(c - 'a'))
        bad = 2;
    }
    // A rejected file would mean a reader saw a partial one.
    _exit(bad ? bad : (cache->stats().rejected ? 3 : 0));
  }
  children.push_back(reader);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << pid << " status " << status;
  }
  EXPECT_TRUE(filesEndingIn(cacheDir, ".tmp").empty());
  EXPECT_EQ(filesEndingIn(cacheDir, ".kvjit").size(), 1u);
  auto cache = openCache(cacheDir);
  CacheEntry entry;
  ASSERT_TRUE(cache->load(keyOf("k"), entry));
  EXPECT_EQ(entry.object.size(), kSize);
}

TEST(CompileCache, SizeBoundEvictsTheLeastRecentlyUsed) {
  TempDir dir;
  auto cache = openCache(dir.file("cache"), "A", 1 << 20);
  ASSERT_TRUE(cache);
  std::string error, object(300 << 10, 'x');
  for (const char *k : {"k1", "k2", "k3"})
    ASSERT_TRUE(cache->store(keyOf(k), {object, ""}, error)) << error;
  EXPECT_EQ(cache->stats().evicted, 0);
  // k1 is the oldest, k2 next; using k1 makes k2 the least recently used.
  setAge(cache->entryPath(keyOf("k1")), 300);
  setAge(cache->entryPath(keyOf("k2")), 200);
  setAge(cache->entryPath(keyOf("k3")), 100);
  CacheEntry entry;
  ASSERT_TRUE(cache->load(keyOf("k1"), entry));
  ASSERT_TRUE(cache->store(keyOf("k4"), {object, ""}, error)) << error;
  EXPECT_EQ(cache->stats().evicted, 1);
  EXPECT_FALSE(fs::exists(cache->entryPath(keyOf("k2"))));
  for (const char *k : {"k1", "k3", "k4"})
    EXPECT_TRUE(fs::exists(cache->entryPath(keyOf(k)))) << k;
  uint64_t total = 0;
  for (const std::string &file : filesEndingIn(dir.file("cache"), ".kvjit"))
    total += fs::file_size(file);
  EXPECT_LE(total, uint64_t(1) << 20);
  // An entry beyond the bound is not stored at all.
  EXPECT_FALSE(
      cache->store(keyOf("big"), {std::string(2 << 20, 'x'), ""}, error));
  EXPECT_NE(error.find("larger than the cache's bound"), std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(cache->entryPath(keyOf("big"))));
  EXPECT_EQ(cache->stats().storeFailures, 1);
}

TEST(CompileCache, AbandonedTemporaryFilesAreRemoved) {
  TempDir dir;
  auto cache = openCache(dir.file("cache"));
  ASSERT_TRUE(cache);
  std::string old = dir.file("cache") + "/dead.1.2.3.tmp",
              fresh = dir.file("cache") + "/live.1.2.3.tmp";
  writeFileBytes(old, "partial");
  writeFileBytes(fresh, "partial");
  setAge(old, 2 * 3600);
  std::string error;
  ASSERT_TRUE(cache->store(keyOf("k"), {"o", ""}, error));
  EXPECT_FALSE(fs::exists(old));
  // One being written now is left to its writer.
  EXPECT_TRUE(fs::exists(fresh));
}

TEST(CompileCache, UnsafeDirectoryIsRefused) {
  TempDir dir;
  std::string path = dir.file("shared");
  fs::create_directories(path);
  ASSERT_EQ(chmod(path.c_str(), 0777), 0);
  CompileCache::Config config;
  config.directory = path;
  config.identity = "A";
  std::string error;
  EXPECT_FALSE(CompileCache::open(config, error));
  EXPECT_NE(error.find("not private to this user"), std::string::npos) << error;
  writeFileBytes(dir.file("file"), "x");
  config.directory = dir.file("file");
  EXPECT_FALSE(CompileCache::open(config, error));
  EXPECT_NE(error.find("is not a directory"), std::string::npos) << error;
  config.directory = "";
  EXPECT_FALSE(CompileCache::open(config, error));
  // A fresh one is created private.
  config.directory = dir.file("a/b/cache");
  ASSERT_TRUE(CompileCache::open(config, error)) << error;
  struct stat st;
  ASSERT_EQ(stat(config.directory.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
}

TEST(CompileCache, IdentityNamesThisBuildAndMachine) {
  std::string id = toolchainIdentity();
  EXPECT_EQ(id.rfind("kvir ", 0), 0u) << id;
  for (const char *part : {"; builds ", "; llvm ", "; cpu "})
    EXPECT_NE(id.find(part), std::string::npos) << id;
  EXPECT_EQ(id, toolchainIdentity());
}

//===----------------------------------------------------------------------===//
// Through the compiler
//===----------------------------------------------------------------------===//

std::string readSource(const std::string &relative) {
  return readFileBytes(std::string(KVIR_SOURCE_DIR) + "/" + relative);
}

/// Compiles and runs examples/agent-edit.mlir's @main on the generated CPU
/// forward with fixed inputs.
struct AgentRun {
  mlir::MLIRContext context{registry()};
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler{&context, [this](mlir::Diagnostic &d) {
                                          diagnostics += d.str() + "\n";
                                          return mlir::success();
                                        }};
  static mlir::DialectRegistry registry() {
    mlir::DialectRegistry r;
    registerDialects(r);
    return r;
  }

  /// The answer's logits and the sites; empty after a failure.
  std::vector<float> run(std::vector<std::string> *sites = nullptr) {
    kvrt_model_config config;
    kvrt_model_config_init(&config);
    ModelPtr model = syntheticModel(config, 1);
    PoolPtr pool = poolFor(model.get(), 4096, 16);
    mlir::OwningOpRef<mlir::ModuleOp> planned =
        parseProgram(context, readSource("examples/agent-edit.mlir"));
    EXPECT_TRUE(planned) << diagnostics;
    if (!planned)
      return {};
    LowerOptions options;
    options.exportModel = config;
    auto program = compileProgram(std::move(planned), "main", options);
    EXPECT_TRUE(mlir::succeeded(program)) << diagnostics;
    if (mlir::failed(program))
      return {};
    if (sites)
      *sites = program->manifest.sites;
    kvir::exec::InputOptions inputs;
    inputs.synthesize = true;
    inputs.seed = 1;
    std::vector<kvir::exec::Value> args;
    std::string error;
    EXPECT_TRUE(kvir::exec::bindArguments(program->manifest, config, inputs,
                                          args, nullptr, error))
        << error;
    std::unique_ptr<kvir::ComputeBackend> cpu = kvir::cpu::createCpuBackend();
    kvir::exec::RunOutcome outcome = kvir::exec::runEntry(
        program->entry, program->manifest, *cpu, model.get(), pool.get(), args);
    EXPECT_FALSE(outcome.failed) << outcome.message;
    if (outcome.failed || outcome.results.empty() || !outcome.results[0].logits)
      return {};
    return outcome.results[0].logits->data;
  }
};

/// Installs a cache in a fresh directory for one test.
struct InstalledCache {
  TempDir dir;
  std::shared_ptr<CompileCache> cache;
  InstalledCache() {
    CompileCache::Config config;
    config.directory = dir.file("cache");
    config.identity = toolchainIdentity();
    std::string error;
    cache = CompileCache::open(config, error);
    EXPECT_TRUE(cache) << error;
    setCompileCache(cache);
  }
  ~InstalledCache() { setCompileCache(nullptr); }
  std::vector<std::string> entries() const {
    return filesEndingIn(cache->directory(), ".kvjit");
  }
};

TEST(CompileCache, ProgramCompiledOnceThenLoaded) {
  InstalledCache installed;
  std::vector<std::string> compiledSites, loadedSites;
  std::vector<float> compiled = AgentRun().run(&compiledSites);
  ASSERT_FALSE(compiled.empty());
  CacheStats s = installed.cache->stats();
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.stored, 1);
  ASSERT_EQ(installed.entries().size(), 1u);
  // A second compile (a fresh context, as a second process has) loads it.
  std::vector<float> loaded = AgentRun().run(&loadedSites);
  s = installed.cache->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.stored, 1);
  ASSERT_EQ(loaded.size(), compiled.size());
  EXPECT_EQ(std::memcmp(loaded.data(), compiled.data(),
                        loaded.size() * sizeof(float)),
            0);
  EXPECT_EQ(loadedSites, compiledSites);
  EXPECT_FALSE(loadedSites.empty());
  // Without the cache the same bits again.
  setCompileCache(nullptr);
  std::vector<float> uncached = AgentRun().run();
  ASSERT_EQ(uncached.size(), compiled.size());
  EXPECT_EQ(std::memcmp(uncached.data(), compiled.data(),
                        uncached.size() * sizeof(float)),
            0);
}

TEST(CompileCache, UnusableProgramEntriesAreCompiledAfresh) {
  InstalledCache installed;
  std::vector<float> compiled = AgentRun().run();
  ASSERT_FALSE(compiled.empty());
  ASSERT_EQ(installed.entries().size(), 1u);
  std::string path = installed.entries()[0];
  std::string good = readFileBytes(path);

  // A corrupt file: rejected by its digest, compiled, stored again.
  std::string corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x40;
  writeFileBytes(path, corrupt);
  std::vector<float> again = AgentRun().run();
  EXPECT_EQ(again, compiled);
  CacheStats s = installed.cache->stats();
  EXPECT_EQ(s.rejected, 1);
  EXPECT_EQ(s.stored, 2);
  EXPECT_EQ(readFileBytes(path), good);

  // An entry that passes every check of the file but whose object does not
  // link (written through the cache under the same key: the key follows
  // the magic and the format in the header): compiled afresh too.
  CacheKey key;
  std::memcpy(key.bytes.data(), good.data() + 12, 32);
  std::string error;
  ASSERT_TRUE(installed.cache->store(key, {"not an object", "[]"}, error));
  again = AgentRun().run();
  EXPECT_EQ(again, compiled);
  s = installed.cache->stats();
  EXPECT_EQ(s.rejected, 2);
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(readFileBytes(path), good);

  // Sites that do not parse: the same.
  CacheEntry entry;
  ASSERT_TRUE(installed.cache->load(key, entry));
  ASSERT_TRUE(installed.cache->store(key, {entry.object, "[loc("}, error));
  again = AgentRun().run();
  EXPECT_EQ(again, compiled);
  EXPECT_EQ(installed.cache->stats().rejected, 3);
}

TEST(CompileCache, ForwardCompiledOnceThenLoaded) {
  InstalledCache installed;
  // A config no other test compiles in this process (compileForward keeps
  // its forwards for the life of the process).
  kvrt_model_config config = makeConfig(48, 96, 1, 4, 2, 64, 64);
  kvir::Forward forward;
  ASSERT_EQ(compileForward(config, Target::Cpu, &forward), KVRT_OK)
      << kvrt_last_error();
  EXPECT_EQ(installed.cache->stats().stored, 1);
  ASSERT_EQ(installed.entries().size(), 1u);
  // A second process would load it; here, the cached object links.
  CacheEntry entry;
  std::string path = installed.entries()[0];
  std::string bytes = readFileBytes(path);
  CacheKey key;
  std::memcpy(key.bytes.data(), bytes.data() + 12, 32);
  ASSERT_TRUE(installed.cache->load(key, entry));
  std::string error;
  std::unique_ptr<JitProgram> jit = JitProgram::load(entry.object, error);
  ASSERT_TRUE(jit) << error;
  kvir::Forward loaded = jit->forward(config, KVRT_KV_F32);
  EXPECT_TRUE(loaded.prefill && loaded.attention && loaded.materialize);
}

} // namespace
