#include "api/job_array.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

namespace cohort::api {

namespace {

Result<int64_t> ParseIndex(std::string_view s, std::string_view part, const std::string& field, const char* what) {
  if (s.empty()) return FieldError(field, "'{}' has no {} (write e.g. 0-99, 0-99:2 or 1,3,5)", part, what);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return FieldError(field, "'{}': {} '{}' is not a whole number", part, what, s);
  }
  return v;
}

// Merges a range into the one before it when they continue each other.
bool Continues(const ArrayRange& a, const ArrayRange& b) {
  if (a.count() == 1 && b.count() == 1) return true;  // any two points make a stepped range
  if (a.count() == 1) return b.first - a.last == b.step;
  if (b.count() == 1) return b.first - a.last == a.step;
  return a.step == b.step && b.first - a.last == a.step;
}

}  // namespace

Result<ArrayIndexSet> ArrayIndexSet::Parse(std::string_view text, const std::string& field) {
  ArrayIndexSet out;
  if (text.empty()) return FieldError(field, "is empty; write e.g. 0-99, 0-99:2, 1,3,5 or 0-999%16");
  int64_t total = 0;
  for (const std::string_view part : SplitParts(text, ',')) {
    if (part.empty()) return FieldError(field, "'{}' has an empty part between commas", text);
    if (out.ranges_.size() >= kMaxArrayRanges) {
      return FieldError(field, "has more than {} comma-separated parts", kMaxArrayRanges);
    }
    ArrayRange r;
    std::string_view body = part;
    if (size_t colon = part.find(':'); colon != std::string_view::npos) {
      r.step = COHORT_TRY(ParseIndex(part.substr(colon + 1), part, field, "step"));
      if (r.step < 1) return FieldError(field, "'{}': the step must be at least 1, got {}", part, r.step);
      body = part.substr(0, colon);
      if (body.find('-') == std::string_view::npos) {
        return FieldError(field, "'{}': a step needs a range (FIRST-LAST:STEP)", part);
      }
    }
    if (size_t dash = body.find('-'); dash != std::string_view::npos) {
      r.first = COHORT_TRY(ParseIndex(body.substr(0, dash), part, field, "first index"));
      r.last = COHORT_TRY(ParseIndex(body.substr(dash + 1), part, field, "last index"));
      if (r.last < r.first) {
        return FieldError(field, "'{}': the range ends ({}) before it starts ({})", part, r.last, r.first);
      }
    } else {
      r.first = r.last = COHORT_TRY(ParseIndex(body, part, field, "index"));
    }
    if (r.first < 0 || r.last > kMaxArrayIndex) {
      return FieldError(field, "'{}': indices must be 0..{}", part, kMaxArrayIndex);
    }
    r.last = r.first + (r.last - r.first) / r.step * r.step;  // 0-9:4 is 0,4,8
    total += r.count();
    if (total > kMaxArrayElements) {
      return FieldError(field, "has more than {} elements", kMaxArrayElements);
    }
    out.ranges_.push_back(r);
  }
  std::sort(out.ranges_.begin(), out.ranges_.end(),
            [](const ArrayRange& a, const ArrayRange& b) { return a.first < b.first; });
  for (size_t i = 1; i < out.ranges_.size(); ++i) {
    if (out.ranges_[i].first <= out.ranges_[i - 1].last) {
      return FieldError(field, "'{}': the parts overlap (index {} is in two of them)", text, out.ranges_[i].first);
    }
  }
  out.Normalize();
  return out;
}

void ArrayIndexSet::Normalize() {
  std::vector<ArrayRange> merged;
  for (ArrayRange r : ranges_) {
    if (r.count() == 1) r.step = 1;
    if (!merged.empty() && Continues(merged.back(), r)) {
      ArrayRange& m = merged.back();
      m.step = m.count() > 1 ? m.step : (r.count() > 1 ? r.step : r.first - m.last);
      m.last = r.last;
      continue;
    }
    merged.push_back(r);
  }
  ranges_ = std::move(merged);
}

std::string ArrayIndexSet::ToString() const {
  std::string out;
  for (const auto& r : ranges_) {
    if (!out.empty()) out += ',';
    if (r.count() == 1) {
      out += std::to_string(r.first);
    } else if (r.count() == 2 && r.step != 1) {
      out += fmt::format("{},{}", r.first, r.last);
    } else if (r.step == 1) {
      out += fmt::format("{}-{}", r.first, r.last);
    } else {
      out += fmt::format("{}-{}:{}", r.first, r.last, r.step);
    }
  }
  return out;
}

int64_t ArrayIndexSet::size() const {
  int64_t n = 0;
  for (const auto& r : ranges_) n += r.count();
  return n;
}

bool ArrayIndexSet::contains(int64_t index) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), index,
                             [](int64_t i, const ArrayRange& r) { return i < r.first; });
  if (it == ranges_.begin()) return false;
  --it;
  return index <= it->last && (index - it->first) % it->step == 0;
}

std::vector<int64_t> ArrayIndexSet::TakeFirst(int64_t n) {
  std::vector<int64_t> out;
  size_t used = 0;  // ranges taken whole
  while (n > 0 && used < ranges_.size()) {
    ArrayRange& r = ranges_[used];
    while (n > 0 && r.first <= r.last) {
      out.push_back(r.first);
      r.first += r.step;
      --n;
    }
    if (r.first > r.last) ++used;
  }
  ranges_.erase(ranges_.begin(), ranges_.begin() + static_cast<std::ptrdiff_t>(used));
  if (!ranges_.empty() && ranges_.front().count() == 1) ranges_.front().step = 1;
  return out;
}

bool ArrayIndexSet::Remove(int64_t index) {
  if (!contains(index)) return false;
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), index,
                             [](int64_t i, const ArrayRange& r) { return i < r.first; });
  --it;
  const ArrayRange r = *it;
  std::vector<ArrayRange> parts;
  if (index > r.first) parts.push_back({r.first, index - r.step, r.step});
  if (index < r.last) parts.push_back({index + r.step, r.last, r.step});
  it = ranges_.erase(it);
  ranges_.insert(it, parts.begin(), parts.end());
  for (auto& p : ranges_) {
    if (p.count() == 1) p.step = 1;
  }
  return true;
}

void ArrayIndexSet::Add(int64_t index) {
  if (contains(index)) return;
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), index,
                             [](int64_t i, const ArrayRange& r) { return i < r.first; });
  if (it != ranges_.begin() && index < std::prev(it)->last) {
    // Inside a stepped range's span without being a member: split it around the index.
    --it;
    const ArrayRange r = *it;
    const int64_t below = r.first + (index - r.first) / r.step * r.step;
    ArrayRange lo{r.first, below, r.step}, hi{below + r.step, r.last, r.step};
    it = ranges_.erase(it);
    it = ranges_.insert(it, hi);
    it = ranges_.insert(it, ArrayRange{index, index, 1});
    ranges_.insert(it, lo);
  } else {
    ranges_.insert(it, ArrayRange{index, index, 1});
  }
  Normalize();
}

std::string ArraySpec::ToString() const {
  if (indices.empty()) return "";
  std::string out = indices.ToString();
  if (throttle > 0) out += fmt::format("%{}", throttle);
  return out;
}

Result<ArraySpec> ParseArraySpec(std::string_view text, const std::string& field) {
  ArraySpec out;
  std::string_view body = text;
  if (size_t pct = text.find('%'); pct != std::string_view::npos) {
    const std::string_view t = text.substr(pct + 1);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
      return FieldError(field, "'{}': the throttle after '%' must be a whole number, got '{}'", text, t);
    }
    if (v < 1 || v > kMaxArrayElements) {
      return FieldError(field, "'{}': the throttle must be 1..{} elements at once, got {}", text, kMaxArrayElements, v);
    }
    out.throttle = static_cast<int>(v);
    body = text.substr(0, pct);
  }
  out.indices = COHORT_TRY(ArrayIndexSet::Parse(body, field));
  return out;
}

std::vector<std::string_view> SplitParts(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    const size_t at = text.find(sep, pos);
    out.push_back(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) return out;
    pos = at + 1;
  }
}

Result<JobRef> ParseJobRef(std::string_view text, const std::string& field) {
  JobRef out;
  const size_t us = text.find('_');
  auto number = [&](std::string_view s, int64_t min) -> std::optional<int64_t> {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min) return std::nullopt;
    return v;
  };
  auto job = number(text.substr(0, us), 1);
  std::optional<int64_t> task = us == std::string_view::npos ? std::optional<int64_t>(-1) : number(text.substr(us + 1), 0);
  if (!job || !task || *task > kMaxArrayIndex) {
    return FieldError(field, "'{}' is not a job id: write a job's id (12) or one element of an array (12_7)",
                      text.substr(0, 64));
  }
  out.job = *job;
  out.task = *task;
  return out;
}

std::string DisplayJobId(const Job& job) {
  if (job.is_array_element()) return fmt::format("{}_{}", job.array_job_id, job.array_task_id);
  if (job.spec.is_array() && !job.array_left.empty()) {
    const auto spec = ParseArraySpec(job.spec.array, "array");
    const int throttle = spec ? spec->throttle : 0;
    return fmt::format("{}_[{}{}]", job.id, job.array_left, throttle > 0 ? fmt::format("%{}", throttle) : "");
  }
  return std::to_string(job.id);
}

}  // namespace cohort::api
