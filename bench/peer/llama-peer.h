//===- llama-peer.h - What the llama.cpp peer tools share -------*- C++ -*-===//
//
// Not part of the build: included by llama-logits.cpp and llama-speed.cpp,
// which the bench/peer scripts compile against llama.cpp's prebuilt library
// (fetch-llama.sh). Loading the CPU backends and a model, and one batch of
// token ids at positions 0..n-1 of sequence 0.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_BENCH_PEER_LLAMA_PEER_H
#define KVIR_BENCH_PEER_LLAMA_PEER_H

#include "ggml-backend.h"
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <istream>
#include <vector>

namespace peer {

/// The whitespace-separated token ids of `in`.
inline std::vector<llama_token> readIds(std::istream &in) {
  std::vector<llama_token> ids;
  for (long id; in >> id;)
    ids.push_back(llama_token(id));
  return ids;
}

/// Loads the CPU backends (shared libraries beside libllama, or where
/// LLAMA_BACKEND_DIR says) and the model at `path`, mapped as llama.cpp does
/// by default; null after a message naming `tool`.
inline llama_model *loadModel(const char *tool, const char *path) {
  if (const char *dir = std::getenv("LLAMA_BACKEND_DIR"))
    ggml_backend_load_all_from_path(dir);
  else
    ggml_backend_load_all();
  llama_backend_init();
  llama_model *model =
      llama_model_load_from_file(path, llama_model_default_params());
  if (!model)
    std::fprintf(stderr, "%s: llama.cpp cannot load %s\n", tool, path);
  return model;
}

/// llama.cpp's default context parameters for `context` positions, one
/// batch of `batch` tokens and `threads` threads.
inline llama_context_params contextParams(int32_t context, int32_t batch,
                                          int threads) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = uint32_t(context);
  cp.n_batch = uint32_t(batch);
  cp.n_ubatch = uint32_t(batch);
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  return cp;
}

/// A batch of `tokens` at positions 0..n-1 of sequence 0, with logits for
/// every position (`allLogits`) or the last one only.
inline llama_batch promptBatch(const std::vector<llama_token> &tokens,
                               bool allLogits) {
  int32_t n = int32_t(tokens.size());
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int32_t i = 0; i < n; ++i) {
    batch.token[i] = tokens[size_t(i)];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = allLogits || i == n - 1;
  }
  batch.n_tokens = n;
  return batch;
}

} // namespace peer

#endif // KVIR_BENCH_PEER_LLAMA_PEER_H
