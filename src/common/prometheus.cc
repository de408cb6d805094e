#include "common/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace cohort::prom {
namespace {

bool NameChar(char c, bool first) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return first ? alpha : alpha || (c >= '0' && c <= '9');
}

std::string_view TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0)) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  return ValidMetricName(name) && !name.starts_with("__");
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

void TextWriter::Fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

void TextWriter::Family(std::string_view name, MetricType type, std::string_view help) {
  if (!ValidMetricName(name)) return Fail(fmt::format("invalid metric name '{}'", name));
  bool total = name.ends_with("_total");
  if (type == MetricType::kCounter && !total) return Fail(fmt::format("counter '{}' must end in _total", name));
  if (type != MetricType::kCounter && total) return Fail(fmt::format("'{}' ends in _total but is not a counter", name));
  if (std::find(families_.begin(), families_.end(), name) != families_.end()) {
    return Fail(fmt::format("metric family '{}' written twice", name));
  }
  families_.emplace_back(name);
  family_ = std::string(name);
  type_ = type;
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help), name, TypeName(type));
}

void TextWriter::Line(std::string_view name, const Labels& labels, std::string_view extra_label,
                      std::string_view extra_value, double value) {
  out_ += name;
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!ValidLabelName(k) || k == "le") return Fail(fmt::format("invalid label name '{}' on {}", k, name));
      if (!first) out_ += ',';
      first = false;
      out_ += fmt::format("{}=\"{}\"", k, EscapeLabelValue(v));
    }
    if (!extra_label.empty()) {
      if (!first) out_ += ',';
      out_ += fmt::format("{}=\"{}\"", extra_label, extra_value);
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void TextWriter::Sample(const Labels& labels, double value) {
  if (family_.empty()) return Fail("a sample written before any family");
  if (type_ == MetricType::kHistogram) return Fail(fmt::format("'{}' is a histogram: use Histogram()", family_));
  Line(family_, labels, {}, {}, value);
}

void TextWriter::Histogram(const Labels& labels, const HistogramSnapshot& h) {
  if (family_.empty() || type_ != MetricType::kHistogram) {
    return Fail(fmt::format("histogram written to '{}', which is not a histogram family", family_));
  }
  if (h.bucket_counts.size() != h.upper_bounds.size() + 1) {
    return Fail(fmt::format("histogram '{}' has {} bounds but {} bucket counts", family_, h.upper_bounds.size(),
                            h.bucket_counts.size()));
  }
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    if (!std::isfinite(h.upper_bounds[i]) || (i > 0 && h.upper_bounds[i] <= h.upper_bounds[i - 1])) {
      return Fail(fmt::format("histogram '{}' bounds must be finite and increasing", family_));
    }
  }
  uint64_t cumulative = 0;
  const std::string bucket = family_ + "_bucket";
  for (size_t i = 0; i < h.bucket_counts.size(); ++i) {
    cumulative += h.bucket_counts[i];
    std::string le = i < h.upper_bounds.size() ? FormatValue(h.upper_bounds[i]) : "+Inf";
    Line(bucket, labels, "le", le, static_cast<double>(cumulative));
  }
  if (cumulative != h.count) {
    return Fail(fmt::format("histogram '{}' buckets add up to {} but count is {}", family_, cumulative, h.count));
  }
  Line(family_ + "_sum", labels, {}, {}, h.sum);
  Line(family_ + "_count", labels, {}, {}, static_cast<double>(h.count));
}

Result<std::string> TextWriter::Finish() const {
  if (!error_.empty()) return MakeError(ErrorCode::kInternal, "metrics: " + error_);
  return out_;
}

Histogram::Histogram(std::vector<double> upper_bounds) {
  h_.upper_bounds = std::move(upper_bounds);
  h_.bucket_counts.assign(h_.upper_bounds.size() + 1, 0);
}

void Histogram::Observe(double v) {
  std::lock_guard lock(mu_);
  size_t i = std::lower_bound(h_.upper_bounds.begin(), h_.upper_bounds.end(), v) - h_.upper_bounds.begin();
  h_.bucket_counts[i] += 1;
  h_.sum += v;
  h_.count += 1;
}

HistogramSnapshot Histogram::Snapshot() const {
  std::lock_guard lock(mu_);
  return h_;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) out.push_back(v);
  return out;
}

}  // namespace cohort::prom
