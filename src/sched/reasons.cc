#include "sched/reasons.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace cohort::sched {

namespace {

std::string_view Plural(int64_t n, std::string_view one, std::string_view many) {
  return n == 1 ? one : many;
}

}  // namespace

std::string UnavailableSuffix(std::span<const NodeView> nodes) {
  std::map<std::string_view, int> counts;
  for (const NodeView& node : nodes) {
    if (!node.unavailable.empty()) ++counts[node.unavailable];
  }
  if (counts.empty()) return {};
  std::vector<std::pair<std::string_view, int>> groups(counts.begin(), counts.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out = " (";
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& [why, n] = groups[i];
    if (i == 0) {
      fmt::format_to(std::back_inserter(out), "{} {} {}", n, Plural(n, "node", "nodes"), why);
    } else {
      fmt::format_to(std::back_inserter(out), ", {} {}", n, why);
    }
  }
  out += ")";
  return out;
}

std::string ResourceReason(const GangDemand& demand, int available, int available_for_gpus,
                           std::string_view unavailable_suffix) {
  std::string out = fmt::format("needs {} {}", demand.nodes, Plural(demand.nodes, "node", "nodes"));
  if (demand.gpus > 0) {
    fmt::format_to(std::back_inserter(out), " with {} free {}", demand.gpus,
                   Plural(demand.gpus, "GPU", "GPUs"));
  }
  if (demand.cpus > 0 && (demand.gpus == 0 || available < available_for_gpus)) {
    fmt::format_to(std::back_inserter(out), "{} {} free {}", demand.gpus > 0 ? " and" : " with",
                   demand.cpus, Plural(demand.cpus, "CPU", "CPUs"));
  }
  fmt::format_to(std::back_inserter(out), "; {} available{}", available, unavailable_suffix);
  return out;
}

std::string WaitingForReason(int64_t head_job) {
  return fmt::format("waiting for job {} (higher priority; its resources are reserved)", head_job);
}

std::string ReservedSuffix(int64_t start_ms, int64_t now_ms, std::span<const std::string> nodes) {
  std::string on;
  for (size_t i = 0; i < nodes.size() && i < kReservedNodesShown; ++i) on += (i == 0 ? " on " : ", ") + nodes[i];
  if (nodes.size() > kReservedNodesShown) on += fmt::format(" and {} more", nodes.size() - kReservedNodesShown);
  if (start_ms == kNever) return "; reserved" + on + ", start unknown (waiting on jobs without a time limit)";
  if (start_ms <= now_ms) return "; reserved" + on + " to start once jobs past their time limit end";
  return "; reserved to start in " + FormatDuration(start_ms - now_ms) + on;
}

std::string InvalidReason(std::string_view message) {
  return fmt::format("invalid request: {}", message);
}

}  // namespace cohort::sched
