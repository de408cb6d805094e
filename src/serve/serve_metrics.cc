#include "serve/serve_metrics.h"

#include "serve/batcher.h"

namespace cohort::serve {

namespace {
constexpr int64_t kWindowMs = 10'000;
}

ServeMetrics::ServeMetrics()
    : ttft_(prom::ExponentialBuckets(0.001, 2, 16)),
      itl_(prom::ExponentialBuckets(0.0005, 2, 16)),
      e2e_(prom::ExponentialBuckets(0.005, 2, 16)) {}

void ServeMetrics::CountOutputTokens(int64_t n, int64_t now_ms) {
  output_tokens_ += n;
  MutexLock l(mu_);
  if (!window_.empty() && window_.back().first == now_ms) {
    window_.back().second += n;
  } else {
    window_.emplace_back(now_ms, n);
  }
  while (!window_.empty() && window_.front().first < now_ms - kWindowMs) window_.pop_front();
}

void ServeMetrics::CountRequest(const std::string& outcome) {
  if (outcome == "stop") ++stop_;
  else if (outcome == "length") ++length_;
  else if (outcome == "cancelled") ++cancelled_;
  else if (outcome == "rejected") ++rejected_;
  else if (outcome == "invalid") ++invalid_;
  else ++error_;
}

double ServeMetrics::TokensPerSecond(int64_t now_ms) const {
  MutexLock l(mu_);
  int64_t sum = 0;
  for (const auto& [ms, n] : window_) {
    if (ms >= now_ms - kWindowMs) sum += n;
  }
  return static_cast<double>(sum) / (kWindowMs / 1000.0);
}

double HistogramQuantile(const prom::HistogramSnapshot& h, double p) {
  if (h.count == 0) return 0;
  const double want = p * static_cast<double>(h.count);
  uint64_t seen = 0;
  for (size_t i = 0; i < h.bucket_counts.size(); ++i) {
    seen += h.bucket_counts[i];
    if (static_cast<double>(seen) >= want) {
      return i < h.upper_bounds.size() ? h.upper_bounds[i] : h.upper_bounds.back();
    }
  }
  return h.upper_bounds.back();
}

double ServeMetrics::TimeToFirstTokenQuantile(double p) const {
  return HistogramQuantile(ttft_.Snapshot(), p);
}
double ServeMetrics::InterTokenLatencyQuantile(double p) const {
  return HistogramQuantile(itl_.Snapshot(), p);
}

void ServeMetrics::Write(prom::TextWriter& w, const std::string& model, const LoadReport& load,
                         int64_t now_ms) const {
  using prom::MetricType;
  const prom::Labels m{{"model", model}};
  w.Family("cohort_serve_time_to_first_token_seconds", MetricType::kHistogram,
           "From a request's arrival to its first generated token");
  w.Histogram(m, ttft_.Snapshot());
  w.Family("cohort_serve_inter_token_latency_seconds", MetricType::kHistogram,
           "Between consecutive generated tokens of one request");
  w.Histogram(m, itl_.Snapshot());
  w.Family("cohort_serve_request_duration_seconds", MetricType::kHistogram,
           "From a request's arrival to its last token");
  w.Histogram(m, e2e_.Snapshot());
  w.Family("cohort_serve_prompt_tokens_total", MetricType::kCounter, "Prompt tokens read");
  w.Sample(m, static_cast<double>(prompt_tokens_.load()));
  w.Family("cohort_serve_output_tokens_total", MetricType::kCounter, "Tokens generated");
  w.Sample(m, static_cast<double>(output_tokens_.load()));
  w.Family("cohort_serve_output_tokens_per_second", MetricType::kGauge,
           "Tokens generated per second over the last 10 s");
  w.Sample(m, TokensPerSecond(now_ms));
  w.Family("cohort_serve_requests_total", MetricType::kCounter, "Requests by outcome");
  const std::pair<const char*, const std::atomic<int64_t>*> outcomes[] = {
      {"stop", &stop_},         {"length", &length_},     {"error", &error_},
      {"cancelled", &cancelled_}, {"rejected", &rejected_}, {"invalid", &invalid_}};
  for (const auto& [name, v] : outcomes) {
    w.Sample({{"model", model}, {"outcome", name}}, static_cast<double>(v->load()));
  }
  w.Family("cohort_serve_running_requests", MetricType::kGauge, "Sequences in the running batch");
  w.Sample(m, load.running);
  w.Family("cohort_serve_queued_requests", MetricType::kGauge, "Requests waiting to be admitted");
  w.Sample(m, load.waiting);
  w.Family("cohort_serve_queued_tokens", MetricType::kGauge,
           "Prompt and max_tokens of the waiting requests");
  w.Sample(m, static_cast<double>(load.queued_tokens));
  w.Family("cohort_serve_inflight_tokens", MetricType::kGauge,
           "Prompt tokens still to read and tokens still to generate, running requests");
  w.Sample(m, static_cast<double>(load.inflight_tokens));
  w.Family("cohort_serve_kv_cache_blocks_used", MetricType::kGauge, "KV-cache blocks held");
  w.Sample(m, load.kv_blocks_used);
  w.Family("cohort_serve_kv_cache_blocks", MetricType::kGauge, "KV-cache blocks in all");
  w.Sample(m, load.kv_blocks_total);
  w.Family("cohort_serve_kv_cache_usage_ratio", MetricType::kGauge, "KV-cache blocks held / in all");
  w.Sample(m, load.kv_blocks_total ? static_cast<double>(load.kv_blocks_used) / load.kv_blocks_total : 0.0);
}

}  // namespace cohort::serve
