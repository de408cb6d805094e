// /v1/jobs: submit, list, show, cancel; listed and shown jobs are the api::JobStatus view.
#include <algorithm>
#include <charconv>
#include <functional>

#include "api/job_array.h"
#include "head/list_page.h"
#include "head/routes.h"
#include "head/usage.h"

namespace cohort::head {
namespace {

// Calls `each` on every item of a comma-separated list, empty ones included, stopping at
// its first error.
Result<void> ForEachListItem(std::string_view list, const std::function<Result<void>(std::string_view)>& each) {
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    COHORT_TRY_VOID(each(list.substr(start, end - start)));
    start = end + 1;
  }
  return {};
}

// ?state= names states (comma-separated) or "all"; without it, the active ones: PENDING
// and RUNNING.
Result<JobFilter> ParseFilter(const httplib::Request& req) {
  JobFilter f;
  if (!req.has_param("state")) {
    f.states = {api::JobState::kPending, api::JobState::kRunning};
  } else if (req.get_param_value("state") != "all") {
    COHORT_TRY_VOID(ForEachListItem(req.get_param_value("state"), [&](std::string_view s) -> Result<void> {
      if (s.empty()) return {};
      auto st = api::ParseJobState(s);
      if (!st) return MakeError(ErrorCode::kInvalidArgument, "state: " + st.error().message, "state");
      f.states.insert(*st);
      return {};
    }));
  }
  if (req.has_param("user")) f.user = req.get_param_value("user");
  // ?jobs=12,13: only those jobs, and an array's elements with it (squeue/sacct -j).
  if (req.has_param("jobs")) {
    COHORT_TRY_VOID(ForEachListItem(req.get_param_value("jobs"), [&](std::string_view text) -> Result<void> {
      int64_t id = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
      if (ec != std::errc() || ptr != text.data() + text.size() || id <= 0) {
        return MakeError(ErrorCode::kInvalidArgument,
                         fmt::format("jobs: '{}' is not a job id (a comma-separated list of ids)", text.substr(0, 40)),
                         "jobs");
      }
      if (f.ids.size() >= 1000) return MakeError(ErrorCode::kInvalidArgument, "jobs: at most 1000 ids", "jobs");
      f.ids.insert(id);
      return {};
    }));
  }
  // ?since= and ?until=: Unix milliseconds (the CLI turns "2d" or an RFC 3339 time into them).
  f.since_ms = COHORT_TRY(QueryIntParam(req, "since", 0, 0, int64_t{1} << 53));
  f.until_ms = COHORT_TRY(QueryIntParam(req, "until", 0, 0, int64_t{1} << 53));
  if (f.since_ms > 0 && f.until_ms > 0 && f.since_ms >= f.until_ms) {
    return MakeError(ErrorCode::kInvalidArgument, "since must be before until", "since");
  }
  return f;
}

// The whole list (no ?fields=) as text: each job's JSON as the Cluster keeps it, with
// gpu_seconds and tasks_usage added, the same object api::ToJson(JobStatus) makes.
void SendJobList(httplib::Response& res, Cluster& cluster, const JobFilter& filter, size_t limit) {
  auto list = cluster.ListJobsSerialized(filter, NowUnixMs());
  std::string next_cursor;
  if (list.size() > limit) {
    list.erase(list.begin());  // the oldest: it starts the next page
    next_cursor = std::to_string(list.front().id);
  }
  const auto usage = cluster.RunningTaskUsage();
  size_t bytes = 64;
  for (const auto& j : list) bytes += j.json->size() + 64;
  std::string body;
  body.reserve(bytes);
  body += "{\"jobs\":[";
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& j = list[i];
    if (i) body += ',';
    // The job's object without its closing brace, then the fields of the status view.
    body.append(*j.json, 0, j.json->size() - 1);
    body += ",\"gpu_seconds\":";
    body += json(j.gpu_seconds).dump();
    if (j.running) {
      json tasks = json::array();
      if (auto u = usage.find(j.id); u != usage.end()) {
        for (const auto& t : u->second) tasks.push_back(api::ToJson(t));
      }
      body += ",\"tasks_usage\":";
      body += tasks.dump(-1, ' ', false, json::error_handler_t::replace);
      if (auto eta = cluster.progress().Eta(j.id, j.attempt)) body += ",\"progress_eta\":" + api::ToJson(*eta).dump();
    }
    body += '}';
  }
  body += ']';
  if (!next_cursor.empty()) body += ",\"next_cursor\":\"" + next_cursor + "\"";
  body += '}';
  res.status = 200;
  res.set_content(std::move(body), "application/json");
}

}  // namespace

// Another user's job as a caller who is neither its owner nor an admin may see it: the
// values of its environment (where secrets go) are hidden, the names kept, and so is its
// batch script.
void HideSecretsUnlessOwner(json& job, const Caller& caller) {
  const int64_t id = job.contains("id") && job["id"].is_number_integer() ? job["id"].get<int64_t>() : 0;
  if (caller.MayActOn(id, job.contains("spec") ? job["spec"].value("user", "") : "")) return;
  auto spec = job.find("spec");
  if (spec == job.end() || !spec->is_object()) return;
  if (auto script = spec->find("script"); script != spec->end()) *script = kHiddenScript;
  auto env = spec->find("env");
  if (env == spec->end() || !env->is_object()) return;
  for (auto& [name, value] : env->items()) value = kHiddenEnvValue;
}

Result<std::string> JobOwner(const Caller& caller, bool spec_names_user, const std::string& spec_user) {
  if (caller.kind == Caller::Kind::kInsecure) return spec_user;
  if (!spec_names_user || spec_user == caller.user) return caller.user;
  if (caller.IsAdmin()) return spec_user;  // as Slurm's root may submit for others
  return MakeError(ErrorCode::kPermissionDenied,
                   fmt::format("user: {} may not submit a job as '{}' (only an admin may)", caller.Describe(), spec_user),
                   "user");
}

Result<void> CheckPriority(const Caller& caller, int priority) {
  if (priority <= 0 || caller.IsAdmin()) return {};  // IsAdmin: an --insecure head's callers too
  return MakeError(ErrorCode::kPermissionDenied,
                   fmt::format("priority: {} may not raise a job's priority above 0 (got {}): a user may lower "
                               "their jobs' priority (-{}..0) to order them among themselves; a higher one, which "
                               "goes before fair share, is an admin's to give",
                               caller.Describe(), priority, api::kMaxPriority),
                   "priority");
}

Result<void> CheckOwner(Cluster& cluster, const Caller& caller, api::JobId id, std::string_view what) {
  if (caller.IsAdmin()) return {};
  auto job = cluster.GetJob(id);
  if (!job) return std::unexpected(job.error());
  if (caller.MayActOn(id, job->spec.user)) return {};
  return Errorf(ErrorCode::kPermissionDenied, "{} may not {} job {}: it belongs to {}", caller.Describe(), what, id,
                job->spec.user);
}

Result<api::JobId> JobIdOfPath(const Cluster& cluster, const std::string& text) {
  return cluster.ResolveJob(COHORT_TRY(api::ParseJobRef(text, "job id")));
}

void RegisterJobRoutes(Router& router, Cluster& cluster) {
  router.Post(api::routes::kJobs, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                     httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto spec = api::JobSpecFromJson(*body);
    if (!spec) return SendError(res, spec.error());
    // The gateway routes a model's requests to every running job that names it as its
    // service_model: a replica submitted here, which no one checks against the services
    // that exist, would join another user's service and read its clients' prompts. Only
    // /v1/services (Services::Deploy and Scale) makes replicas.
    if (spec->is_service()) {
      return SendError(res, Error{ErrorCode::kInvalidArgument,
                                  fmt::format("kind: a job cannot be a service replica ('{}'); deploy a service with "
                                              "`cohort serve deploy FILE` (POST /v1/services), and scale it with "
                                              "`cohort serve scale`",
                                              spec->service.substr(0, 64)),
                                  "kind"});
    }
    if (auto user = JobOwner(caller, body->is_object() && body->contains("user"), spec->user); !user) {
      return SendError(res, user.error());
    } else {
      spec->user = *user;
    }
    if (auto allowed = CheckPriority(caller, spec->priority); !allowed) return SendError(res, allowed.error());
    // ?hold=true: submitted held, as sbatch --hold (cohort release lets it start).
    std::string hold_by;
    if (req.has_param("hold")) {
      const std::string hold = req.get_param_value("hold");
      if (hold != "true" && hold != "false") {
        return SendError(res, Error{ErrorCode::kInvalidArgument,
                                    fmt::format("query parameter 'hold' must be true or false, got '{}'",
                                                hold.substr(0, 64))});
      }
      if (hold == "true") hold_by = HolderName(caller);
    }
    // A user names only a team of theirs; an admin any team (core/teams.h).
    auto job = cluster.Submit(std::move(*spec), caller.IsAdmin(), hold_by);
    if (!job) return SendError(res, job.error());
    res.set_header("Location", api::routes::Job(job->id));  // also what the audit log reads
    SendJson(res, api::ToJson(*job), 201);
  });

  router.Get(api::routes::kJobs, Access::kViewer, [&](const Caller& caller, const httplib::Request& req,
                                                      httplib::Response& res) {
    static const std::set<std::string> known = [] {
      api::JobStatus sample;
      sample.tasks_usage.emplace();
      return KeysOf(api::ToJson(sample));
    }();
    auto filter = ParseFilter(req);
    if (!filter) return SendError(res, filter.error());
    auto page = ParsePageParams(req, known);
    if (!page) return SendError(res, page.error());
    if (!page->cursor.empty()) {
      auto before = ParseIdParam(page->cursor, "cursor");
      if (!before) return SendError(res, before.error());
      filter->before = *before;
    }
    filter->limit = page->limit + 1;  // one more than the page: whether a next page exists
    // The kept texts hold every job's environment: only an admin gets them as they are.
    if (page->fields.empty() && caller.IsAdmin()) return SendJobList(res, cluster, *filter, page->limit);
    auto list = cluster.ListJobs(*filter);
    json out = json::object();
    if (list.size() > page->limit) {
      list.erase(list.begin());  // the oldest: it starts the next page
      out["next_cursor"] = std::to_string(list.front().id);
    }
    json jobs = json::array();
    auto usage = cluster.RunningTaskUsage();
    int64_t now = NowUnixMs();
    for (const auto& j : list) {
      auto u = usage.find(j.id);
      api::JobStatus view = JobStatusAt(j, now, u != usage.end() ? &u->second : nullptr);
      if (j.state == api::JobState::kRunning) view.progress_eta = cluster.progress().Eta(j.id, j.attempt);
      json status = api::ToJson(view);
      HideSecretsUnlessOwner(status, caller);
      jobs.push_back(Project(std::move(status), page->fields, "id"));
    }
    out["jobs"] = std::move(jobs);
    SendJson(res, out);
  });

  router.Get(api::routes::kJobPattern, Access::kViewer, [&](const Caller& caller, const httplib::Request& req,
                                                            httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());
    if (!id) return SendError(res, id.error());
    auto job = cluster.GetJob(*id);
    Reply(res, job, [&](const api::Job& j) {
      auto usage = cluster.RunningTaskUsage();
      auto u = usage.find(j.id);
      api::JobStatus view = JobStatusAt(j, NowUnixMs(), u != usage.end() ? &u->second : nullptr);
      if (j.state == api::JobState::kRunning) view.progress_eta = cluster.progress().Eta(j.id, j.attempt);
      json out = api::ToJson(view);
      if (auto p = cluster.progress().Latest(j.id)) out["progress"] = api::ToJson(*p);
      if (j.spec.is_array()) {
        out["array_summary"] = cluster.ArraySummary(j.id);  // elements by state
        // Which ones failed, as an index set: what to run again.
        if (std::string failed = cluster.FailedArrayIndices(j.id); !failed.empty()) out["array_failed"] = failed;
      }
      HideSecretsUnlessOwner(out, caller);
      return out;
    });
  }, JobScope::kOwnJob);

  router.Post(api::routes::kJobCancelPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                 httplib::Response& res) {
    auto ref = api::ParseJobRef(req.matches[1].str(), "job id");
    if (!ref) return SendError(res, ref.error());
    // An element belongs to its array's owner; one not yet started exists only in the array.
    if (auto mine = CheckOwner(cluster, caller, ref->job, "cancel"); !mine) return SendError(res, mine.error());
    // {"tasks": "3-5,7"} on an array: those elements, as Slurm's scancel 12_[3-5,7]. Each
    // goes on its own; the reply is the array with the indices cancelled and, per index
    // that was not, why ("element 12_4 (job 17) has already ended (SUCCEEDED)").
    if (!ref->is_element() && !req.body.empty()) {
      auto body = BodyJson(req);
      if (!body) return SendError(res, body.error());
      auto tasks = [&]() -> Result<std::optional<api::ArrayIndexSet>> {
        auto r = COHORT_TRY(ObjectReader::Open(*body));
        if (!r.Has("tasks")) {
          COHORT_TRY_VOID(r.Finish());
          return std::nullopt;
        }
        const std::string text = COHORT_TRY(r.String("tasks", std::nullopt, 4096));
        COHORT_TRY_VOID(r.Finish());
        return COHORT_TRY(api::ArrayIndexSet::Parse(text, "tasks"));
      }();
      if (!tasks) return SendError(res, tasks.error());
      if (*tasks) {
        auto array = cluster.GetJob(ref->job);
        if (!array) return SendError(res, array.error());
        if (!array->spec.is_array()) {
          return SendError(res, Errorf(ErrorCode::kInvalidArgument,
                                       "tasks: job {} is not a job array, so it has no elements to cancel", ref->job)
                                    .error());
        }
        // The indices not yet made into elements first: cancelling a running element lets
        // the array make its next one, which must not be one of these.
        std::vector<int64_t> unmade, made;
        for (const api::ArrayRange& r : (*tasks)->ranges()) {
          for (int64_t t = r.first; t <= r.last; t += r.step) {
            (cluster.ResolveJob(api::JobRef{ref->job, t}) ? made : unmade).push_back(t);
          }
        }
        api::ArrayIndexSet done;
        json failed = json::array();
        for (const auto* list : {&unmade, &made}) {
          for (int64_t t : *list) {
            auto e = cluster.CancelArrayTask(ref->job, t);
            if (e) {
              done.Add(t);
            } else if (e.error().code == ErrorCode::kNotFound || e.error().code == ErrorCode::kFailedPrecondition) {
              failed.push_back({{"task", t}, {"error", e.error().message}});  // ended, or no such index
            } else {
              return SendError(res, e.error());  // the store failed: stop here
            }
          }
        }
        auto after = cluster.GetJob(ref->job);
        if (!after) return SendError(res, after.error());
        json out = api::ToJson(*after);
        out["cancelled_tasks"] = done.ToString();
        out["not_cancelled"] = std::move(failed);
        return SendJson(res, out);
      }
    }
    auto job = ref->is_element() ? cluster.CancelArrayTask(ref->job, ref->task) : cluster.Cancel(ref->job);
    Reply(res, job, [](const api::Job& j) { return api::ToJson(j); });
  });
}

}  // namespace cohort::head
