#include "cli/share_flags.h"

#include "common/clock.h"
#include "head/core/shares.h"

namespace cohort::cli {

void ShareFlags::AddTo(CLI::App* sub) {
  sub->add_option("--priority-weight-fairshare", config.weights.fair_share,
                  "Points of a fair-share factor of 1 in a pending job's priority (default 10000)");
  sub->add_option("--priority-weight-age", config.weights.age,
                  "Points of a job that waited --priority-max-age or longer (default 1000)");
  sub->add_option("--priority-weight-size", config.weights.size,
                  "Points of a job asking for every GPU of the cluster (default 0)");
  sub->add_option("--priority-weight-job", config.weights.job,
                  "Points of a job's own priority 1000; one step is a 2000th of it (default 40000000: one step "
                  "outweighs fair share and age)");
  sub->add_option("--priority-max-age", max_age, "Waiting time at which the age factor reaches 1 (default 7d)");
  sub->add_option("--fairshare-half-life", half_life,
                  "Half-life of the GPU usage that fair share weighs (default 7d, as Slurm's)");
  sub->add_option("--preemption", preemption,
                  "on (default): a team within its quota reclaims GPUs others borrow, and a job takes the GPUs of "
                  "its team's lower-priority jobs, by preempting them; off: never")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--preempt-min-runtime", min_runtime,
                  "A job that started less than this ago is never preempted (default 10m)");
  sub->add_option("--preempt-grace", grace,
                  "How long a preempted job has to report a checkpoint before its GPUs are taken anyway "
                  "(default 5m)");
}

Result<head::core::SharesConfig> ShareFlags::Resolve() const {
  head::core::SharesConfig c = config;
  c.weights.max_age_ms = COHORT_TRY(ParseDurationMs(max_age, "--priority-max-age"));
  c.half_life_ms = COHORT_TRY(ParseDurationMs(half_life, "--fairshare-half-life"));
  c.preemption.enabled = preemption == "on";
  c.preemption.min_runtime_ms = COHORT_TRY(ParseDurationMs(min_runtime, "--preempt-min-runtime"));
  c.preempt_grace_ms = COHORT_TRY(ParseDurationMs(grace, "--preempt-grace"));
  COHORT_TRY_VOID(head::core::ValidateSharesConfig(c));
  return c;
}

}  // namespace cohort::cli
