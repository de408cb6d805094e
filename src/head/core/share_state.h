// ShareState and SharesConfig: the head core's teams, fair-share usage and preemption
// bookkeeping (teams.h, shares.h, preempt.h), part of ClusterState.
//
// Teams are stored records (the state store's meta value "teams", written with the group
// commit whenever Effects::teams_changed). Usage is not stored: it is rebuilt from the
// jobs' attempt history when the head loads (RebuildUsage), exactly as accrued pass by
// pass since. Nominations (a job that preempted others waits for their GPUs, on the
// nodes being freed) and each attempt's last checkpoint time are kept in the job's
// record (api::Job::nomination, last_checkpoint), stored with it: after a restart a
// nominated job still waits for its victims (no second round of preemption for it) and
// work at risk still counts from the last checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "api/team.h"
#include "api/types.h"
#include "sched/snapshot.h"

namespace cohort::head::core {

// `cohort head` flags for fair share and preemption.
struct SharesConfig {
  sched::PriorityWeights weights;                       // --priority-weight-*, --priority-max-age
  int64_t half_life_ms = 7LL * 24 * 3600 * 1000;        // --fairshare-half-life
  sched::PreemptionPolicy preemption;                   // --preemption, --preempt-min-runtime
  int64_t preempt_grace_ms = 5LL * 60 * 1000;           // --preempt-grace: checkpoint deadline
  // A job that preempted others waits this long past the grace for their GPUs before it
  // may preempt again (their agents must confirm the tasks stopped).
  int64_t nomination_slack_ms = 60'000;
};

// Checks the configuration; kInvalidArgument naming the flag and the value.
Result<void> ValidateSharesConfig(const SharesConfig& c);

struct ShareState {
  std::map<std::string, api::Team> teams;  // created teams, by name

  // Decayed GPU-seconds per team, as of accrued_ms, of every ended attempt and of running
  // attempts up to accrued_ms (those in `accounted`).
  std::map<std::string, double> usage;
  int64_t accrued_ms = 0;
  struct Accounted {
    int attempt = 0;
    double gpus = 0;  // a sharing job: its parts of GPUs (0.5 accrues half a GPU-second a second)
    std::string team;
  };
  std::map<api::JobId, Accounted> accounted;

  // The pending jobs whose record carries a nomination (an index of api::Job::nomination,
  // rebuilt when the head loads).
  std::set<api::JobId> nominated;
};

}  // namespace cohort::head::core
