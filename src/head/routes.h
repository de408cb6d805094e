// HTTP routes of the head, one file per resource. Each Register* function installs its
// handlers through `router` (router.h: each route names the access it asks); handlers call into `cluster` (thread-safe) and convert Results to
// JSON responses at the edge. Paths and their patterns come from api/routes.h.
#pragma once

#include <httplib.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "api/routes.h"
#include "common/http.h"
#include "common/mutex.h"
#include "head/cluster.h"
#include "head/router.h"

namespace cohort::head {

void RegisterJobRoutes(Router& router, Cluster& cluster);
void RegisterJobControlRoutes(Router& router, Cluster& cluster);  // hold, release, update
void RegisterSweepRoutes(Router& router, Cluster& cluster);       // GET /v1/jobs/{id}/sweep
void RegisterImageRoutes(Router& router, Cluster& cluster);       // /v1/nodes/{name}/images
void RegisterNodeRoutes(Router& router, Cluster& cluster, TokenBook& tokens);
void RegisterAgentRoutes(Router& router, Cluster& cluster);
void RegisterLogRoutes(Router& router, Cluster& cluster);
void RegisterExecRoutes(Router& router, Cluster& cluster);  // /v1/jobs/{id}/exec (api/exec.h)
void RegisterRendezvousRoutes(Router& router, Cluster& cluster);
void RegisterProgressRoutes(Router& router, Cluster& cluster);
class AuditLog;
class Gateway;
// GET /metrics; with `gateway`, its families too.
void RegisterMetricsRoutes(Router& router, Cluster& cluster, const AuditLog& audit, const Gateway* gateway = nullptr);
void RegisterUsageRoutes(Router& router, Cluster& cluster);    // GET /v1/usage
void RegisterTeamRoutes(Router& router, Cluster& cluster);     // /v1/teams, /v1/shares, /v1/priorities
void RegisterTokenRoutes(Router& router, TokenBook& tokens);   // /v1/tokens
void RegisterAuditRoutes(Router& router, AuditLog& audit);      // GET /v1/audit
class DashboardSnapshots;
void RegisterDashboardRoutes(Router& router, DashboardSnapshots& snapshots);
// The dashboard's static files (web/) at the root URL; register after the /v1 routes.
void RegisterWebRoutes(Router& router);
class Services;
void RegisterServiceRoutes(Router& router, Services& services);  // /v1/services
// Drops "br" from requests' Accept-Encoding, so that replies to browsers are gzipped:
// cpp-httplib compresses Brotli at quality 11, which takes seconds for a reply of a few
// MB (GET /v1/dashboard at 1,000 nodes: 5.1 s with br, 0.11 s with gzip, 0.10 s plain).
void PreferGzipOverBrotli(httplib::Server& server);

// What a job's environment value reads as to a caller who may not see it (neither the
// job's owner nor an admin, and every caller of GET /v1/dashboard): the names stay.
inline constexpr char kHiddenEnvValue[] = "(hidden)";
// What a batch script (JobSpec::script) reads as to the same callers: still a script (its
// spec decodes), whose one line says why it is not there.
inline constexpr char kHiddenScript[] = "#! (hidden: a batch script is shown to its job's owner and admins)\n";

// The user a submitted job belongs to: the caller's own (a spec naming another user is
// refused unless the caller is an admin); with --insecure, the spec's.
Result<std::string> JobOwner(const Caller& caller, bool spec_names_user, const std::string& spec_user);
// OK if `caller` may give a job `priority`: anything from an admin (or with --insecure),
// at most 0 from a user, who may lower their jobs (to order them among themselves) but not
// raise them past everyone else's, which would outweigh fair share (as Slurm lets only
// operators raise a priority; users have --nice). kPermissionDenied naming the field.
Result<void> CheckPriority(const Caller& caller, int priority);

// Who a hold made by `caller` is recorded as (Job::held_by): the token's user, or "admin"
// against a head run with --insecure.
inline std::string HolderName(const Caller& caller) {
  return caller.kind == Caller::Kind::kInsecure ? "admin" : caller.user;
}
// OK if `caller` may act on job `id` (its owner, or an admin); kPermissionDenied naming
// `what` ("cancel") otherwise, kNotFound if there is no such job.
Result<void> CheckOwner(Cluster& cluster, const Caller& caller, api::JobId id, std::string_view what);
// The job a path's {id} names: "12", or "12_7" for element 7 of array 12 (its own job id;
// kNotFound saying why if it has not started). kInvalidArgument for anything else.
Result<api::JobId> JobIdOfPath(const Cluster& cluster, const std::string& text);

// Sends `r`'s value with `status`, or its error with the error's status.
inline void Reply(httplib::Response& res, const Result<json>& r, int status = 200) {
  if (r) {
    SendJson(res, *r, status);
  } else {
    SendError(res, r.error());
  }
}

// Sends to_json(value) with `status`, or the error.
template <typename T, typename F>
void Reply(httplib::Response& res, const Result<T>& r, F&& to_json, int status = 200) {
  if (r) {
    SendJson(res, to_json(*r), status);
  } else {
    SendError(res, r.error());
  }
}

// Parses the request body as JSON, naming the request in the error.
inline Result<json> BodyJson(const httplib::Request& req) {
  if (req.body.empty()) return MakeError(ErrorCode::kInvalidArgument, "request body is empty; expected a JSON object");
  return ParseJson(req.body, "request body");
}

// GET /v1/dashboard's query: how much of each list to include (dashboard_api.cc).
struct DashboardQuery {
  size_t recent = 20;
  size_t queue = 500;
  size_t points = 40;
};

// Serialized GET /v1/dashboard replies, one per query, rebuilt by one background thread
// while they are asked for (dashboard_api.cc says how often). The head server owns it:
// the constructor starts the thread; Stop (also run by the destructor) ends and joins it,
// and must run before `cluster` goes. Get is called from HTTP threads, also after Stop
// (each reply is then built afresh). Stop from one thread at a time, never the
// refresher's own.
class DashboardSnapshots {
 public:
  explicit DashboardSnapshots(Cluster& cluster);
  ~DashboardSnapshots();
  DashboardSnapshots(const DashboardSnapshots&) = delete;
  DashboardSnapshots& operator=(const DashboardSnapshots&) = delete;

  // The newest snapshot for `q`; the first request for a query waits for one build.
  std::shared_ptr<const std::string> Get(const DashboardQuery& q) EXCLUDES(mu_);
  void Stop() EXCLUDES(mu_);

 private:
  struct Entry {
    DashboardQuery query;
    std::shared_ptr<const std::string> body;
    int64_t last_request_ms = 0;
  };

  std::shared_ptr<const std::string> Build(const DashboardQuery& q);
  void Loop() EXCLUDES(mu_);

  Cluster& cluster_;
  Mutex mu_;
  CondVar cv_;
  std::map<std::string, Entry> entries_ GUARDED_BY(mu_);  // by DashboardQuery, as "recent/queue/points"
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // the refresher; joined by Stop
};

}  // namespace cohort::head
