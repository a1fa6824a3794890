//===- ContextBlob.cpp - A whole context as one blob ------------*- C++ -*-===//

#include "runtime/store/ContextBlob.h"

#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"
#include "runtime/store/BlobFormat.h"

#include <algorithm>
#include <cctype>
#include <cstring>

using namespace kvir::store;
using kvrt::str;

namespace {

constexpr char kMagic[8] = {'K', 'V', 'I', 'R', 'C', 'T', 'X', 'T'};
constexpr size_t kRunBytes = 32;

/// The header's fields (ContextBlob.h has their order).
struct ContextHeader {
  uint32_t format, headerBytes, layout, dtype;
  uint32_t layers, kvHeads, headSize, elementBytes;
  uint64_t runs, tokens, logits, payloadBytes;
  uint8_t model[32];
  uint8_t nameDigest[8];
  uint64_t payloadChecksum, headerChecksum;
};

void writeHeader(uint8_t *h, const ContextHeader &f) {
  std::memset(h, 0, kContextHeaderBytes);
  std::memcpy(h, kMagic, 8);
  const uint32_t words[] = {f.format,   f.headerBytes, f.layout,
                            f.dtype,    f.layers,      f.kvHeads,
                            f.headSize, f.elementBytes};
  for (size_t i = 0; i < 8; ++i)
    putField(h + 8 + 4 * i, words[i]);
  const uint64_t counts[] = {f.runs, f.tokens, f.logits, f.payloadBytes};
  for (size_t i = 0; i < 4; ++i)
    putField(h + 40 + 8 * i, counts[i]);
  std::memcpy(h + 72, f.model, 32);
  std::memcpy(h + 104, f.nameDigest, 8);
  putField(h + 112, f.payloadChecksum);
  putField(h + 120, xxh64(h, 120));
}

ContextHeader readHeader(const uint8_t *h) {
  ContextHeader f;
  uint32_t *words[] = {&f.format, &f.headerBytes, &f.layout,   &f.dtype,
                       &f.layers, &f.kvHeads,     &f.headSize, &f.elementBytes};
  for (size_t i = 0; i < 8; ++i)
    *words[i] = getField<uint32_t>(h + 8 + 4 * i);
  uint64_t *counts[] = {&f.runs, &f.tokens, &f.logits, &f.payloadBytes};
  for (size_t i = 0; i < 4; ++i)
    *counts[i] = getField<uint64_t>(h + 40 + 8 * i);
  std::memcpy(f.model, h + 72, 32);
  std::memcpy(f.nameDigest, h + 104, 8);
  f.payloadChecksum = getField<uint64_t>(h + 112);
  f.headerChecksum = getField<uint64_t>(h + 120);
  return f;
}

Digest nameDigest(const std::string &name) {
  return sha256(name.data(), name.size());
}

/// One entry of the run table.
struct RunRecord {
  int64_t tokens, basePos, delta;
  uint32_t labelBytes, hasLabel;
};

/// Where the parts of a checked blob's payload start.
struct Sections {
  std::vector<RunRecord> runs;
  /// Byte pointers: the labels' lengths leave the later sections
  /// unaligned.
  const char *labels = nullptr;
  const uint8_t *tokens = nullptr, *logits = nullptr;
  const unsigned char *kv = nullptr;
};

/// Reads the run table and locates the sections of a blob whose header
/// says `f` and whose size matches it. "" or what is wrong.
std::string parseSections(std::string_view blob, const ContextHeader &f,
                          uint64_t kvBytes, Sections &out) {
  const uint8_t *p =
      reinterpret_cast<const uint8_t *>(blob.data()) + kContextHeaderBytes;
  uint64_t fixed =
      f.runs * kRunBytes + f.tokens * 4 + f.logits * 4 + uint64_t(kvBytes);
  if (f.runs > f.tokens || fixed > f.payloadBytes)
    return str("its ", f.runs, " runs, ", f.tokens, " tokens and ", f.logits,
               " logits need more than its ", f.payloadBytes, " payload bytes");
  uint64_t labelBytes = 0, tokens = 0;
  for (uint64_t r = 0; r < f.runs; ++r) {
    const uint8_t *e = p + r * kRunBytes;
    RunRecord run{getField<int64_t>(e), getField<int64_t>(e + 8),
                  getField<int64_t>(e + 16), getField<uint32_t>(e + 24),
                  getField<uint32_t>(e + 28)};
    if (run.tokens <= 0 || uint64_t(run.tokens) > f.tokens - tokens)
      return str("run ", r, " holds ", run.tokens, " tokens, of ", f.tokens,
                 " in all");
    if (run.basePos < 0 || run.basePos > KVRT_MAX_POSITION - run.tokens ||
        run.delta < -run.basePos ||
        run.delta > KVRT_MAX_POSITION - run.tokens - run.basePos)
      return str("run ", r, " at stored position ", run.basePos,
                 " with offset ", run.delta, " is outside [0, 2^53)");
    if (run.hasLabel > 1 || (!run.hasLabel && run.labelBytes))
      return str("run ", r, " has a malformed label entry");
    tokens += uint64_t(run.tokens);
    labelBytes += run.labelBytes;
    out.runs.push_back(run);
  }
  if (tokens != f.tokens)
    return str("its runs hold ", tokens, " tokens, its header says ", f.tokens);
  if (fixed + labelBytes != f.payloadBytes)
    return str("its sections take ", fixed + labelBytes,
               " bytes, its header says ", f.payloadBytes);
  out.labels = reinterpret_cast<const char *>(p + f.runs * kRunBytes);
  if (std::memchr(out.labels, '\0', labelBytes))
    return "a label holds a NUL byte";
  const uint8_t *at = p + f.runs * kRunBytes + labelBytes;
  out.tokens = at;
  out.logits = at + f.tokens * 4;
  out.kv = at + f.tokens * 4 + f.logits * 4;
  return "";
}

} // namespace

ContextId kvir::store::makeContextId(const kvrt_model *model,
                                     const Digest &fingerprint,
                                     kvrt_kv_dtype dtype, std::string name,
                                     std::vector<int32_t> tokens) {
  const kvrt_model_config &c = model->config;
  ContextId id;
  id.model = fingerprint;
  id.dtype = dtype;
  id.layers = c.n_layers;
  id.kvHeads = c.n_kv_heads;
  id.headSize = kvir::headSize(c);
  id.vocab = c.vocab_size;
  id.name = std::move(name);
  id.tokens = std::move(tokens);
  return id;
}

std::string kvir::store::checkContextName(const std::string &name) {
  if (name.empty() || name.size() >= KVRT_CONTEXT_NAME_MAX)
    return str("a context name has 1 to ", KVRT_CONTEXT_NAME_MAX - 1,
               " bytes, got ", name.size());
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' &&
        c != '.' && c != ':')
      return "a context name holds letters, digits and _-.: only";
  return "";
}

std::string kvir::store::contextKeyString(const std::string &prefix,
                                          const std::string &name) {
  return prefix + "ctx:v1:" + name;
}

bool kvir::store::encodeContextBlob(const kvrt_view *view, const ContextId &id,
                                    const float *logits, int64_t nLogits,
                                    std::string &out, std::string &error) {
  kvrt_page_layout layout;
  kvrt_pool *pool = nullptr;
  if (!viewPoolOfShape(view, "context", id.layers, id.kvHeads, id.headSize,
                       id.dtype, pool, layout, error))
    return false;
  if (nLogits != 0 && nLogits != id.vocab) {
    error = str("a context keeps no logits or a row of ", id.vocab, ", got ",
                nLogits);
    return false;
  }
  int64_t n = int64_t(id.tokens.size());
  if (kvrt_view_num_tokens(view) != n) {
    error = str("the view holds ", kvrt_view_num_tokens(view),
                " tokens, the context ", n);
    return false;
  }
  int64_t runs = kvrt_view_num_runs(view);
  std::vector<kvrt_run> table(runs);
  std::string labels;
  int64_t done = 0;
  for (int64_t r = 0; r < runs; ++r) {
    if (kvrt_view_get_run(view, r, &table[r]) != KVRT_OK) {
      error = kvrt_last_error();
      return false;
    }
    const kvrt_run &run = table[r];
    if (!std::equal(run.tokens, run.tokens + run.n_tokens,
                    id.tokens.begin() + done)) {
      error = str("run ", r, " holds other tokens than the context's");
      return false;
    }
    if (run.label)
      labels += run.label;
    done += run.n_tokens;
  }
  uint64_t kvBytes = kvSectionBytes(layout, uint64_t(n));
  uint64_t payload = uint64_t(runs) * kRunBytes + labels.size() + n * 4 +
                     uint64_t(nLogits) * 4 + kvBytes;
  out.assign(kContextHeaderBytes + payload, '\0');
  uint8_t *blob = reinterpret_cast<uint8_t *>(out.data());
  uint8_t *p = blob + kContextHeaderBytes;
  for (int64_t r = 0; r < runs; ++r) {
    const kvrt_run &run = table[r];
    uint8_t *e = p + r * kRunBytes;
    putField(e, run.n_tokens);
    putField(e + 8, run.base_pos);
    putField(e + 16, run.delta);
    putField(e + 24, uint32_t(run.label ? std::strlen(run.label) : 0));
    putField(e + 28, uint32_t(run.label != nullptr));
  }
  uint8_t *at = p + runs * kRunBytes;
  std::memcpy(at, labels.data(), labels.size());
  at += labels.size();
  std::memcpy(at, id.tokens.data(), n * 4);
  at += n * 4;
  if (nLogits)
    std::memcpy(at, logits, nLogits * 4);
  unsigned char *kv = at + nLogits * 4;
  done = 0;
  for (const kvrt_run &run : table) {
    if (!copyRunToSection(pool, layout, run, done, n, kv, error))
      return false;
    done += run.n_tokens;
  }
  ContextHeader f{};
  f.format = KVRT_CONTEXT_FORMAT_VERSION;
  f.headerBytes = kContextHeaderBytes;
  f.layout = KVRT_BLOCK_LAYOUT_VERSION;
  f.dtype = uint32_t(id.dtype);
  f.layers = id.layers;
  f.kvHeads = id.kvHeads;
  f.headSize = id.headSize;
  f.elementBytes = uint32_t(kvir::kvDtypeBytes(id.dtype));
  f.runs = uint64_t(runs);
  f.tokens = uint64_t(n);
  f.logits = uint64_t(nLogits);
  f.payloadBytes = payload;
  std::memcpy(f.model, id.model.data(), 32);
  std::memcpy(f.nameDigest, nameDigest(id.name).data(), 8);
  f.payloadChecksum = xxh64(p, payload);
  writeHeader(blob, f);
  return true;
}

kvrt_block_fault kvir::store::checkContextBlob(std::string_view blob,
                                               const ContextId &id,
                                               std::string &message) {
  BlobPrologue prologue{kMagic,
                        "context",
                        "context blob",
                        KVRT_CONTEXT_FORMAT_VERSION,
                        uint32_t(kContextHeaderBytes),
                        72,
                        id.model.data(),
                        id.layers,
                        id.kvHeads,
                        id.headSize,
                        id.dtype};
  if (kvrt_block_fault fault = checkBlobPrologue(blob, prologue, message))
    return fault;
  const uint8_t *b = reinterpret_cast<const uint8_t *>(blob.data());
  ContextHeader f = readHeader(b);
  if (std::memcmp(f.nameDigest, nameDigest(id.name).data(), 8) != 0 ||
      f.tokens != id.tokens.size()) {
    message = str("blob of another context: ", f.tokens, " tokens named ",
                  toHex(f.nameDigest, 8), "...; expected ", id.tokens.size(),
                  " tokens of ", id.name);
    return KVRT_BLOCK_MISMATCH;
  }
  if (f.logits != 0 && f.logits != uint64_t(id.vocab)) {
    message = str("blob with ", f.logits, " logits, the model has ", id.vocab,
                  " tokens");
    return KVRT_BLOCK_MISMATCH;
  }
  if (blob.size() - kContextHeaderBytes != f.payloadBytes) {
    message = str(blob.size() - kContextHeaderBytes < f.payloadBytes
                      ? "truncated blob: "
                      : "overlong blob: ",
                  blob.size(), " bytes, its header says ",
                  kContextHeaderBytes + f.payloadBytes);
    return KVRT_BLOCK_TRUNCATED;
  }
  if (xxh64(b + kContextHeaderBytes, f.payloadBytes) != f.payloadChecksum) {
    message = "corrupt blob: the payload checksum does not match";
    return KVRT_BLOCK_CORRUPT;
  }
  kvrt_page_layout layout{};
  layout.n_layers = id.layers;
  layout.n_kv_heads = id.kvHeads;
  layout.head_size = id.headSize;
  layout.dtype = id.dtype;
  Sections sections;
  std::string problem =
      parseSections(blob, f, kvSectionBytes(layout, f.tokens), sections);
  if (!problem.empty()) {
    message = "malformed context blob: " + problem;
    return KVRT_BLOCK_MISMATCH;
  }
  if (std::memcmp(sections.tokens, id.tokens.data(), id.tokens.size() * 4) !=
      0) {
    message = "blob of another context: its token ids differ";
    return KVRT_BLOCK_MISMATCH;
  }
  return KVRT_BLOCK_OK;
}

kvrt_status kvir::store::mapContextBlob(std::string_view blob,
                                        const ContextId &id, kvrt_pool *pool,
                                        kvrt_view **out,
                                        std::vector<float> &logits) {
  *out = nullptr;
  kvrt_page_layout layout;
  if (kvrt_status s = kvrt_pool_get_layout(pool, &layout))
    return s;
  std::string shape = describeShapeMismatch(layout, "context", id.layers,
                                            id.kvHeads, id.headSize, id.dtype);
  if (!shape.empty())
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT, shape);
  ContextHeader f = readHeader(reinterpret_cast<const uint8_t *>(blob.data()));
  Sections sections;
  std::string problem =
      parseSections(blob, f, kvSectionBytes(layout, f.tokens), sections);
  if (!problem.empty())
    return kvrt::fail(KVRT_ERR_INVALID_ARGUMENT,
                      "an unchecked context blob: " + problem);
  kvrt_view *view = nullptr;
  if (kvrt_status s = kvrt_view_create(pool, &view))
    return s;
  int64_t n = int64_t(f.tokens), first = 0;
  const char *label = sections.labels;
  for (const RunRecord &record : sections.runs) {
    std::vector<int32_t> pages;
    kvrt_status s = writeSectionToPages(pool, layout, record.tokens, first, n,
                                        sections.kv, pages);
    if (s) {
      kvrt_view_release(view);
      return s;
    }
    kvrt::PageRefs held{pool, pages};
    std::string text(label, record.labelBytes);
    kvrt_run run{pages.data(),
                 int64_t(pages.size()),
                 0,
                 record.tokens,
                 record.basePos,
                 record.delta,
                 id.tokens.data() + first,
                 record.hasLabel ? text.c_str() : nullptr};
    kvrt_view *next = nullptr;
    s = kvrt_view_append(view, &run, &next);
    kvrt_view_release(view);
    if (s)
      return s;
    view = next;
    first += record.tokens;
    label += record.labelBytes;
  }
  logits.resize(f.logits);
  if (f.logits) // an empty vector's data() may be null: no memcpy from it
    std::memcpy(logits.data(), sections.logits, f.logits * 4);
  *out = view;
  return KVRT_OK;
}
