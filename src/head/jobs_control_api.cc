// /v1/jobs/{id}/hold, /release, /update: job control of a PENDING job (core/job_control.h);
// update also changes a RUNNING job's time limit (users: shorter only) and name.
// A user acts on their own jobs, an admin on any (CheckOwner); a user may release only a
// hold they made, so an admin's hold stays until an admin releases it (as Slurm's).
// /v1/jobs/{id}/requeue: a running or ended job back to PENDING (core::Requeue), by its
// owner, an admin, or the job itself (its token).
// /v1/jobs/{id}/end: the holder of an allocation (cohort alloc) ends it with its command's
// exit code or the signal that stopped it (core/steps.h).
#include "api/job_array.h"
#include "head/routes.h"

namespace cohort::head {
namespace {

// The update's fields from a JSON body: {"time_limit_s", "priority", "name", "array_throttle", "begin_ms"}, each
// optional, unknown ones refused (the error names the field).
Result<core::JobUpdate> UpdateFromJson(const json& body) {
  auto r = COHORT_TRY(ObjectReader::Open(body));
  core::JobUpdate u;
  if (r.Raw("time_limit_s")) u.time_limit_s = COHORT_TRY(r.Int("time_limit_s", std::nullopt, 0, api::kMaxTimeLimitS));
  if (r.Raw("priority")) {
    u.priority = static_cast<int>(COHORT_TRY(r.Int("priority", std::nullopt, -api::kMaxPriority, api::kMaxPriority)));
  }
  if (r.Raw("name")) u.name = COHORT_TRY(r.String("name", std::nullopt, 128));
  if (r.Raw("array_throttle")) {
    u.array_throttle = COHORT_TRY(r.Int("array_throttle", std::nullopt, 0, api::kMaxArrayElements));
  }
  if (r.Raw("begin_ms")) u.begin_ms = COHORT_TRY(r.Int("begin_ms", std::nullopt, 0, api::kMaxBeginMs));
  COHORT_TRY_VOID(r.Finish());
  return u;
}

}  // namespace

void RegisterJobControlRoutes(Router& router, Cluster& cluster) {
  // POST {"exit_code": 0-255, "signal": 0-64}: the allocation as ended.
  router.Post(api::routes::kJobEndPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                              httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "end"); !mine) return SendError(res, mine.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto end = [&]() -> Result<std::pair<int, int>> {
      auto r = COHORT_TRY(ObjectReader::Open(*body));
      const int code = static_cast<int>(COHORT_TRY(r.Int("exit_code", std::nullopt, 0, 255)));
      const int signal = static_cast<int>(COHORT_TRY(r.Int("signal", 0, 0, 64)));
      COHORT_TRY_VOID(r.Finish());
      return std::make_pair(code, signal);
    }();
    if (!end) return SendError(res, end.error());
    Reply(res, cluster.EndAllocation(*id, end->first, end->second), [](const api::Job& j) { return api::ToJson(j); });
  });

  router.Post(api::routes::kJobHoldPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                               httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());  // "12", or "12_7": an element
    if (!id) return SendError(res, id.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "hold"); !mine) return SendError(res, mine.error());
    Reply(res, cluster.Hold(*id, HolderName(caller)),
          [](const api::Job& j) { return api::ToJson(j); });
  });

  router.Post(api::routes::kJobReleasePattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                  httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());  // "12", or "12_7": an element
    if (!id) return SendError(res, id.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "release"); !mine) return SendError(res, mine.error());
    if (!caller.IsAdmin()) {
      auto job = cluster.GetJob(*id);
      if (!job) return SendError(res, job.error());
      if (job->held && job->held_by != caller.user) {
        return SendError(res, Error{ErrorCode::kPermissionDenied,
                                    fmt::format("{} may not release job {}: it was held by {} (only they or an "
                                                "admin may release it)",
                                                caller.Describe(), *id, job->held_by)});
      }
    }
    Reply(res, cluster.Release(*id), [](const api::Job& j) { return api::ToJson(j); });
  });

  // POST {"hold": bool} (optional): requeue a running or ended job, as scontrol requeue
  // (requeuehold with "hold": true). A job's own token may requeue it: a task that got its
  // checkpoint signal before the time limit requeues itself (cohort requeue $COHORT_JOB_ID).
  router.Post(api::routes::kJobRequeuePattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                  httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());  // "12", or "12_7": an element
    if (!id) return SendError(res, id.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "requeue"); !mine) return SendError(res, mine.error());
    auto hold = [&]() -> Result<bool> {
      if (req.body.empty()) return false;
      auto body = COHORT_TRY(BodyJson(req));
      auto r = COHORT_TRY(ObjectReader::Open(body));
      const bool h = COHORT_TRY(r.Bool("hold", false));
      COHORT_TRY_VOID(r.Finish());
      return h;
    }();
    if (!hold) return SendError(res, hold.error());
    Reply(res, cluster.Requeue(*id, HolderName(caller), *hold),
          [](const api::Job& j) { return api::ToJson(j); });
  }, JobScope::kOwnJob);

  router.Post(api::routes::kJobUpdatePattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                 httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());  // "12", or "12_7": an element
    if (!id) return SendError(res, id.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto update = UpdateFromJson(*body);
    if (!update) return SendError(res, update.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "update"); !mine) return SendError(res, mine.error());
    if (update->priority) {
      if (auto allowed = CheckPriority(caller, *update->priority); !allowed) return SendError(res, allowed.error());
    }
    // A running job's time limit: a user may shorten it, only an admin lengthen it (as
    // Slurm's operators alone may raise a running job's TimeLimit); 0 is unlimited.
    if (update->time_limit_s && !caller.IsAdmin()) {
      auto job = cluster.GetJob(*id);
      if (!job) return SendError(res, job.error());
      const int64_t now_limit = job->spec.time_limit_s, asked = *update->time_limit_s;
      const bool longer = now_limit != 0 && (asked == 0 || asked > now_limit);
      if (job->state == api::JobState::kRunning && longer) {
        return SendError(res, Error(ErrorCode::kPermissionDenied,
                                    fmt::format("time_limit_s: {} may only shorten running job {}'s time limit ({} s "
                                                "now, {} asked; 0 is unlimited); an admin may lengthen it",
                                                caller.Describe(), *id, now_limit, asked),
                                    "time_limit_s"));
      }
    }
    Reply(res, cluster.Update(*id, *update), [](const api::Job& j) { return api::ToJson(j); });
  });
}

}  // namespace cohort::head
