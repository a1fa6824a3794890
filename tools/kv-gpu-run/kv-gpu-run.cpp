//===- kv-gpu-run.cpp - GPU checks and benchmarks without LLVM --*- C++ -*-===//
//
// The runner of the GPU bundle (docs/gpu-backend.md): links only the runtime
// (KVRuntime, the reference oracle, the CUDA backend over libkvir_cuda_runtime)
// and loads the AOT kernel libraries; runs where only the CUDA driver is.
//
//   kv-gpu-run info
//   kv-gpu-run check (--model FILE | --synthetic NAME) [--expect FILE]
//                    [--tolerance 1e-3]
//   kv-gpu-run bench [--context 16384] [--iters 5]
//
// Exit status: 0 all checks passed, 1 a check failed, 2 an error (no driver,
// no device, no kernels, out of memory, a failed launch), with its message.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaRuntime.h"
#include "tools/kv-gpu-run/GpuScenarios.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace kvir;
using namespace kvir::gpurun;

namespace {

int error(const std::string &message) {
  std::fprintf(stderr, "kv-gpu-run: error: %s\n", message.c_str());
  return 2;
}

struct Args {
  std::string command, model, synthetic, expect;
  double tolerance = 1e-3;
  int64_t context = 16384;
  int iters = 5;
};

bool parse(int argc, char **argv, Args &a, std::string &problem) {
  if (argc < 2) {
    problem = "usage: kv-gpu-run info | check (--model FILE | --synthetic "
              "NAME) [--expect FILE] [--tolerance T] | bench [--context N] "
              "[--iters K]";
    return false;
  }
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--model")
      a.model = value();
    else if (arg == "--synthetic")
      a.synthetic = value();
    else if (arg == "--expect")
      a.expect = value();
    else if (arg == "--tolerance")
      a.tolerance = std::atof(value().c_str());
    else if (arg == "--context")
      a.context = std::atoll(value().c_str());
    else if (arg == "--iters")
      a.iters = std::atoi(value().c_str());
    else {
      problem = "unknown argument '" + arg + "'";
      return false;
    }
  }
  return true;
}

/// The CUDA backend for `model`, or an error message.
std::unique_ptr<ComputeBackend> cudaBackend(const kvrt_model *model,
                                            std::string *message) {
  return cuda::createCudaBackend(model, message);
}

double maxAbsDiff(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size())
    return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= worst))
      worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

/// Compares `got` with `want` scenario by scenario; prints one line each.
bool compare(const char *against, const std::vector<ScenarioResult> &got,
             const std::vector<ScenarioResult> &want, double tolerance) {
  bool ok = got.size() == want.size();
  if (!ok)
    std::printf("FAIL  %s: %zu scenarios, expected %zu\n", against, got.size(),
                want.size());
  for (size_t i = 0; ok && i < got.size(); ++i) {
    double d = maxAbsDiff(got[i].values, want[i].values);
    bool pass = got[i].name == want[i].name && d <= tolerance;
    std::printf("%s  %-15s vs %-9s max |diff| = %.3g (tolerance %.0e, %zu "
                "values)\n",
                pass ? "PASS" : "FAIL", got[i].name.c_str(), against, d,
                tolerance, got[i].values.size());
    ok = ok && pass;
  }
  return ok;
}

int check(const Args &a) {
  if (a.model.empty() == a.synthetic.empty())
    return error("check needs exactly one of --model FILE and --synthetic "
                 "NAME");
  std::string message;
  kvrt_model *model = nullptr;
  if (loadModel(a.model, a.synthetic, &model, &message) != KVRT_OK)
    return error(message);
  std::unique_ptr<ComputeBackend> gpu = cudaBackend(model, &message);
  if (!gpu) {
    kvrt_model_release(model);
    return error(message);
  }
  std::printf("device: %s\n", kvrt_cuda_device_name());
  std::vector<ScenarioResult> got;
  if (runScenarios(*gpu, model, &got) != KVRT_OK) {
    message = kvrt_last_error();
    kvrt_model_release(model);
    return error(message);
  }
  bool ok = true;
  if (!a.expect.empty()) {
    std::vector<ScenarioResult> cpu;
    if (!readResults(a.expect, &cpu, &message)) {
      kvrt_model_release(model);
      return error(message);
    }
    ok = compare("cpu", got, cpu, a.tolerance) && ok;
  }
  std::unique_ptr<ComputeBackend> reference = createReferenceBackend();
  std::vector<ScenarioResult> ref;
  if (runScenarios(*reference, model, &ref) != KVRT_OK) {
    message = kvrt_last_error();
    kvrt_model_release(model);
    return error(message);
  }
  ok = compare("reference", got, ref, a.tolerance) && ok;
  kvrt_model_release(model);
  std::printf("%s\n", ok ? "all checks passed" : "CHECKS FAILED");
  return ok ? 0 : 1;
}

/// A pool of `tokens` slots of K/V filled with a pattern (contents do not
/// matter to bandwidth), as one run or `runs` runs with offsets.
kvrt_status patternView(const kvrt_model *model, int64_t tokens, int runs,
                        kvrt_pool **poolOut, kvrt_view **out) {
  kvrt_pool_config pc;
  if (kvrt_status s = kvrt_pool_config_for_model(model, &pc))
    return s;
  int64_t nPages = (tokens + pc.page_tokens - 1) / pc.page_tokens;
  pc.capacity_pages = 2 * nPages + 4096;
  if (kvrt_status s = kvrt_pool_create(&pc, poolOut))
    return s;
  kvrt_page_layout layout;
  kvrt_pool_get_layout(*poolOut, &layout);
  std::vector<int32_t> pages(nPages);
  if (kvrt_status s = kvrt_pool_alloc_pages(*poolOut, nPages, pages.data()))
    return s;
  for (int64_t p = 0; p < nPages; ++p) {
    float *data = nullptr;
    kvrt_pool_page_data(*poolOut, pages[p], &data);
    for (int64_t i = 0; i < layout.page_stride; ++i)
      data[i] = float((i * 13 + p * 7) % 23) * 0.01f - 0.1f;
    kvrt_pool_seal_page(*poolOut, pages[p]);
  }
  std::vector<int32_t> ids(tokens);
  for (int64_t i = 0; i < tokens; ++i)
    ids[i] = int32_t(i % 97);
  kvrt_view *view = nullptr;
  if (kvrt_status s = kvrt_view_create(*poolOut, &view))
    return s;
  int64_t perRun = tokens / runs;
  for (int r = 0; r < runs; ++r) {
    int64_t begin = r * perRun, n = r + 1 == runs ? tokens - begin : perRun;
    // Run r's keys were stored at positions 0.. and sit at begin + Δ.
    kvrt_run run{pages.data() + begin / pc.page_tokens,
                 (begin % pc.page_tokens + n + pc.page_tokens - 1) /
                     pc.page_tokens,
                 begin % pc.page_tokens,
                 n,
                 0,
                 begin,
                 ids.data() + begin,
                 "bench"};
    kvrt_view *next = nullptr;
    kvrt_status s = kvrt_view_append(view, &run, &next);
    kvrt_view_release(view);
    if (s)
      return s;
    view = next;
  }
  for (int32_t page : pages)
    kvrt_pool_release_page(*poolOut, page);
  *out = view;
  return KVRT_OK;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

int bench(const Args &a) {
  std::string message;
  kvrt_model *model = nullptr;
  if (loadModel("", "synthetic-bench", &model, &message) != KVRT_OK)
    return error(message);
  std::unique_ptr<ComputeBackend> backend = cudaBackend(model, &message);
  if (!backend)
    return error(message);
  auto *gpu = static_cast<cuda::CudaComputeBackend *>(backend.get());
  kvrt_model_config c;
  kvrt_model_get_config(model, &c);
  int64_t hs = c.dim / c.n_heads;
  std::printf("device: %s\nmodel: synthetic-bench dim=%d hidden=%d layers=%d "
              "heads=%d kv_heads=%d head_size=%lld, f32 K/V\n",
              kvrt_cuda_device_name(), c.dim, c.hidden_dim, c.n_layers,
              c.n_heads, c.n_kv_heads, (long long)hs);

  // Decode attention: one query over `context` tokens, every layer (the
  // K/V working set is layers x context x kv_heads x head_size x 2 x 4 B).
  double times[2] = {0, 0};
  int runCounts[2] = {1, 16};
  for (int which = 0; which < 2; ++which) {
    kvrt_pool *pool = nullptr;
    kvrt_view *view = nullptr;
    if (patternView(model, a.context, runCounts[which], &pool, &view))
      return error(kvrt_last_error());
    for (int32_t layer = 0; layer < c.n_layers; ++layer) {
      double t = 0;
      if (gpu->timeAttention(model, view, a.context + 16, layer, a.iters, &t))
        return error(kvrt_last_error());
      times[which] += t;
    }
    kvrt_view_release(view);
    kvrt_pool_release(pool);
  }
  double bytes = double(c.n_layers) * a.context * c.n_kv_heads * hs * 2 * 4;
  double bw = bytes / times[0];
  std::printf("decode attention, %lld tokens, %d layers: %.3f ms, %.1f GB of "
              "K/V, %.0f GB/s = %.1f%% of the H200's 4800 GB/s (target 70%%)\n",
              (long long)a.context, c.n_layers, times[0] * 1e3, bytes / 1e9,
              bw / 1e9, 100.0 * bw / 4.8e12);
  std::printf("fused shift: 16 runs with offsets %.3f ms vs 1 run %.3f ms: "
              "%.3fx (target <= 1.1x)\n",
              times[1] * 1e3, times[0] * 1e3, times[1] / times[0]);

  // Prefill, edit and compose on one pool.
  kvrt_pool_config pc;
  kvrt_pool_config_for_model(model, &pc);
  pc.capacity_pages = 8192;
  kvrt_pool *pool = nullptr;
  if (kvrt_pool_create(&pc, &pool))
    return error(kvrt_last_error());
  kvrt_view *empty = nullptr;
  kvrt_view_create(pool, &empty);
  auto tokens = [&](int64_t n, int salt) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i)
      t[i] = int32_t((i * 7919 + salt * 131) % c.vocab_size);
    return t;
  };
  auto timed = [&](auto &&body) -> double {
    double best = INFINITY;
    for (int i = 0; i < 3; ++i) {
      auto start = std::chrono::steady_clock::now();
      if (!body())
        return -1;
      best = std::min(best, seconds(start));
    }
    return best;
  };
  std::vector<kvrt_view *> garbage;
  auto prefill = [&](const kvrt_view *over, const std::vector<int32_t> &t,
                     int64_t pos, kvrt_view **out) {
    std::vector<float> logits;
    kvrt_view *v = nullptr;
    if (backend->prefill(model, over, t.data(), int64_t(t.size()), pos, nullptr,
                         true, &logits, &v))
      return false;
    if (out)
      *out = v;
    else
      garbage.push_back(v);
    return true;
  };
  const int64_t P = 1024, S = 64, X = 256, A = 16, N = P + S + X + A;
  std::vector<int32_t> full = tokens(N, 1);
  double tFull = timed([&] { return prefill(empty, full, 0, nullptr); });
  if (tFull < 0)
    return error(kvrt_last_error());
  std::printf("prefill: %lld tokens in %.2f ms = %.0f tokens/s\n", (long long)N,
              tFull * 1e3, N / tFull);
  // The cached context: prefix, segment, suffix (independent of the segment).
  std::vector<int32_t> pre(full.begin(), full.begin() + P),
      suffix(full.begin() + P + S, full.begin() + P + S + X),
      answer(full.end() - A, full.end()), seg2 = tokens(S, 2);
  kvrt_view *vPre = nullptr, *vBlock = nullptr;
  if (!prefill(empty, pre, 0, &vPre) || !prefill(empty, suffix, 0, &vBlock))
    return error(kvrt_last_error());
  // Edit (cot-slice): recompute the segment, reuse the suffix (Δ = 0: same
  // length), recompute the answer; vs a full prefill of the edited context.
  double tEdit = timed([&] {
    kvrt_view *vSeg = nullptr, *shifted = nullptr, *ctx = nullptr;
    if (!prefill(vPre, seg2, P, &vSeg))
      return false;
    kvrt_view_shift(vBlock, P + S, &shifted);
    kvrt_view_concat(vSeg, shifted, &ctx);
    bool ok = prefill(ctx, answer, P + S + X, nullptr);
    kvrt_view_release(vSeg);
    kvrt_view_release(shifted);
    kvrt_view_release(ctx);
    return ok;
  });
  // Compose: the suffix block (prefilled alone at 0) appended after the
  // prefix with a RoPE shift, then the answer; vs a full prefill.
  std::vector<int32_t> composedTokens(pre);
  composedTokens.insert(composedTokens.end(), suffix.begin(), suffix.end());
  composedTokens.insert(composedTokens.end(), answer.begin(), answer.end());
  double tComposeFull =
      timed([&] { return prefill(empty, composedTokens, 0, nullptr); });
  double tCompose = timed([&] {
    kvrt_view *shifted = nullptr, *ctx = nullptr;
    kvrt_view_shift(vBlock, P, &shifted);
    kvrt_view_concat(vPre, shifted, &ctx);
    bool ok = prefill(ctx, answer, P + X, nullptr);
    kvrt_view_release(shifted);
    kvrt_view_release(ctx);
    return ok;
  });
  if (tEdit < 0 || tCompose < 0 || tComposeFull < 0)
    return error(kvrt_last_error());
  std::printf("edit (cot-slice, %lld of %lld tokens recomputed): %.2f ms vs "
              "full prefill %.2f ms: ratio %.3f\n",
              (long long)(S + A), (long long)N, tEdit * 1e3, tFull * 1e3,
              tEdit / tFull);
  std::printf("compose (%lld-token block shifted by %lld, %lld recomputed): "
              "%.2f ms vs full prefill %.2f ms: ratio %.3f\n",
              (long long)X, (long long)P, (long long)A, tCompose * 1e3,
              tComposeFull * 1e3, tCompose / tComposeFull);
  for (kvrt_view *v : garbage)
    kvrt_view_release(v);
  kvrt_view_release(vPre);
  kvrt_view_release(vBlock);
  kvrt_view_release(empty);
  kvrt_pool_release(pool);
  kvrt_model_release(model);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Args a;
  std::string problem;
  if (!parse(argc, argv, a, problem))
    return error(problem);
  if (a.command == "info") {
    std::printf("kernel search path:");
    for (const std::string &dir : cuda::kernelSearchPath())
      std::printf(" %s", dir.c_str());
    std::printf("\n");
    if (kvrt_cuda_init() != KVRT_OK)
      return error(kvrt_last_error());
    std::printf("device: %s\n", kvrt_cuda_device_name());
    return 0;
  }
  if (a.command == "check")
    return check(a);
  if (a.command == "bench")
    return bench(a);
  return error("unknown command '" + a.command +
               "' (expected info, check or bench)");
}
