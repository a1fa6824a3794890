//===- StubImage.cpp - What the stub driver reads from a module image -----===//
//
// PTX: the text up to its NUL; `.version`, `.target` and `.address_size`
// checked as the driver's JIT checks them, every `.entry` with its
// parameters and the `.shared` buffers it declares, unresolved `.extern
// .func` declarations (what the JIT refuses when libdevice was not linked),
// and vector accesses to shared memory wider than the buffers' alignment.
// Cubin: the ELF header (EM_CUDA, the sm the code is for), the entry
// symbols, their `.nv.shared.<kernel>` sections, and from `.nv.info` and
// `.nv.info.<kernel>` the registers and the parameters (EIATTR_REGCOUNT and
// EIATTR_KPARAM_INFO records, as ptxas of CUDA 13 writes them).
//
//===----------------------------------------------------------------------===//

#include "test/stub-cuda/StubImage.h"
#include "test/stub-cuda/CudaResult.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <regex>
#include <set>

using namespace kvir::stubcuda;

namespace {

ImageInfo refused(int error, std::string log) {
  ImageInfo info;
  info.error = error;
  info.log = std::move(log);
  return info;
}

//===----------------------------------------------------------------------===//
// PTX
//===----------------------------------------------------------------------===//

/// Bytes of a PTX scalar type (.u64, .b32, .f16, .pred ...), 0 if unknown.
uint32_t ptxTypeBytes(const std::string &type) {
  if (type.size() < 3)
    return 0;
  int bits = std::atoi(type.c_str() + 2);
  return bits > 0 && bits % 8 == 0 ? uint32_t(bits / 8) : 0;
}

/// The text between the `{` at `open` and its matching `}`.
std::string bodyAt(const std::string &text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{')
      ++depth;
    else if (text[i] == '}' && --depth == 0)
      return text.substr(open, i + 1 - open);
  }
  return text.substr(open);
}

/// A `.shared` buffer: its alignment and size.
struct SharedBuffer {
  uint64_t align = 1, bytes = 0;
};

/// The `.shared` declarations of `text` (not `.extern`: dynamic shared memory
/// has no static size), by name.
std::map<std::string, SharedBuffer> sharedBuffers(const std::string &text) {
  static const std::regex decl(
      R"((\.extern\s+)?\.shared\s+(?:\.align\s+(\d+)\s+)?(\.[a-z]+\d*)\s+([A-Za-z_$%][\w$]*)\s*(?:\[(\d*)\])?\s*;)");
  std::map<std::string, SharedBuffer> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), decl);
       it != std::sregex_iterator(); ++it) {
    const std::smatch &m = *it;
    if (m[1].matched)
      continue;
    SharedBuffer buffer;
    uint32_t element = ptxTypeBytes(m[3]);
    buffer.align = m[2].matched ? std::stoull(m[2]) : std::max(element, 1u);
    uint64_t count = m[5].matched && m[5].length() ? std::stoull(m[5]) : 1;
    buffer.bytes = count * element;
    out[m[4]] = buffer;
  }
  return out;
}

/// Whether `name` occurs in `text` as a whole identifier.
bool mentions(const std::string &text, const std::string &name) {
  for (size_t at = text.find(name); at != std::string::npos;
       at = text.find(name, at + 1)) {
    auto identifier = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
             c == '$';
    };
    bool before = at > 0 && identifier(text[at - 1]);
    bool after =
        at + name.size() < text.size() && identifier(text[at + name.size()]);
    if (!before && !after)
      return true;
  }
  return false;
}

/// The widest vector access to shared memory in `body`, in bytes, and its
/// instruction (ld.shared.v2.b32 ...).
std::pair<uint64_t, std::string> widestSharedVector(const std::string &body) {
  static const std::regex access(
      R"(\b(?:ld|st)(?:\.volatile|\.relaxed\.\w+)?\.shared(?:::cta)?\.v(\d)\.[bfus](\d+)\b)");
  std::pair<uint64_t, std::string> widest{0, ""};
  for (auto it = std::sregex_iterator(body.begin(), body.end(), access);
       it != std::sregex_iterator(); ++it) {
    uint64_t bytes = std::stoull((*it)[1]) * std::stoull((*it)[2]) / 8;
    if (bytes > widest.first)
      widest = {bytes, it->str()};
  }
  return widest;
}

ImageInfo readPtx(const char *data) {
  std::string text(data);
  for (unsigned char c : text)
    if (!std::isprint(c) && !std::isspace(c))
      return refused(CUDA_ERROR_INVALID_IMAGE,
                     "the image is neither a cubin (an ELF) nor PTX text: it "
                     "has a byte that is not text before its NUL");
  std::smatch m;
  static const std::regex version(R"(^\s*\.version\s+(\d+)\.(\d+))",
                                  std::regex::multiline);
  static const std::regex target(R"(^\s*\.target\s+sm_(\d+)([af]?))",
                                 std::regex::multiline);
  static const std::regex addressSize(R"(^\s*\.address_size\s+(\d+))",
                                      std::regex::multiline);
  if (!std::regex_search(text, m, version))
    return refused(CUDA_ERROR_INVALID_IMAGE,
                   "the image is neither a cubin (an ELF) nor PTX (no "
                   ".version directive)");
  int isa = std::stoi(m[1]) * 10 + std::stoi(m[2]);
  if (isa > kMaxPtxIsa)
    return refused(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                   "ptxas fatal   : PTX ISA " + m[1].str() + "." + m[2].str() +
                       " is newer than this driver's (9.0)");
  if (!std::regex_search(text, m, target))
    return refused(CUDA_ERROR_INVALID_PTX,
                   "ptxas fatal   : no .target directive");
  int sm = std::stoi(m[1]);
  std::string suffix = m[2];
  if (sm > kDeviceSm || (!suffix.empty() && sm != kDeviceSm))
    return refused(CUDA_ERROR_INVALID_PTX,
                   "ptxas fatal   : PTX for sm_" + m[1].str() + suffix +
                       " cannot be compiled for this device (sm_90)");
  if (!std::regex_search(text, m, addressSize) || m[1] != "64")
    return refused(CUDA_ERROR_INVALID_PTX,
                   "ptxas fatal   : the PTX is not for 64-bit addresses "
                   "(.address_size 64)");

  // Functions called but defined nowhere: the JIT links nothing else.
  static const std::regex func(
      R"((\.extern\s+)?\.func\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)\s*\()");
  std::set<std::string> declared, defined;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), func);
       it != std::sregex_iterator(); ++it)
    ((*it)[1].matched ? declared : defined).insert((*it)[2]);
  for (const std::string &name : declared)
    if (!defined.count(name))
      return refused(CUDA_ERROR_INVALID_PTX,
                     "ptxas fatal   : Unresolved extern function '" + name +
                         "'");

  ImageInfo info;
  info.kind = "PTX (.target sm_" + std::to_string(sm) + suffix + ", ISA " +
              std::to_string(isa / 10) + "." + std::to_string(isa % 10) + ")";
  std::map<std::string, SharedBuffer> moduleShared;
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$][\w$]*)\s*\()");
  static const std::regex param(
      R"(\.param\s+(?:\.align\s+(\d+)\s+)?(\.[a-z]+\d*)((?:\s+\.ptr)?)[^,)\[]*?\s([A-Za-z_$][\w$]*)\s*(?:\[(\d+)\])?)");
  // Module-scope buffers: those before the first function.
  size_t firstEntry = text.find(".entry");
  size_t firstFunc = text.find(".func");
  moduleShared = sharedBuffers(text.substr(0, std::min(firstEntry, firstFunc)));
  for (auto it = std::sregex_iterator(text.begin(), text.end(), entry);
       it != std::sregex_iterator(); ++it) {
    KernelInfo kernel;
    kernel.name = (*it)[1];
    size_t open = size_t(it->position()) + it->length();
    size_t close = text.find(')', open);
    size_t brace = text.find('{', close);
    if (close == std::string::npos || brace == std::string::npos)
      return refused(CUDA_ERROR_INVALID_PTX,
                     "ptxas fatal   : .entry " + kernel.name + " has no body");
    std::string params = text.substr(open, close - open);
    for (auto p = std::sregex_iterator(params.begin(), params.end(), param);
         p != std::sregex_iterator(); ++p) {
      KernelParam kp;
      uint32_t element = ptxTypeBytes((*p)[2]);
      uint64_t count = (*p)[5].matched ? std::stoull((*p)[5]) : 1;
      kp.bytes = uint32_t(element * count);
      kp.pointer = (*p)[3].length() > 0;
      kernel.params.push_back(kp);
    }
    std::string body = bodyAt(text, brace);
    std::map<std::string, SharedBuffer> used = sharedBuffers(body);
    for (const auto &[name, buffer] : moduleShared)
      if (mentions(body, name))
        used[name] = buffer;
    std::string tooSmall;
    uint64_t smallest = UINT64_MAX;
    for (const auto &[name, buffer] : used) {
      kernel.staticShared = (kernel.staticShared + buffer.align - 1) /
                                buffer.align * buffer.align +
                            buffer.bytes;
      if (buffer.align < smallest) {
        smallest = buffer.align;
        tooSmall = name;
      }
    }
    auto [width, instruction] = widestSharedVector(body);
    if (width > 0 && smallest < width)
      kernel.fault = "its " + instruction + " accesses " +
                     std::to_string(width) +
                     " bytes at a time in shared memory, but " + tooSmall +
                     " is declared .align " + std::to_string(smallest) +
                     ": a misaligned address wherever ptxas places it "
                     "off a " +
                     std::to_string(width) + "-byte boundary";
    info.kernels.push_back(std::move(kernel));
  }
  info.log = "kvir-stub-cuda: PTX of " + std::to_string(info.kernels.size()) +
             " kernels read, not compiled (the stub runs no kernel)";
  return info;
}

//===----------------------------------------------------------------------===//
// Cubin
//===----------------------------------------------------------------------===//

// The ELF64 structures, as <elf.h> declares them (kept here so that the stub
// reads the same layout on any host).
struct Elf64Header {
  unsigned char ident[16];
  uint16_t type, machine;
  uint32_t version;
  uint64_t entry, phoff, shoff;
  uint32_t flags;
  uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};
struct Elf64Section {
  uint32_t name, type;
  uint64_t flags, addr, offset, size;
  uint32_t link, info;
  uint64_t addralign, entsize;
};
struct Elf64Symbol {
  uint32_t name;
  unsigned char info, other;
  uint16_t shndx;
  uint64_t value, size;
};

constexpr uint16_t kEmCuda = 190;
/// st_other of a kernel's symbol (STO_CUDA_ENTRY).
constexpr unsigned char kCudaEntry = 0x10;
/// .nv.info attribute formats and the attributes read here.
constexpr uint8_t kFormatValue = 0x04;
constexpr uint8_t kAttrKParamInfo = 0x17;
constexpr uint8_t kAttrRegCount = 0x2f;
/// Shared memory an sm_80 or later reserves per block, counted in each
/// kernel's .nv.shared section of a cubin that has .nv.shared.reserved.0.
constexpr uint64_t kReservedShared = 1024;

/// Calls `fn(attribute, payload, bytes)` for each record of an .nv.info
/// section.
template <typename Fn>
void forEachInfo(const unsigned char *base, const Elf64Section &section,
                 Fn fn) {
  const unsigned char *p = base + section.offset, *end = p + section.size;
  while (p + 4 <= end) {
    uint8_t format = p[0], attribute = p[1];
    uint16_t bytes = 2;
    const unsigned char *payload = p + 2;
    if (format == kFormatValue) {
      std::memcpy(&bytes, p + 2, 2);
      payload = p + 4;
      p += 4 + bytes;
    } else {
      p += 4;
    }
    if (p > end)
      return;
    fn(attribute, payload, bytes);
  }
}

ImageInfo readCubin(const unsigned char *data) {
  Elf64Header header;
  std::memcpy(&header, data, sizeof(header));
  if (header.ident[4] != 2 || header.ident[5] != 1)
    return refused(CUDA_ERROR_INVALID_IMAGE,
                   "an ELF that is not 64-bit little-endian is no cubin");
  if (header.machine != kEmCuda)
    return refused(CUDA_ERROR_INVALID_IMAGE,
                   "an ELF for machine " + std::to_string(header.machine) +
                       ", not a cubin (EM_CUDA, 190)");
  // ABI version 8 and later (CUDA 12.8+) keep the sm in bits 8..15.
  int sm = header.ident[8] >= 8 ? int((header.flags >> 8) & 0xff)
                                : int(header.flags & 0xff);
  if (sm / 10 != kDeviceSm / 10 || sm > kDeviceSm)
    return refused(CUDA_ERROR_NO_BINARY_FOR_GPU,
                   "a cubin for sm_" + std::to_string(sm) +
                       " does not run on this device (sm_90)");
  if (header.shentsize != sizeof(Elf64Section) || header.shnum == 0 ||
      header.shstrndx >= header.shnum || header.shoff > (1ull << 32))
    return refused(CUDA_ERROR_INVALID_IMAGE,
                   "the cubin's section headers are malformed");
  std::vector<Elf64Section> sections(header.shnum);
  std::memcpy(sections.data(), data + header.shoff,
              sizeof(Elf64Section) * header.shnum);
  const char *names =
      reinterpret_cast<const char *>(data + sections[header.shstrndx].offset);
  auto sectionName = [&](const Elf64Section &s) {
    return std::string(names + s.name);
  };
  const Elf64Section *symtab = nullptr;
  bool reserved = false;
  std::map<std::string, uint64_t> shared;
  std::map<std::string, const Elf64Section *> infos;
  const Elf64Section *globalInfo = nullptr;
  for (const Elf64Section &s : sections) {
    std::string name = sectionName(s);
    if (name == ".symtab")
      symtab = &s;
    else if (name == ".nv.shared.reserved.0")
      reserved = true;
    else if (name.rfind(".nv.shared.", 0) == 0)
      shared[name.substr(11)] = s.size;
    else if (name == ".nv.info")
      globalInfo = &s;
    else if (name.rfind(".nv.info.", 0) == 0)
      infos[name.substr(9)] = &s;
  }
  if (!symtab || symtab->link >= sections.size())
    return refused(CUDA_ERROR_INVALID_IMAGE, "the cubin has no symbol table");
  const char *symbolNames =
      reinterpret_cast<const char *>(data + sections[symtab->link].offset);
  std::vector<Elf64Symbol> symbols(symtab->size / sizeof(Elf64Symbol));
  std::memcpy(symbols.data(), data + symtab->offset,
              symbols.size() * sizeof(Elf64Symbol));

  std::map<uint32_t, uint32_t> registers;
  if (globalInfo)
    forEachInfo(
        data, *globalInfo,
        [&](uint8_t attribute, const unsigned char *payload, uint16_t bytes) {
          if (attribute != kAttrRegCount || bytes < 8)
            return;
          uint32_t symbol, count;
          std::memcpy(&symbol, payload, 4);
          std::memcpy(&count, payload + 4, 4);
          registers[symbol] = count;
        });

  ImageInfo info;
  info.kind = "cubin sm_" + std::to_string(sm);
  for (size_t i = 0; i < symbols.size(); ++i) {
    const Elf64Symbol &symbol = symbols[i];
    if ((symbol.info & 0xf) != 2 || !(symbol.other & kCudaEntry))
      continue;
    KernelInfo kernel;
    kernel.name = symbolNames + symbol.name;
    kernel.registers = registers.count(uint32_t(i)) ? registers[i] : 0;
    if (shared.count(kernel.name)) {
      uint64_t bytes = shared[kernel.name];
      kernel.staticShared = reserved && bytes >= kReservedShared
                                ? bytes - kReservedShared
                                : bytes;
    }
    if (infos.count(kernel.name))
      forEachInfo(
          data, *infos[kernel.name],
          [&](uint8_t attribute, const unsigned char *payload, uint16_t bytes) {
            if (attribute != kAttrKParamInfo || bytes < 12)
              return;
            uint16_t ordinal;
            uint32_t word;
            std::memcpy(&ordinal, payload + 4, 2);
            std::memcpy(&word, payload + 8, 4);
            if (kernel.params.size() <= ordinal)
              kernel.params.resize(ordinal + 1);
            kernel.params[ordinal].bytes = (word >> 18) & 0x3fff;
            kernel.params[ordinal].pointer = (word & 0x400) != 0;
          });
    info.kernels.push_back(std::move(kernel));
  }
  return info;
}

} // namespace

ImageInfo kvir::stubcuda::readImage(const void *data) {
  if (!data)
    return refused(CUDA_ERROR_INVALID_VALUE, "no image (a null pointer)");
  // Byte by byte: a short PTX text ends at its NUL, which no magic has.
  const auto *bytes = static_cast<const unsigned char *>(data);
  auto startsWith = [&](const unsigned char(&magic)[4]) {
    for (int i = 0; i < 4; ++i)
      if (bytes[i] != magic[i])
        return false;
    return true;
  };
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  static const unsigned char fatbin[4] = {0x50, 0xed, 0x55, 0xba};
  static const unsigned char fatbinWrapper[4] = {0xb1, 0x43, 0x62, 0x46};
  if (startsWith(elf))
    return readCubin(bytes);
  if (startsWith(fatbin) || startsWith(fatbinWrapper))
    return refused(CUDA_ERROR_NOT_SUPPORTED,
                   "a fatbinary: the stub reads PTX and cubins only");
  return readPtx(static_cast<const char *>(data));
}
