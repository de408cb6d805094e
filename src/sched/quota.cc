#include "sched/quota.h"

#include <fmt/format.h>

#include <limits>

namespace cohort::sched {

namespace {
constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max();
}  // namespace

QuotaBook::QuotaBook(std::span<const TeamView> teams, std::span<const RunningJob> running) {
  for (const TeamView& t : teams) {
    Entry& e = teams_[t.name];
    e.quota = t.quota_gpus;
    e.limit = t.borrow_limit_gpus < 0 || t.borrow_limit_gpus > kUnlimited - t.quota_gpus ? kUnlimited
                                                                                           : t.quota_gpus + t.borrow_limit_gpus;
  }
  for (const RunningJob& r : running) {
    int64_t gpus = 0;
    for (const Usage& u : r.usage) gpus += u.gpus;
    At(r.team).used += gpus;
  }
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

bool QuotaBook::WithinQuota(std::string_view team, int64_t gpus) const {
  const Entry* e = Find(team);
  return gpus > 0 && (e ? e->used : 0) + gpus <= (e ? e->quota : 0);
}

bool QuotaBook::Admits(std::string_view team, int64_t gpus) const {
  const Entry* e = Find(team);
  return !e || e->limit == kUnlimited || e->used + gpus <= e->limit;
}

std::string QuotaBook::LimitReason(std::string_view team, int64_t gpus) const {
  const int64_t q = quota(team);
  return fmt::format("team {} is at its limit: {} of {} GPUs in use (quota {} + borrow limit {}); this job needs {}",
                     team, used(team), limit(team), q, limit(team) - q, gpus);
}

void QuotaBook::Add(std::string_view team, int64_t gpus) { At(team).used += gpus; }

}  // namespace cohort::sched
