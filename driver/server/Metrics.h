//===- Metrics.h - kv-serve's counters in Prometheus text -------*- C++ -*-===//
//
// Counters and histograms, declared once with their help text and updated
// from any thread, rendered in the Prometheus text exposition format
// (version 0.0.4) for /metrics, followed by the gauges the caller computes
// at scrape time (pool pages, contexts, hit rate). docs/serve.md lists them.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_METRICS_H
#define KVIR_DRIVER_SERVER_METRICS_H

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvir::serve {

class Metrics {
public:
  /// Declares a counter; a sample may carry labels (`code="200"`).
  void counter(const std::string &name, const std::string &help);
  /// Declares a histogram with the upper bounds of its buckets (+Inf is
  /// added).
  void histogram(const std::string &name, const std::string &help,
                 std::vector<double> bounds);

  /// Adds `value` to a declared counter (`labels` as in `a="b",c="d"`).
  void add(const std::string &name, double value = 1,
           const std::string &labels = "");
  /// Records one observation of a declared histogram.
  void observe(const std::string &name, double value);

  /// The value of a counter's sample (0 when never added to).
  double value(const std::string &name, const std::string &labels = "") const;

  /// One gauge computed at scrape time.
  struct Gauge {
    std::string name, help;
    double value = 0;
  };
  /// Everything in the text format, then `gauges`.
  std::string render(const std::vector<Gauge> &gauges) const;

private:
  struct Counter {
    std::string help;
    std::map<std::string, double> samples;
  };
  struct Histogram {
    std::string help;
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    double sum = 0;
    uint64_t count = 0;
  };
  mutable std::mutex mutex;
  std::map<std::string, Counter> counters;
  std::map<std::string, Histogram> histograms;
};

/// A number as Prometheus and JSON both read it ("+Inf" for infinity).
std::string formatNumber(double value);

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_METRICS_H
