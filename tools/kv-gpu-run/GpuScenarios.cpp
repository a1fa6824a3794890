//===- GpuScenarios.cpp - Fixed workloads the GPU checks compare -*- C++
//-*-===//

#include "tools/kv-gpu-run/GpuScenarios.h"

#include <cstdio>
#include <cstring>
#include <fstream>

using namespace kvir;
using namespace kvir::gpurun;

bool kvir::gpurun::syntheticPreset(const std::string &name,
                                   kvrt_model_config *c, uint64_t *seed) {
  kvrt_model_config_init(c);
  c->seq_len = 1 << 16;
  c->shared_classifier = 0;
  if (name == "synthetic-test") {
    c->dim = 256;
    c->hidden_dim = 512;
    c->n_layers = 3;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->vocab_size = 300;
    c->rope_layout = KVRT_ROPE_HALF;
    c->rope_theta = 1000000.0;
    *seed = 7;
    return true;
  }
  if (name == "synthetic-bench") {
    c->dim = 1024;
    c->hidden_dim = 2816;
    c->n_layers = 8;
    c->n_heads = 8;
    c->n_kv_heads = 8;
    c->vocab_size = 1024;
    *seed = 1;
    return true;
  }
  return false;
}

kvrt_status kvir::gpurun::loadModel(const std::string &file,
                                    const std::string &synthetic,
                                    kvrt_model **out, std::string *error) {
  kvrt_status s;
  if (!file.empty()) {
    s = kvrt_model_load(file.c_str(), out);
  } else {
    kvrt_model_config config;
    uint64_t seed = 0;
    if (!syntheticPreset(synthetic, &config, &seed)) {
      *error = "unknown synthetic model '" + synthetic +
               "' (expected synthetic-test or synthetic-bench)";
      return KVRT_ERR_INVALID_ARGUMENT;
    }
    s = kvrt_model_synthetic(&config, seed, out);
  }
  if (s != KVRT_OK)
    *error = kvrt_last_error();
  return s;
}

namespace {

std::vector<int32_t> tokensFor(int64_t n, int64_t salt, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = int32_t((i * 7919 + salt * 104729 + 13) % vocab);
  return t;
}

/// Releases views at scope exit.
struct Views {
  std::vector<kvrt_view *> all;
  kvrt_view *keep(kvrt_view *v) {
    all.push_back(v);
    return v;
  }
  ~Views() {
    for (kvrt_view *v : all)
      kvrt_view_release(v);
  }
};

#define TRY(expr)                                                              \
  do {                                                                         \
    if (kvrt_status s_ = (expr))                                               \
      return s_;                                                               \
  } while (0)

} // namespace

kvrt_status kvir::gpurun::runScenarios(ComputeBackend &backend,
                                       const kvrt_model *model,
                                       std::vector<ScenarioResult> *results) {
  kvrt_model_config c;
  TRY(kvrt_model_get_config(model, &c));
  kvrt_pool_config pc;
  TRY(kvrt_pool_config_for_model(model, &pc));
  pc.capacity_pages = 4096;
  kvrt_pool *pool = nullptr;
  TRY(kvrt_pool_create(&pc, &pool));
  struct PoolRef {
    kvrt_pool *p;
    ~PoolRef() { kvrt_pool_release(p); }
  } poolRef{pool};
  Views views;
  kvrt_view *empty = nullptr;
  TRY(kvrt_view_create(pool, &empty));
  views.keep(empty);
  int32_t V = c.vocab_size;

  // 1. A prefill of 40 tokens (three pages), all logits.
  {
    std::vector<int32_t> t = tokensFor(40, 1, V);
    std::vector<float> logits;
    kvrt_view *out = nullptr;
    TRY(backend.prefill(model, empty, t.data(), 40, 0, "p40", false, &logits,
                        &out));
    views.keep(out);
    results->push_back({"prefill-40", logits});
  }
  // 2. Compose: a block prefilled alone at 0 appended after a prefix with
  //    Δ = 12 (runs with offsets), then an answer over both.
  kvrt_view *prefix = nullptr;
  {
    std::vector<int32_t> p = tokensFor(12, 2, V), b = tokensFor(10, 3, V),
                         a = tokensFor(6, 4, V);
    std::vector<float> lp, lb, la;
    kvrt_view *block = nullptr, *shifted = nullptr, *composed = nullptr,
              *answered = nullptr;
    TRY(backend.prefill(model, empty, p.data(), 12, 0, "prefix", true, &lp,
                        &prefix));
    views.keep(prefix);
    TRY(backend.prefill(model, empty, b.data(), 10, 0, "block", true, &lb,
                        &block));
    views.keep(block);
    TRY(kvrt_view_shift(block, 12, &shifted));
    views.keep(shifted);
    TRY(kvrt_view_concat(prefix, shifted, &composed));
    views.keep(composed);
    TRY(backend.prefill(model, composed, a.data(), 6, 22, "answer", false, &la,
                        &answered));
    views.keep(answered);
    results->push_back({"compose-answer", la});
    // 3. Decode: three single tokens, each over the previous view.
    kvrt_view *cur = answered;
    std::vector<float> decode;
    for (int step = 0; step < 3; ++step) {
      int32_t tok = (step * 31 + 5) % V;
      std::vector<float> l;
      kvrt_view *next = nullptr;
      TRY(backend.prefill(model, cur, &tok, 1, 28 + step, "decode", true, &l,
                          &next));
      cur = views.keep(next);
      decode.insert(decode.end(), l.begin(), l.end());
    }
    results->push_back({"decode-3", decode});
  }
  // 4. layerKV of 5 tokens at layer min(1, L-1) over the prefix.
  {
    std::vector<int32_t> t = tokensFor(5, 5, V);
    std::vector<float> k, v;
    int32_t layer = c.n_layers > 1 ? 1 : 0;
    TRY(backend.layerKV(model, prefix, t.data(), 5, 12, layer, &k, &v));
    k.insert(k.end(), v.begin(), v.end());
    results->push_back({"layer-kv", k});
  }
  return KVRT_OK;
}

bool kvir::gpurun::writeResults(const std::string &path,
                                const std::vector<ScenarioResult> &results) {
  std::ofstream out(path, std::ios::binary);
  out << "KVGPU-EXPECT 1\n" << results.size() << "\n";
  for (const ScenarioResult &r : results) {
    out << r.name << " " << r.values.size() << "\n";
    out.write(reinterpret_cast<const char *>(r.values.data()),
              std::streamsize(r.values.size() * sizeof(float)));
    out << "\n";
  }
  return bool(out);
}

bool kvir::gpurun::readResults(const std::string &path,
                               std::vector<ScenarioResult> *results,
                               std::string *error) {
  std::ifstream in(path, std::ios::binary);
  std::string magic;
  size_t count = 0;
  std::getline(in, magic);
  if (!in || magic != "KVGPU-EXPECT 1" || !(in >> count)) {
    *error = "cannot read " + path + " (not a kv-gpu-expect file)";
    return false;
  }
  for (size_t i = 0; i < count; ++i) {
    ScenarioResult r;
    size_t n = 0;
    if (!(in >> r.name >> n) || in.get() != '\n') {
      *error = "truncated " + path;
      return false;
    }
    r.values.resize(n);
    in.read(reinterpret_cast<char *>(r.values.data()),
            std::streamsize(n * sizeof(float)));
    in.get();
    if (!in) {
      *error = "truncated " + path;
      return false;
    }
    results->push_back(std::move(r));
  }
  return true;
}
