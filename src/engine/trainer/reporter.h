// ProgressReporter: posts training progress to the job's COHORT_REPORT URL, where the head
// keeps it for `cohort show` and the dashboard. Best effort: a failed post is printed once
// (and again when posting recovers) and never stops training. One thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/http.h"

namespace cohort::engine {

struct ProgressSample {
  int64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double samples_per_s = 0;
  int rank = 0;
  int64_t checkpoint_step = -1;  // the newest checkpoint this run wrote or resumed from; -1: none
  int64_t total_steps = 0;       // the step training ends at (percent and ETA); 0: not sent
  double val_loss = -1;          // a validation loss at this step; < 0: none
};

class ProgressReporter {
 public:
  // `url` is COHORT_REPORT ("http://head:port/v1/report/<token>"); empty disables.
  explicit ProgressReporter(const std::string& url);
  bool enabled() const { return client_ != nullptr; }
  // Returns true when the head's reply asks for a checkpoint now (`cohort drain --now`
  // moves the job once a report names a checkpoint newer than its request).
  bool Post(const ProgressSample& s);

 private:
  std::unique_ptr<HttpClient> client_;
  std::string path_;
  bool failing_ = false;
};

}  // namespace cohort::engine
