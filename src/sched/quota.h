// Quotas with borrowing (Kueue's ClusterQueues in one cohort), for one scheduling pass.
//
// Each team has a nominal quota of GPUs, guaranteed to it, and a borrow limit: how many
// GPUs beyond its quota it may hold while other teams leave theirs idle (unlimited when
// not set). A team whose running jobs hold more than its quota is borrowing, and the GPUs
// it borrows are reclaimed by preemption (preempt.h) when a team within its quota needs
// them. A job starts only if its team's GPUs in use plus the job's stay within quota +
// borrow limit. A team the snapshot does not list has quota 0 and no borrow limit.
//
// The book counts in GPU share units (gpu_units.h: kGpuShareUnits per GPU), so that a job
// sharing GPUs counts its parts of them: a team of quota 1 runs four quarter-GPU jobs and
// a fifth borrows. Quotas are configured in whole GPUs (TeamView) and converted here;
// every amount the book takes or returns is in units, and its texts print GPUs.
//
// QuotaBook counts the units each team's running jobs hold and grows as the pass starts
// jobs. Plain value; one pass owns one book.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/string_hash.h"
#include "sched/snapshot.h"

namespace cohort::sched {

class QuotaBook {
 public:
  QuotaBook(std::span<const TeamView> teams, std::span<const RunningJob> running);

  // In units (kGpuShareUnits per GPU).
  int64_t used(std::string_view team) const;
  int64_t quota(std::string_view team) const;
  // quota + borrow limit; INT64_MAX when borrowing is unlimited.
  int64_t limit(std::string_view team) const;
  // True if the team holds more than its quota.
  bool borrowing(std::string_view team) const { return used(team) > quota(team); }

  // True if a job of `units` (at least 1) keeps `team` within its quota: its GPUs are
  // guaranteed (it comes before borrowers and may reclaim). A CPU-only job never is.
  bool WithinQuota(std::string_view team, int64_t units) const;
  // True if `units` more keep `team` within quota + borrow limit.
  bool Admits(std::string_view team, int64_t units) const;
  // "team ml is at its limit: 3.75 of 4 GPUs in use (quota 2 + borrow limit 2); this job
  // needs 0.5" (for a job that Admits refuses); for a job larger than the limit itself,
  // that the team may never hold it and what would change that.
  std::string LimitReason(std::string_view team, int64_t units) const;

  void Add(std::string_view team, int64_t units);

 private:
  struct Entry {
    int64_t quota = 0;
    int64_t limit = 0;  // INT64_MAX: unlimited
    int64_t used = 0;
  };
  Entry& At(std::string_view team);
  const Entry* Find(std::string_view team) const;  // null for a team never seen

  // Looked up for every pending job of a pass: with a string_view, no copies.
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> teams_;
};

}  // namespace cohort::sched
