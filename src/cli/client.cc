#include "cli/client.h"

#include <cctype>
#include <cstdio>

#include <fmt/format.h>

namespace cohort::cli {

void AddClientOptions(CLI::App* sub, GlobalOptions& global) {
  sub->add_option("--head", global.head_url, "Head URL (default: $COHORT_HEAD or http://127.0.0.1:8470)");
  sub->add_flag("--json", global.json, "Print JSON instead of text");
}

Result<api::JobId> ParseJobId(std::string_view text) {
  auto id = ParseIdParam(text, "job id");
  if (!id) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a job id (a positive integer, as `cohort queue` shows)", text));
  }
  return *id;
}

Result<api::Job> FetchJob(const HttpClient& head, api::JobId id) {
  json j = COHORT_TRY(head.Get(fmt::format("/v1/jobs/{}", id)));
  return api::JobFromJson(j);
}

std::string UrlEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

void PrintJson(const json& j) {
  std::string text = j.dump(2, ' ', false, json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

Result<NodeView> NodeViewFromJson(const json& j) {
  NodeView v;
  v.node = COHORT_TRY(api::NodeFromJson(j));
  try {
    v.display_state = j.value("display_state", std::string(api::NodeStateName(v.node.state)));
    v.gpus_allocated = j.value("gpus_allocated", 0);
    v.cpus_allocated = j.value("cpus_allocated", 0);
    v.jobs = j.value("jobs", std::vector<api::JobId>{});
    v.heartbeat_age_ms = j.value("heartbeat_age_ms", int64_t(-1));
  } catch (const json::exception& e) {
    return Errorf(ErrorCode::kInternal, "malformed node record from the head: {}", e.what());
  }
  return v;
}

std::optional<int64_t> JobRunTimeMs(const api::Job& job, int64_t now_ms) {
  if (job.state == api::JobState::kRunning) {
    if (job.start_ms <= 0) return std::nullopt;
    return std::max<int64_t>(0, now_ms - job.start_ms);
  }
  if (api::IsTerminal(job.state)) {
    int64_t first = !job.history.empty() && job.history.front().start_ms > 0 ? job.history.front().start_ms
                                                                              : job.start_ms;
    if (first <= 0 || job.end_ms <= 0) return std::nullopt;
    return std::max<int64_t>(0, job.end_ms - first);
  }
  return std::nullopt;
}

}  // namespace cohort::cli
