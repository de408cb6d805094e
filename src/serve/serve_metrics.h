// ServeMetrics: what a replica measures about its requests, for /metrics and for the
// load report the gateway reads: time to first token, inter-token latency, request
// latency (histograms), tokens in and out and requests by outcome (counters), and the
// output tokens per second over the last few seconds.
//
// Threads: every method may be called from any thread (histograms lock themselves; the
// counters are atomics; the rate window has its own mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "common/prometheus.h"

namespace cohort::serve {

struct LoadReport;

class ServeMetrics {
 public:
  ServeMetrics();

  void ObserveTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }
  void ObserveInterTokenLatency(double seconds) { itl_.Observe(seconds); }
  void ObserveRequestLatency(double seconds) { e2e_.Observe(seconds); }
  void CountPromptTokens(int64_t n) { prompt_tokens_ += n; }
  // Output tokens, also into the rate window (`now_ms`: a monotonic clock).
  void CountOutputTokens(int64_t n, int64_t now_ms) EXCLUDES(mu_);
  // "stop", "length", "error", "cancelled", "rejected" (429), "invalid" (400).
  void CountRequest(const std::string& outcome);

  // Output tokens per second over the last 10 s window (0 when idle).
  double TokensPerSecond(int64_t now_ms) const EXCLUDES(mu_);
  // Median (p = 0.5) or other quantile of a histogram, from its buckets (the upper bound
  // of the bucket it falls in); 0 without observations.
  double TimeToFirstTokenQuantile(double p) const;
  double InterTokenLatencyQuantile(double p) const;

  // The cohort_serve_* families, the load gauges from `load`, labelled by `model`.
  void Write(prom::TextWriter& w, const std::string& model, const LoadReport& load,
             int64_t now_ms) const;

 private:
  prom::Histogram ttft_, itl_, e2e_;
  std::atomic<int64_t> prompt_tokens_{0}, output_tokens_{0};
  std::atomic<int64_t> stop_{0}, length_{0}, error_{0}, cancelled_{0}, rejected_{0}, invalid_{0};
  mutable Mutex mu_;
  std::deque<std::pair<int64_t, int64_t>> window_ GUARDED_BY(mu_);  // (ms, tokens)
};

// The quantile of a histogram snapshot (see above).
double HistogramQuantile(const prom::HistogramSnapshot& h, double p);

}  // namespace cohort::serve
