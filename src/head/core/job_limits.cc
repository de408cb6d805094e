#include "head/core/job_limits.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace cohort::head::core {
namespace {

int64_t UserOpen(const ClusterState& s, const std::string& user) {
  auto it = s.open.by_user.find(user);
  return it == s.open.by_user.end() ? 0 : it->second;
}

}  // namespace

void CountOpenJob(ClusterState& s, const std::string& user, int64_t delta) {
  s.open.total = std::max<int64_t>(0, s.open.total + delta);
  auto it = s.open.by_user.try_emplace(user, 0).first;
  it->second += delta;
  if (it->second <= 0) s.open.by_user.erase(it);
}

int64_t OpenJobRoom(const ClusterState& s, const JobLimits& limits, const std::string& user) {
  int64_t room = std::numeric_limits<int64_t>::max();
  if (limits.per_user > 0) room = std::min(room, limits.per_user - UserOpen(s, user));
  if (limits.total > 0) room = std::min(room, limits.total - s.open.total);
  return std::max<int64_t>(room, 0);
}

std::string NoRoomReason(const ClusterState& s, const JobLimits& limits, const std::string& user) {
  if (const int64_t mine = UserOpen(s, user); limits.per_user > 0 && mine >= limits.per_user) {
    return fmt::format("user {} has {} jobs pending or running, the head's limit per user (--max-jobs-per-user {}): "
                       "wait for some to end or cancel some",
                       user, mine, limits.per_user);
  }
  if (limits.total > 0 && s.open.total >= limits.total) {
    return fmt::format("the cluster has {} jobs pending or running, the head's limit (--max-jobs {}): wait for some "
                       "to end",
                       s.open.total, limits.total);
  }
  return "";
}

Result<void> AdmitJob(const ClusterState& s, const JobLimits& limits, const std::string& user) {
  if (std::string why = NoRoomReason(s, limits, user); !why.empty()) {
    return MakeError(ErrorCode::kResourceExhausted, std::move(why));
  }
  return {};
}

}  // namespace cohort::head::core
