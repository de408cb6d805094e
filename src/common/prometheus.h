// The Prometheus text exposition format (version 0.0.4), written without a registry.
//
// TextWriter builds one /metrics body: a caller opens a metric family (its # HELP and
// # TYPE lines) and writes that family's samples before opening the next, so a family's
// samples always stay together as the format requires. Names are checked (letters,
// digits and '_', not starting with a digit; no colons, which are reserved for recording
// rules), counters must end in "_total", label values are escaped (\\, \", \n), and
// histograms come out as cumulative `_bucket{le=...}` series ending in le="+Inf",
// followed by `_sum` and `_count`. The first misuse is kept and reported by Finish; a
// writer is a plain value for one thread.
//
// Histogram is a thread-safe accumulator of observations over fixed buckets, for what a
// process measures between scrapes (e.g. scheduling-pass durations).
//
// Units follow Prometheus' conventions: base units in the name (_seconds, _bytes,
// _celsius, _watts, _hertz, _ratio for 0..1).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace cohort::prom {

enum class MetricType { kCounter, kGauge, kHistogram };

using Labels = std::vector<std::pair<std::string, std::string>>;

struct HistogramSnapshot {
  std::vector<double> upper_bounds;     // increasing, finite; +Inf is implied
  std::vector<uint64_t> bucket_counts;  // per bucket (not cumulative); size upper_bounds + 1
  double sum = 0;
  uint64_t count = 0;
};

bool ValidMetricName(std::string_view name);
bool ValidLabelName(std::string_view name);
// A label value escaped for the text format: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view value);
// A sample value: integers without a fraction ("42"), "NaN", "+Inf", "-Inf", otherwise the
// shortest representation that reads back exactly.
std::string FormatValue(double v);

class TextWriter {
 public:
  // Opens a family: writes # HELP (escaped) and # TYPE. Opening the same name twice is
  // an error (the format allows one block per family).
  void Family(std::string_view name, MetricType type, std::string_view help);
  // One sample of the open counter or gauge family.
  void Sample(const Labels& labels, double value);
  // One labelled histogram of the open histogram family.
  void Histogram(const Labels& labels, const HistogramSnapshot& h);

  // The body, or kInternal naming the first misuse (a bad name, a sample outside a
  // family of its type, an inconsistent histogram).
  Result<std::string> Finish() const;

 private:
  void Line(std::string_view name, const Labels& labels, std::string_view extra_label,
            std::string_view extra_value, double value);
  void Fail(std::string message);

  std::string out_;
  std::string family_;
  MetricType type_ = MetricType::kGauge;
  std::vector<std::string> families_;
  std::string error_;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  HistogramSnapshot Snapshot() const;

 private:
  mutable std::mutex mu_;
  HistogramSnapshot h_;  // guarded by mu_
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the previous.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace cohort::prom
