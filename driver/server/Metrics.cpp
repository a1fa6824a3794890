//===- Metrics.cpp - kv-serve's counters in Prometheus text -----*- C++ -*-===//

#include "driver/server/Metrics.h"

#include <cmath>
#include <cstdio>

using namespace kvir::serve;

std::string kvir::serve::formatNumber(double value) {
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value))
    return "NaN";
  char text[32];
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    std::snprintf(text, sizeof(text), "%.0f", value);
  else
    std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void Metrics::counter(const std::string &name, const std::string &help) {
  std::lock_guard<std::mutex> lock(mutex);
  counters[name].help = help;
}

void Metrics::histogram(const std::string &name, const std::string &help,
                        std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mutex);
  Histogram &h = histograms[name];
  h.help = help;
  h.bounds = std::move(bounds);
  h.counts.assign(h.bounds.size() + 1, 0);
}

void Metrics::add(const std::string &name, double value,
                  const std::string &labels) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counters.find(name);
  if (it != counters.end())
    it->second.samples[labels] += value;
}

void Metrics::observe(const std::string &name, double value) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = histograms.find(name);
  if (it == histograms.end())
    return;
  Histogram &h = it->second;
  size_t bucket = 0;
  while (bucket < h.bounds.size() && value > h.bounds[bucket])
    ++bucket;
  ++h.counts[bucket];
  h.sum += value;
  ++h.count;
}

double Metrics::value(const std::string &name,
                      const std::string &labels) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counters.find(name);
  if (it == counters.end())
    return 0;
  auto sample = it->second.samples.find(labels);
  return sample == it->second.samples.end() ? 0 : sample->second;
}

std::string Metrics::render(const std::vector<Gauge> &gauges) const {
  std::lock_guard<std::mutex> lock(mutex);
  std::string out;
  for (const auto &[name, c] : counters) {
    out += "# HELP " + name + " " + c.help + "\n# TYPE " + name + " counter\n";
    if (c.samples.empty())
      out += name + " 0\n";
    for (const auto &[labels, v] : c.samples)
      out += name + (labels.empty() ? "" : "{" + labels + "}") + " " +
             formatNumber(v) + "\n";
  }
  for (const auto &[name, h] : histograms) {
    out +=
        "# HELP " + name + " " + h.help + "\n# TYPE " + name + " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      std::string le = i < h.bounds.size() ? formatNumber(h.bounds[i]) : "+Inf";
      out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) +
             "\n";
    }
    out += name + "_sum " + formatNumber(h.sum) + "\n" + name + "_count " +
           std::to_string(h.count) + "\n";
  }
  for (const Gauge &g : gauges)
    out += "# HELP " + g.name + " " + g.help + "\n# TYPE " + g.name +
           " gauge\n" + g.name + " " + formatNumber(g.value) + "\n";
  return out;
}
