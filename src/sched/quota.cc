#include "sched/quota.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "sched/gpu_units.h"

namespace cohort::sched {

namespace {
constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();
}  // namespace

QuotaBook::QuotaBook(std::span<const TeamView> teams, std::span<const RunningJob> running) {
  // Units of a configured GPU amount, unlimited past what the units can count.
  constexpr int64_t kMaxGpus = kUnlimited / kGpuShareUnits / 2;
  for (const TeamView& t : teams) {
    Entry& e = teams_[t.name];
    e.quota = UnitsOfGpus(std::clamp<int64_t>(t.quota_gpus, 0, kMaxGpus));
    e.limit = t.borrow_limit_gpus < 0 || t.borrow_limit_gpus > kMaxGpus || t.quota_gpus > kMaxGpus
                  ? kUnlimited
                  : e.quota + UnitsOfGpus(t.borrow_limit_gpus);
  }
  for (const RunningJob& r : running) At(r.team).used += HeldUnits(r);
}

QuotaBook::Entry& QuotaBook::At(std::string_view team) {
  auto it = teams_.find(team);
  if (it == teams_.end()) it = teams_.emplace(std::string(team), Entry{0, kUnlimited, 0}).first;
  return it->second;
}

const QuotaBook::Entry* QuotaBook::Find(std::string_view team) const {
  auto it = teams_.find(team);
  return it == teams_.end() ? nullptr : &it->second;
}

int64_t QuotaBook::used(std::string_view team) const {
  const Entry* e = Find(team);
  return e ? e->used : 0;
}

int64_t QuotaBook::quota(std::string_view team) const {
  const Entry* e = Find(team);
  return e ? e->quota : 0;
}

int64_t QuotaBook::limit(std::string_view team) const {
  const Entry* e = Find(team);
  return e ? e->limit : kUnlimited;
}

bool QuotaBook::WithinQuota(std::string_view team, int64_t units) const {
  const Entry* e = Find(team);
  return units > 0 && (e ? e->used : 0) + units <= (e ? e->quota : 0);
}

bool QuotaBook::Admits(std::string_view team, int64_t units) const {
  const Entry* e = Find(team);
  return !e || e->limit == kUnlimited || e->used + units <= e->limit;
}

std::string QuotaBook::LimitReason(std::string_view team, int64_t units) const {
  const int64_t q = quota(team);
  if (units > limit(team)) {
    // No job of the team ending lets it start: only raising the team's limits does.
    return fmt::format("team {} may never hold this job: it needs {} GPUs, above the team's limit of {} (quota {} "
                       "+ borrow limit {}); an admin may raise it (cohort team set {} --quota/--borrow-limit)",
                       team, FormatGpus(units), FormatGpus(limit(team)), FormatGpus(q), FormatGpus(limit(team) - q),
                       team);
  }
  return fmt::format("team {} is at its limit: {} of {} GPUs in use (quota {} + borrow limit {}); this job needs {}",
                     team, FormatGpus(used(team)), FormatGpus(limit(team)), FormatGpus(q), FormatGpus(limit(team) - q),
                     FormatGpus(units));
}

void QuotaBook::Add(std::string_view team, int64_t units) { At(team).used += units; }

}  // namespace cohort::sched
