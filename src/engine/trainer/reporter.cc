#include "engine/trainer/reporter.h"

#include <fmt/format.h>

#include <cmath>

namespace cohort::engine {

ProgressReporter::ProgressReporter(const std::string& url) {
  if (url.empty()) return;
  // Split "scheme://host:port/path..." into the base the client takes and the path.
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  if (slash == std::string::npos) {
    fmt::print(stderr, "cohort train: COHORT_REPORT '{}' is not an http URL with a path; "
                       "progress is not reported\n", url);
    return;
  }
  client_ = std::make_unique<HttpClient>(url.substr(0, slash), Millis(2000));
  path_ = url.substr(slash);
}

bool ProgressReporter::Post(const ProgressSample& s) {
  if (!client_) return false;
  json body = {{"step", s.step}, {"rank", s.rank}};
  if (std::isfinite(s.loss)) body["loss"] = s.loss;  // NaN: a validation-only report
  if (s.total_steps > 0) body["total_steps"] = s.total_steps;
  if (s.val_loss >= 0) body["val_loss"] = s.val_loss;
  if (s.tokens_per_s > 0) body["tokens_per_s"] = s.tokens_per_s;
  if (s.samples_per_s > 0) body["samples_per_s"] = s.samples_per_s;
  if (s.checkpoint_step >= 0) body["checkpoint_step"] = s.checkpoint_step;
  auto r = client_->Post(path_, body);
  if (!r && !failing_) {
    fmt::print(stderr, "cohort train: progress report failed (training goes on): {}\n",
               r.error().ToString());
  } else if (r && failing_) {
    fmt::print(stderr, "cohort train: progress reports go through again\n");
  }
  failing_ = !r;
  return r && r->is_object() && r->value("checkpoint", false);
}

}  // namespace cohort::engine
