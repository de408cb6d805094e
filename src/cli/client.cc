#include "cli/client.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/job_array.h"

namespace cohort::cli {

void AddClientOptions(CLI::App* sub, GlobalOptions& global) {
  sub->add_option("--head", global.head_url, kHeadFlagHelp);
  sub->add_flag("--json", global.json, "Print JSON instead of text");
  sub->add_option("--context", global.context, "Use this saved context's head and token (cohort context ls)");
}

Result<api::JobId> ParseJobId(std::string_view text) {
  auto id = ParseIdParam(text, "job id");
  if (!id) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("'{}' is not a job id (a positive integer, as `cohort queue` shows)", text));
  }
  return *id;
}

Result<std::vector<api::JobRef>> ParseJobRefs(const std::vector<std::string>& texts) {
  std::vector<api::JobRef> refs;
  for (const auto& text : texts) refs.push_back(COHORT_TRY(api::ParseJobRef(text, "--jobs")));
  return refs;
}

bool JobMatchesRefs(const json& j, const std::vector<api::JobRef>& refs) {
  if (!j.is_object()) return false;
  const auto id = j.value("id", api::JobId{0});
  const auto array = j.value("array_job_id", api::JobId{0});
  const auto task = j.value("array_task_id", int64_t{-1});
  return std::any_of(refs.begin(), refs.end(), [&](const api::JobRef& r) {
    return r.is_element() ? array == r.job && task == r.task : id == r.job || array == r.job;
  });
}

std::string JobRefsQuery(const std::vector<api::JobRef>& refs) {
  std::set<api::JobId> ids;
  for (const auto& r : refs) ids.insert(r.job);
  return fmt::format("{}", fmt::join(ids, ","));
}

void KeepJobsMatchingRefs(json& reply, const std::vector<api::JobRef>& refs) {
  if (refs.empty() || !reply.is_object() || !reply.contains("jobs") || !reply["jobs"].is_array()) return;
  json kept = json::array();
  for (auto& j : reply["jobs"]) {
    if (JobMatchesRefs(j, refs)) kept.push_back(std::move(j));
  }
  reply["jobs"] = std::move(kept);
}

Result<api::JobId> ResolveJobRef(const HttpClient& head, std::string_view text) {
  const api::JobRef ref = COHORT_TRY(api::ParseJobRef(text, "job id"));
  if (!ref.is_element()) return ref.job;
  json element = COHORT_TRY(head.Get(api::routes::JobByRef(text)));
  auto id = element.is_object() ? element.value("id", api::JobId{0}) : api::JobId{0};
  if (id <= 0) return MakeError(ErrorCode::kInternal, fmt::format("the head named no job for '{}'", text));
  return id;
}

Result<std::string> ParseStateList(const std::vector<std::string>& items, std::string_view flag) {
  std::string out;
  for (const auto& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t end = item.find(',', start);
      if (end == std::string::npos) end = item.size();
      std::string s = item.substr(start, end - start);
      if (!s.empty()) {
        auto st = api::ParseJobState(s);
        if (!st) return std::unexpected(WithContext(st.error(), flag));
        if (!out.empty()) out += ',';
        out += api::JobStateName(*st);
      }
      start = end + 1;
    }
  }
  return out;
}

Result<std::string> MyUserName(const HttpClient& head) {
  auto who = COHORT_TRY(head.Get(api::routes::kWhoAmI));
  if (!who.value("token_id", "").empty()) return who.value("user", "");
  if (const char* user = std::getenv("USER"); user && *user) return std::string(user);
  if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_name) return std::string(pw->pw_name);
  return MakeError(ErrorCode::kFailedPrecondition, "--me: the head names no user for this client, and $USER is not set");
}

Result<api::Job> FetchJob(const HttpClient& head, api::JobId id) {
  json j = COHORT_TRY(head.Get(api::routes::Job(id)));
  return api::JobFromJson(j);
}

Result<json> FetchAllPages(const HttpClient& head, const std::string& path, const std::string& key) {
  json all = json::array();
  std::string cursor;
  do {
    std::string page_path = cursor.empty() ? path
                            : path + (path.find('?') == std::string::npos ? "?" : "&") + "cursor=" +
                                  api::routes::UrlEncode(cursor);
    json page = COHORT_TRY(head.Get(page_path));
    if (!page.is_object() || !page.contains(key) || !page[key].is_array()) {
      return MakeError(ErrorCode::kInternal, fmt::format("malformed list from the head: no '{}' array", key));
    }
    for (auto& item : page[key]) all.push_back(std::move(item));
    std::string next = page.contains("next_cursor") && page["next_cursor"].is_string() ? page["next_cursor"].get<std::string>() : "";
    if (!next.empty() && next == cursor) return MakeError(ErrorCode::kInternal, "the head repeated a list cursor");
    cursor = next;
  } while (!cursor.empty());
  return json{{key, std::move(all)}};
}

int ForEachName(const std::vector<std::string>& names, const std::function<Result<json>(const std::string&)>& act,
                const std::function<int(const std::string&, json)>& done) {
  int rc = 0;
  for (const auto& name : names) {
    auto reply = act(name);
    if (!reply) {
      const int code = ReportError(reply.error());
      if (code == 3) return code;
      if (rc == 0) rc = code;
      continue;
    }
    if (const int stop = done(name, std::move(*reply)); stop != 0) return stop;
  }
  return rc;
}

void PrintJson(const json& j) {
  std::string text = j.dump(2, ' ', false, json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

std::optional<int64_t> JobRunTimeMs(const api::Job& job, int64_t now_ms) {
  if (job.state == api::JobState::kRunning) {
    if (job.start_ms <= 0) return std::nullopt;
    return std::max<int64_t>(0, now_ms - job.start_ms);
  }
  if (api::IsTerminal(job.state)) {
    // The attempts' run times added up, as GPU-hours add them: a requeued job's time
    // waiting between attempts is not time it ran.
    int64_t ran = 0;
    bool started = false;
    for (const auto& a : job.history) {
      if (a.start_ms <= 0) continue;
      const int64_t end = a.end_ms > 0 ? a.end_ms : job.end_ms;
      if (end <= 0) continue;
      started = true;
      ran += std::max<int64_t>(0, end - a.start_ms);
    }
    if (started) return ran;
    if (job.start_ms <= 0 || job.end_ms <= 0) return std::nullopt;
    return std::max<int64_t>(0, job.end_ms - job.start_ms);
  }
  return std::nullopt;
}

}  // namespace cohort::cli
