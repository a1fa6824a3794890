//===- ModelIO.cpp - Read and write llama2.c checkpoints --------*- C++ -*-===//
//
// The llama2.c "version 0" format: seven little-endian int32 (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then float32 weights in
// the order of tensorSpecs() (ModelTensors.def), with seq_len * head_size
// floats of legacy RoPE tables after rms_final. A negative vocab_size means
// wcls is present.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/GGUF.h"
#include "runtime/core/Model.h"
#include "runtime/core/ModelConfig.h"
#include "runtime/core/Support.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the llama2.c reader assumes a little-endian host");

using namespace kvrt;

namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);

/// The config a header states (vocab_size as the file has it: negative for
/// a separate classifier), with llama2.c's fixed RoPE and norm settings.
/// vocab_size must not be 0 or INT32_MIN.
kvrt_model_config configOfHeader(const int32_t header[7]) {
  kvrt_model_config config;
  kvrt_model_config_init(&config);
  config.dim = header[0];
  config.hidden_dim = header[1];
  config.n_layers = header[2];
  config.n_heads = header[3];
  config.n_kv_heads = header[4];
  config.seq_len = header[6];
  config.shared_classifier = header[5] > 0;
  config.vocab_size = header[5] > 0 ? header[5] : -header[5];
  return config;
}

/// Floats of the tensors before the legacy RoPE tables: llama2.c's exporter
/// wrote them right after rms_final.
uint64_t floatsBeforeTables(const std::vector<TensorSpec> &specs) {
  uint64_t floats = 0;
  for (const TensorSpec &spec : specs) {
    floats += spec.count;
    if (spec.decl->id == TensorId::rms_final)
      break;
  }
  return floats;
}

/// Describes the first non-finite value of a weight buffer, or returns "".
std::string findNonFinite(const kvrt_model_config &config,
                          const std::vector<TensorSpec> &specs,
                          const std::vector<float> &data) {
  const float *p = data.data();
  for (const TensorSpec &spec : specs) {
    for (uint64_t i = 0; i < spec.count; ++i) {
      if (std::isfinite(p[i]))
        continue;
      std::string where = str(spec.name, "[", i, "]");
      if (spec.perLayer)
        where += str(" (layer ", i / (spec.count / config.n_layers), ")");
      return str("non-finite weight ", where, " = ", p[i]);
    }
    p += spec.count;
  }
  return "";
}

/// Reads `count` floats at the current position of `f` into `dst`.
bool readFloats(std::FILE *f, float *dst, uint64_t count) {
  return std::fread(dst, sizeof(float), count, f) == count;
}

/// Writes `count` floats to `f`.
bool writeFloats(std::FILE *f, const float *src, uint64_t count) {
  return std::fwrite(src, sizeof(float), count, f) == count;
}

kvrt_status loadModel(const char *path, kvrt_model **out) {
  File file;
  uint64_t fileBytes = 0;
  if (kvrt_status s = openRegularFile(path, "model", file, &fileBytes))
    return s;
  if (fileBytes < kHeaderBytes)
    return fail(KVRT_ERR_BAD_MODEL,
                str("truncated model '", path, "': ", fileBytes,
                    " bytes, the header alone needs ", kHeaderBytes));

  int32_t header[7];
  if (std::fread(header, sizeof(int32_t), 7, file.get()) != 7)
    return fail(KVRT_ERR_IO, str("cannot read the header of '", path, "'"));
  int32_t rawVocab = header[5];
  if (rawVocab == 0 || rawVocab == std::numeric_limits<int32_t>::min())
    return fail(KVRT_ERR_BAD_MODEL,
                str("invalid header in '", path, "': vocab_size = ", rawVocab,
                    " must be a nonzero int32 with a positive magnitude"));
  kvrt_model_config config = configOfHeader(header);
  std::string configError = describeConfigError(config);
  if (!configError.empty())
    return fail(KVRT_ERR_BAD_MODEL,
                str("invalid header in '", path, "': ", configError));

  std::optional<std::vector<TensorSpec>> specs = tensorSpecs(config);
  uint64_t weightFloats = 0;
  bool overflow = !specs;
  if (specs)
    for (const TensorSpec &spec : *specs)
      overflow |=
          __builtin_add_overflow(weightFloats, spec.count, &weightFloats);
  uint64_t tableFloats = legacyRopeTableFloats(config), expected = 0;
  overflow |= __builtin_add_overflow(weightFloats, tableFloats, &expected);
  overflow |= __builtin_mul_overflow(expected, sizeof(float), &expected);
  overflow |= __builtin_add_overflow(expected, kHeaderBytes, &expected);
  if (overflow)
    return fail(KVRT_ERR_BAD_MODEL,
                str("size mismatch in '", path,
                    "': the header implies more than 2^64 bytes of weights"));
  if (fileBytes < expected)
    return fail(KVRT_ERR_BAD_MODEL,
                str("truncated model '", path, "': ", fileBytes,
                    " bytes, the header implies ", expected, " (",
                    expected - fileBytes, " missing)"));
  if (fileBytes > expected)
    return fail(KVRT_ERR_BAD_MODEL,
                str("size mismatch in '", path, "': ", fileBytes,
                    " bytes, the header implies ", expected, " (",
                    fileBytes - expected, " trailing bytes)"));

  if (kvrt_status s = allocationFault(KVRT_FAULT_WEIGHTS, "model weights"))
    return s;
  std::vector<float> data(weightFloats);
  uint64_t beforeTables = floatsBeforeTables(*specs);
  bool ok = readFloats(file.get(), data.data(), beforeTables);
  ok = ok &&
       std::fseek(file.get(), static_cast<long>(tableFloats * sizeof(float)),
                  SEEK_CUR) == 0;
  ok = ok && readFloats(file.get(), data.data() + beforeTables,
                        weightFloats - beforeTables);
  if (!ok)
    return fail(KVRT_ERR_IO, str("cannot read the weights of '", path, "'"));
  std::string nonFinite = findNonFinite(config, *specs, data);
  if (!nonFinite.empty())
    return fail(KVRT_ERR_BAD_MODEL, str("bad model '", path, "': ", nonFinite));
  *out = makeModel(config, std::move(data));
  return KVRT_OK;
}

kvrt_status saveModel(const kvrt_model &model, const char *path) {
  const kvrt_model_config &c = model.config;
  if (c.rope_layout != KVRT_ROPE_INTERLEAVED || c.rope_theta != 10000.0 ||
      c.rms_eps != 1e-5 || kvir::ropeDims(c) != kvir::headSize(c) ||
      kvir::ropeHasFrequencyDivisor(c))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                str("cannot save to '", path,
                    "': the llama2.c format only expresses interleaved RoPE "
                    "over the whole head with rope_theta 10000 and rms_eps "
                    "1e-5, without RoPE scaling"));
  int32_t header[7] = {
      c.dim,        c.hidden_dim,
      c.n_layers,   c.n_heads,
      c.n_kv_heads, c.shared_classifier ? c.vocab_size : -c.vocab_size,
      c.seq_len};
  // The header states the tensors a file has: a config with another set
  // (an optional tensor the format has no flag for) cannot be written.
  kvrt_model_config stated = configOfHeader(header);
  for (const TensorDecl &t : kTensors)
    if (tensorPresent(t.presence, c) != tensorPresent(t.presence, stated))
      return fail(KVRT_ERR_INVALID_ARGUMENT,
                  str("cannot save to '", path,
                      "': the llama2.c format has no tensor ", t.field));
  File file(std::fopen(path, "wb"));
  if (!file)
    return fail(KVRT_ERR_IO,
                str("cannot create '", path, "': ", std::strerror(errno)));
  bool ok = std::fwrite(header, sizeof(int32_t), 7, file.get()) == 7;
  // Weights of other formats (a quantised GGUF file) as the f32 they load
  // as.
  const std::vector<float> &weights = f32Weights(model);
  uint64_t beforeTables = floatsBeforeTables(*tensorSpecs(c));
  uint64_t afterTables = weights.size() - beforeTables;
  ok = ok && writeFloats(file.get(), weights.data(), beforeTables);
  // The legacy tables: cos then sin of pos * theta^(-2i/head_size), as
  // llama2.c's exporter wrote them (readers skip them).
  int32_t headSize = c.dim / c.n_heads, half = headSize / 2;
  std::vector<float> table(static_cast<size_t>(c.seq_len) * half);
  for (int part = 0; part < 2 && ok; ++part) {
    for (int32_t pos = 0; pos < c.seq_len; ++pos)
      for (int32_t i = 0; i < half; ++i) {
        double angle = pos * std::pow(c.rope_theta, -2.0 * i / headSize);
        table[static_cast<size_t>(pos) * half + i] =
            static_cast<float>(part == 0 ? std::cos(angle) : std::sin(angle));
      }
    ok = writeFloats(file.get(), table.data(), table.size());
  }
  ok =
      ok && writeFloats(file.get(), weights.data() + beforeTables, afterTables);
  std::FILE *raw = file.release();
  ok = (std::fclose(raw) == 0) && ok;
  if (!ok)
    return fail(KVRT_ERR_IO,
                str("cannot write '", path, "': ", std::strerror(errno)));
  return KVRT_OK;
}

} // namespace

extern "C" kvrt_status kvrt_model_load(const char *path, kvrt_model **out) {
  if (!path || !out)
    return nullArgument(__func__);
  return kvrt_model_load_ex(path, KVRT_LOAD_MAP, out);
}

extern "C" kvrt_status kvrt_model_load_ex(const char *path, uint32_t flags,
                                          kvrt_model **out) {
  if (!path || !out)
    return nullArgument(__func__);
  *out = nullptr;
  uint32_t known = KVRT_LOAD_READ | KVRT_LOAD_NO_REPACK | KVRT_LOAD_REPACK;
  if (flags & ~known)
    return fail(
        KVRT_ERR_INVALID_ARGUMENT,
        str("kvrt_model_load_ex: unknown flags 0x", std::hex, flags & ~known));
  if ((flags & KVRT_LOAD_NO_REPACK) && (flags & KVRT_LOAD_REPACK))
    return fail(KVRT_ERR_INVALID_ARGUMENT,
                "kvrt_model_load_ex: KVRT_LOAD_NO_REPACK and "
                "KVRT_LOAD_REPACK together: give one of them");
  kvrt_status status = guard([&] {
    if (!gguf::fileHasMagic(path))
      return loadModel(path, out);
    std::string error =
        gguf::readFile(path, out, nullptr, (flags & KVRT_LOAD_READ) != 0);
    return error.empty() ? KVRT_OK : fail(KVRT_ERR_BAD_MODEL, error);
  });
  if (status == KVRT_OK)
    (*out)->repack = (flags & KVRT_LOAD_NO_REPACK) ? kvrt_model::Repack::Never
                     : (flags & KVRT_LOAD_REPACK)  ? kvrt_model::Repack::Always
                                                   : kvrt_model::Repack::ByHost;
  return status;
}

extern "C" kvrt_status kvrt_model_save(const kvrt_model *model,
                                       const char *path) {
  if (!model || !path)
    return nullArgument(__func__);
  return guard([&] { return saveModel(*model, path); });
}
