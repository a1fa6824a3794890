//===- Sampler.cpp - Choosing the next token from logits --------*- C++ -*-===//

#include "driver/server/Sampler.h"

#include <algorithm>
#include <cmath>

using namespace kvir::serve;

int32_t kvir::serve::argmax(const float *logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best])
      best = i;
  return int32_t(best);
}

Sampler::Sampler(double temperature, int64_t topK, double topP, uint64_t seed)
    : temperature(temperature), topP(topP), topK(topK), state(seed) {}

double Sampler::uniform() {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  // 53 random bits: an exact double in [0, 1).
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::sample(const float *logits, int64_t vocab) {
  if (temperature <= 0 || topK == 1)
    return argmax(logits, vocab);
  candidates.clear();
  for (int64_t i = 0; i < vocab; ++i)
    candidates.push_back({logits[i], int32_t(i)});
  // Largest first, the lower id first on a tie: the order (and with it the
  // draw) does not depend on the sort's stability.
  auto order = [](const std::pair<float, int32_t> &a,
                  const std::pair<float, int32_t> &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = candidates.size();
  if (topK > 0 && size_t(topK) < keep) {
    keep = size_t(topK);
    std::partial_sort(candidates.begin(), candidates.begin() + keep,
                      candidates.end(), order);
    candidates.resize(keep);
  } else {
    std::sort(candidates.begin(), candidates.end(), order);
  }
  // Softmax of logit / temperature in double, from the largest.
  std::vector<double> p(candidates.size());
  double top = candidates[0].first, sum = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    p[i] = std::exp((double(candidates[i].first) - top) / temperature);
    sum += p[i];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p.
  size_t n = candidates.size();
  if (topP < 1) {
    double mass = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      mass += p[i] / sum;
      if (mass >= topP) {
        n = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    total += p[i];
  double r = uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    r -= p[i];
    if (r < 0)
      return candidates[i].second;
  }
  return candidates[n - 1].second;
}
