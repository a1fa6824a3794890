//===- Sampler.h - Choosing the next token from logits ----------*- C++ -*-===//
//
// Temperature, top-k and top-p (nucleus) sampling with a seeded generator
// (splitmix64, the project's portable generator): the same seed and logits
// give the same tokens on every machine. Temperature 0 is greedy (argmax,
// ties to the lower id), as kv-run's --greedy.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_SAMPLER_H
#define KVIR_DRIVER_SERVER_SAMPLER_H

#include <cstdint>
#include <utility>
#include <vector>

namespace kvir::serve {

class Sampler {
public:
  Sampler(double temperature, int64_t topK, double topP, uint64_t seed);

  /// The next token of a row of `vocab` logits.
  int32_t sample(const float *logits, int64_t vocab);

private:
  double uniform();

  double temperature, topP;
  int64_t topK;
  uint64_t state;
  std::vector<std::pair<float, int32_t>> candidates;
};

/// The index of the largest of `vocab` logits (the lower index on a tie).
int32_t argmax(const float *logits, int64_t vocab);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_SAMPLER_H
