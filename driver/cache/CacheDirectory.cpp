//===- CacheDirectory.cpp - The compile cache's directory -----------------===//

#include "driver/cache/CacheDirectory.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kvir;
using namespace kvir::cache;

namespace {

/// The suffixes of the two kinds of entry, and of a file being written.
constexpr std::string_view kEntrySuffixes[] = {".kvjit", ".kvfwd"};
constexpr std::string_view kTempSuffix = ".tmp";
/// A temporary file older than this was left by a writer that died.
constexpr int64_t kStaleTempSeconds = 3600;

bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.substr(text.size() - suffix.size()) == suffix;
}

/// Writes all of `data` to `fd`.
bool writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

/// A name no other writer uses at the same time: the process, a counter and
/// random bits.
std::string uniqueSuffix() {
  static std::atomic<uint64_t> counter{0};
  static thread_local std::mt19937_64 random(std::random_device{}());
  char bits[20];
  std::snprintf(bits, sizeof(bits), "%llx",
                static_cast<unsigned long long>(random()));
  return "." + std::to_string(::getpid()) + "." + std::to_string(counter++) +
         "." + bits;
}

std::string hex(const unsigned char *bytes, size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out.push_back(digits[bytes[i] >> 4]);
    out.push_back(digits[bytes[i] & 15]);
  }
  return out;
}

/// The build id among the notes in [at, end), or "".
std::string buildIdInNotes(const char *at, const char *end) {
  while (at + sizeof(ElfW(Nhdr)) <= end) {
    auto *note = reinterpret_cast<const ElfW(Nhdr) *>(at);
    const char *name = at + sizeof(ElfW(Nhdr));
    const char *desc = name + ((note->n_namesz + 3) & ~3u);
    if (desc < name || desc + note->n_descsz > end)
      break;
    if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
        std::memcmp(name, "GNU", 4) == 0)
      return hex(reinterpret_cast<const unsigned char *>(desc), note->n_descsz);
    at = desc + ((note->n_descsz + 3) & ~3u);
  }
  return "";
}

} // namespace

std::string kvir::cache::errnoText(const std::string &what) {
  return what + ": " + std::strerror(errno);
}

std::string kvir::cache::defaultCacheDirectory() {
  auto env = [](const char *name) {
    const char *value = std::getenv(name);
    return std::string(value ? value : "");
  };
  if (std::string dir = env("KVIR_CACHE_DIR"); !dir.empty())
    return dir;
  if (std::string dir = env("XDG_CACHE_HOME"); !dir.empty())
    return dir + "/kvir";
  if (std::string dir = env("HOME"); !dir.empty())
    return dir + "/.cache/kvir";
  return "";
}

bool kvir::cache::openCacheDirectory(const std::string &directory,
                                     std::string &error) {
  if (directory.empty()) {
    error = "no cache directory (set KVIR_CACHE_DIR, XDG_CACHE_HOME or HOME)";
    return false;
  }
  // Each missing component, from the top, private to this user.
  for (size_t slash = directory.find('/', 1);;
       slash = directory.find('/', slash + 1)) {
    std::string part = directory.substr(0, slash);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      error =
          errnoText("cannot create the cache directory '" + directory + "'");
      return false;
    }
    if (slash == std::string::npos)
      break;
  }
  struct stat st;
  if (::stat(directory.c_str(), &st) != 0) {
    error = errnoText("cannot read the cache directory '" + directory + "'");
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    error = "the cache directory '" + directory + "' is not a directory";
    return false;
  }
  // Entries are code this process runs: only its user may write them.
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    error = "the cache directory '" + directory +
            "' is not private to this user (owned by another or writable by "
            "others): not loading code from it";
    return false;
  }
  return true;
}

bool kvir::cache::writeWhole(const std::string &directory,
                             const std::string &path,
                             const std::vector<std::string_view> &parts,
                             std::string &error) {
  std::string temp = path + uniqueSuffix() + std::string(kTempSuffix);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = errnoText("cannot create '" + temp + "'");
    return false;
  }
  bool written = true;
  for (std::string_view part : parts)
    written = written && writeAll(fd, part);
  written = written && ::fsync(fd) == 0;
  std::string problem = written ? "" : errnoText("cannot write '" + temp + "'");
  if (::close(fd) != 0 && written) {
    written = false;
    problem = errnoText("cannot write '" + temp + "'");
  }
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    if (written)
      problem = errnoText("cannot rename '" + temp + "'");
    ::unlink(temp.c_str());
    error = problem;
    return false;
  }
  // The rename itself survives a crash once the directory is flushed.
  int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return true;
}

int kvir::cache::readWhole(const std::string &path, std::string &out) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      return saved;
    }
    if (n == 0)
      break;
    out.append(buffer, size_t(n));
  }
  ::close(fd);
  return 0;
}

void kvir::cache::touch(const std::string &path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
}

int64_t kvir::cache::evict(const std::string &directory, uint64_t maxBytes) {
  struct File {
    std::string path;
    uint64_t size;
    struct timespec used;
  };
  std::vector<File> entries;
  uint64_t total = 0;
  DIR *dir = ::opendir(directory.c_str());
  if (!dir)
    return 0;
  auto now = std::chrono::system_clock::now();
  while (dirent *e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    bool isEntry = std::any_of(
        std::begin(kEntrySuffixes), std::end(kEntrySuffixes),
        [&](std::string_view suffix) { return endsWith(name, suffix); });
    if (!isEntry && !endsWith(name, kTempSuffix))
      continue;
    std::string path = directory + "/" + std::string(name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (!isEntry) {
      // Another process may be writing it: only a long-abandoned one goes.
      auto age = now - std::chrono::system_clock::from_time_t(st.st_mtime);
      if (age > std::chrono::seconds(kStaleTempSeconds))
        ::unlink(path.c_str());
      continue;
    }
    entries.push_back({path, uint64_t(st.st_size), st.st_mtim});
    total += uint64_t(st.st_size);
  }
  ::closedir(dir);
  int64_t evicted = 0;
  if (total <= maxBytes)
    return evicted;
  std::sort(entries.begin(), entries.end(), [](const File &a, const File &b) {
    if (a.used.tv_sec != b.used.tv_sec)
      return a.used.tv_sec < b.used.tv_sec;
    return a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const File &file : entries) {
    if (total <= maxBytes)
      break;
    // Another process may have removed it first; it is gone either way.
    if (::unlink(file.path.c_str()) == 0)
      ++evicted;
    total -= file.size;
  }
  return evicted;
}

std::string kvir::cache::buildIdAt(const void *address, std::string *path) {
  struct Search {
    uintptr_t address;
    std::string id;
    std::string path;
  } search{reinterpret_cast<uintptr_t>(address), {}, {}};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) -> int {
        auto *s = static_cast<Search *>(data);
        bool holds = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->address >= start &&
              s->address < start + ph.p_memsz)
            holds = true;
        }
        if (!holds)
          return 0;
        s->path = info->dlpi_name;
        for (int i = 0; i < info->dlpi_phnum && s->id.empty(); ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE)
            continue;
          const char *at =
              reinterpret_cast<const char *>(info->dlpi_addr + ph.p_vaddr);
          s->id = buildIdInNotes(at, at + ph.p_memsz);
        }
        return 1;
      },
      &search);
  if (path)
    *path = search.path;
  return search.id;
}

std::string kvir::cache::fileBuildId(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "";
  std::string id;
  ElfW(Ehdr) header;
  auto readAt = [&](void *out, size_t size, off_t offset) {
    return ::pread(fd, out, size, offset) == ssize_t(size);
  };
  if (readAt(&header, sizeof(header), 0) &&
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 &&
      header.e_ident[EI_CLASS] == ELFCLASS64 &&
      header.e_phentsize == sizeof(ElfW(Phdr)) && header.e_phnum < 256) {
    for (int i = 0; i < header.e_phnum && id.empty(); ++i) {
      ElfW(Phdr) ph;
      if (!readAt(&ph, sizeof(ph), off_t(header.e_phoff + i * sizeof(ph))))
        break;
      if (ph.p_type != PT_NOTE || ph.p_filesz > (1 << 16))
        continue;
      std::string notes(ph.p_filesz, '\0');
      if (readAt(notes.data(), notes.size(), off_t(ph.p_offset)))
        id = buildIdInNotes(notes.data(), notes.data() + notes.size());
    }
  }
  ::close(fd);
  return id;
}

CacheStats CacheCounters::snapshot() const {
  CacheStats s;
  s.hits = hits;
  s.misses = misses;
  s.rejected = rejected;
  s.stored = stored;
  s.storeFailures = storeFailures;
  s.evicted = evicted;
  return s;
}

std::string kvir::cache::describeCacheStats(const CacheStats &s,
                                            const std::string &directory) {
  auto count = [](int64_t n, const char *one, const char *many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string text = "compile cache: " + count(s.hits, "hit", "hits") + ", " +
                     count(s.misses, "miss", "misses") + ", " +
                     std::to_string(s.rejected) + " rejected, " +
                     std::to_string(s.stored) + " stored, " +
                     std::to_string(s.evicted) + " evicted";
  if (s.storeFailures)
    text += ", " + count(s.storeFailures, "store failed", "stores failed");
  return text + " (" + directory + ")";
}
