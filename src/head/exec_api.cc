// /v1/jobs/{id}/exec: exec sessions beside a running task (api/exec.h), relayed to the
// agent of the task's node; /v1/jobs/{id}/steps: a step of an allocation (api/step.h), one
// such session on each of its tasks, recorded with the job (core/steps.h) as is an exec
// into an allocation, and each task's exit code when its output's end is relayed. The head authorizes (the job's owner or an admin; viewers and
// job tokens cannot), checks the job runs and the rank exists, and presents its node
// credential to the agent, which alone runs the command (agent/exec_session.h). The head
// keeps no session state: each call names the task (rank, attempt) again, and the agent
// checks that the session belongs to it.
#include "api/exec.h"
#include "api/step.h"
#include "head/routes.h"

namespace cohort::head {
namespace {

// Where rank `rank` of attempt `attempt` of job `id` runs, and a client of its agent
// that waits up to `timeout`; errors name the rank and the node.
struct AgentCall {
  std::string node;
  HttpClient client;
};

Result<AgentCall> AgentOfTask(const Router& router, Cluster& cluster, api::JobId id, int attempt, int rank,
                              Millis timeout) {
  auto loc = COHORT_TRY(cluster.LocateLog(id, attempt, rank));
  if (loc.task_finished) {
    return Errorf(ErrorCode::kFailedPrecondition, "rank {} of job {} (attempt {}) has ended: cannot exec", rank, id,
                  attempt);
  }
  if (loc.node_down) {
    return Errorf(ErrorCode::kUnavailable, "rank {} of job {} runs on node {}, which is down", rank, id, loc.node);
  }
  return AgentCall{loc.node, router.AgentClient(loc.node, loc.agent_url, timeout)};
}

// The job `req`'s path names, after checking that `caller` may exec into it.
Result<api::JobId> ExecJob(Cluster& cluster, const Caller& caller, const httplib::Request& req) {
  auto id = COHORT_TRY(JobIdOfPath(cluster, req.matches[1].str()));
  COHORT_TRY_VOID(CheckOwner(cluster, caller, id, "exec into"));
  return id;
}

Error Unreachable(const AgentCall& call, const Error& e) {
  if (e.code != ErrorCode::kUnavailable) return e;
  return Error{ErrorCode::kUnavailable, fmt::format("the agent of node {} does not answer: {}", call.node, e.message)};
}

std::vector<std::pair<std::string, std::string>> TaskQuery(api::JobId id, int64_t attempt, int64_t rank) {
  return {{"job", std::to_string(id)}, {"attempt", std::to_string(attempt)}, {"rank", std::to_string(rank)}};
}

struct StartedSession {
  std::string node;
  std::string session;
};

// Starts `exec` beside rank `rank` of attempt `attempt` of job `id` through its agent.
Result<StartedSession> StartSession(const Router& router, Cluster& cluster, api::JobId id, int attempt, int rank,
                                    const api::ExecRequest& exec) {
  auto call = COHORT_TRY(AgentOfTask(router, cluster, id, attempt, rank, Millis(10'000)));
  auto started =
      call.client.Post(api::routes::WithQuery(api::routes::kAgentExec, TaskQuery(id, attempt, rank)), api::ToJson(exec));
  if (!started) return std::unexpected(Unreachable(call, started.error()));
  if (!started->is_object() || !started->contains("session") || !(*started)["session"].is_string()) {
    return Errorf(ErrorCode::kInternal, "the agent of node {} sent a malformed exec reply", call.node);
  }
  return StartedSession{call.node, (*started)["session"].get<std::string>()};
}

// Ends a session started for a step that could not start whole (best effort: the agent
// also ends it after a minute unread).
void CloseSession(const Router& router, Cluster& cluster, api::JobId id, int attempt, int rank,
                  const std::string& session) {
  auto call = AgentOfTask(router, cluster, id, attempt, rank, Millis(5'000));
  if (!call) return;
  api::ExecInput close;
  close.close = true;
  (void)call->client.Post(
      api::routes::WithQuery(api::routes::AgentExecInput(session), TaskQuery(id, attempt, rank)), api::ToJson(close));
}

}  // namespace

void RegisterExecRoutes(Router& router, Cluster& cluster) {
  // POST api::StepRequest: {"step", "job", "attempt", "sessions": [{"rank", "node", "session"}]}.
  router.Post(api::routes::kJobStepsPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                httplib::Response& res) {
    auto id = ExecJob(cluster, caller, req);
    if (!id) return SendError(res, id.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto step_req = api::StepRequestFromJson(*body);
    if (!step_req) return SendError(res, step_req.error());
    auto job = cluster.GetJob(*id);
    if (!job) return SendError(res, job.error());
    auto ranks = api::PlanStep(*job, *step_req);
    if (!ranks) return SendError(res, ranks.error());
    api::ExecRequest exec;
    exec.command = step_req->command;
    api::StepRecord step;
    step.command = step_req->command;
    for (int rank : *ranks) {
      auto started = StartSession(router, cluster, *id, job->attempt, rank, exec);
      if (!started) {
        for (const auto& t : step.tasks) CloseSession(router, cluster, *id, job->attempt, t.rank, t.session);
        return SendError(res, started.error());
      }
      step.tasks.push_back({rank, started->node, started->session, std::nullopt});
    }
    auto recorded = cluster.AddStep(*id, step);
    if (!recorded) {
      for (const auto& t : step.tasks) CloseSession(router, cluster, *id, job->attempt, t.rank, t.session);
      return SendError(res, recorded.error());
    }
    json sessions = json::array();
    for (const auto& t : recorded->tasks) sessions.push_back({{"rank", t.rank}, {"node", t.node}, {"session", t.session}});
    SendJson(res, json{{"step", recorded->id}, {"job", *id}, {"attempt", job->attempt}, {"sessions", sessions}});
  }, JobScope::kOwnJob);

  // POST ?rank=R, api::ExecRequest: {"session", "attempt", "rank", "node"}.
  router.Post(api::routes::kJobExecPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                               httplib::Response& res) {
    auto id = ExecJob(cluster, caller, req);
    if (!id) return SendError(res, id.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto exec = api::ExecRequestFromJson(*body, UnknownFields::kRefuse);
    if (!exec) return SendError(res, exec.error());
    auto job = cluster.GetJob(*id);
    if (!job) return SendError(res, job.error());
    if (job->spec.is_array()) {  // never runs itself: its elements do
      return SendError(res, Error{ErrorCode::kInvalidArgument,
                                  fmt::format("job {} is a job array ({}): exec into one of its elements, "
                                              "{}_INDEX as cohort queue lists them", *id, job->spec.array, *id)});
    }
    if (job->state != api::JobState::kRunning) {
      return SendError(res, Error{ErrorCode::kFailedPrecondition,
                                  fmt::format("job {} is {}: cannot exec", *id, api::JobStateName(job->state))});
    }
    auto rank = QueryIntParam(req, "rank", 0, 0, INT32_MAX);
    if (!rank) return SendError(res, rank.error());
    if (*rank >= job->world_size()) {
      return SendError(res, Error{ErrorCode::kInvalidArgument,
                                  fmt::format("rank: job {} has ranks 0 to {}, not {}", *id, job->world_size() - 1,
                                              *rank),
                                  "rank"});
    }
    auto started = StartSession(router, cluster, *id, job->attempt, static_cast<int>(*rank), *exec);
    if (!started) return SendError(res, started.error());
    if (job->spec.is_allocation()) {
      // An exec into an allocation is one of its steps, on one task.
      api::StepRecord step;
      step.command = exec->command;
      step.tasks.push_back({static_cast<int>(*rank), started->node, started->session, std::nullopt});
      if (auto recorded = cluster.AddStep(*id, std::move(step)); !recorded) {
        CloseSession(router, cluster, *id, job->attempt, static_cast<int>(*rank), started->session);
        return SendError(res, recorded.error());
      }
    }
    SendJson(res, json{{"session", started->session},
                       {"job", *id},
                       {"attempt", job->attempt},
                       {"rank", *rank},
                       {"node", started->node}});
  });

  // GET ?rank=&attempt=&offset=&wait_ms=: the session's output, as the agent sends it.
  router.Get(api::routes::kJobExecOutputPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                    httplib::Response& res) {
    auto id = ExecJob(cluster, caller, req);
    if (!id) return SendError(res, id.error());
    auto rank = QueryIntParam(req, "rank", std::nullopt, 0, INT32_MAX);
    auto attempt = QueryIntParam(req, "attempt", std::nullopt, 0, INT32_MAX);
    auto offset = QueryIntParam(req, "offset", 0, 0, INT64_MAX);
    auto wait = QueryIntParam(req, "wait_ms", 0, 0, api::kMaxExecWaitMs);
    for (auto* r : {&rank, &attempt, &offset, &wait}) {
      if (!*r) return SendError(res, r->error());
    }
    auto call = AgentOfTask(router, cluster, *id, static_cast<int>(*attempt), static_cast<int>(*rank),
                            Millis(*wait + 10'000));
    if (!call) return SendError(res, call.error());
    // The agent keeps at most a few MiB of unread output; a node that sends more is not read.
    call->client.set_max_response_bytes(16 << 20);
    auto query = TaskQuery(*id, *attempt, *rank);
    query.insert(query.end(), {{"offset", std::to_string(*offset)}, {"wait_ms", std::to_string(*wait)}});
    auto r = call->client.GetRaw(
        api::routes::WithQuery(api::routes::AgentExecOutput(req.matches[2].str()), query));
    if (!r) return SendError(res, Unreachable(*call, r.error()));
    if (r->status != 200) return SendError(res, ErrorFromResponse(r->status, r->body));
    for (const char* h : {"X-Cohort-Next-Offset", "X-Cohort-Done", "X-Cohort-Exit-Code"}) {
      if (auto it = r->headers.find(h); it != r->headers.end()) res.set_header(h, it->second);
    }
    // The end of a step's task: its exit code goes into the step's record (a no-op for a
    // session that belongs to no step).
    auto done = r->headers.find("X-Cohort-Done");
    auto code = r->headers.find("X-Cohort-Exit-Code");
    if (done != r->headers.end() && done->second == "1" && code != r->headers.end()) {
      if (auto parsed = ParseIntParam(code->second, "X-Cohort-Exit-Code", 0, 255)) {
        if (auto ok = cluster.RecordStepExit(*id, req.matches[2].str(), static_cast<int>(*parsed)); !ok) {
          return SendError(res, ok.error());
        }
      }
    }
    res.set_content(std::move(r->body), "application/octet-stream");
  }, JobScope::kOwnJob);

  // POST ?rank=&attempt=, api::ExecInput: {"ok": true}.
  router.Post(api::routes::kJobExecInputPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                                    httplib::Response& res) {
    auto id = ExecJob(cluster, caller, req);
    if (!id) return SendError(res, id.error());
    auto rank = QueryIntParam(req, "rank", std::nullopt, 0, INT32_MAX);
    auto attempt = QueryIntParam(req, "attempt", std::nullopt, 0, INT32_MAX);
    for (auto* r : {&rank, &attempt}) {
      if (!*r) return SendError(res, r->error());
    }
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto in = api::ExecInputFromJson(*body, UnknownFields::kRefuse);
    if (!in) return SendError(res, in.error());
    auto call = AgentOfTask(router, cluster, *id, static_cast<int>(*attempt), static_cast<int>(*rank),
                            Millis(10'000));
    if (!call) return SendError(res, call.error());
    auto r = call->client.Post(
        api::routes::WithQuery(api::routes::AgentExecInput(req.matches[2].str()), TaskQuery(*id, *attempt, *rank)),
        api::ToJson(*in));
    if (!r) return SendError(res, Unreachable(*call, r.error()));
    SendJson(res, json{{"ok", true}});
  }, JobScope::kOwnJob);
}

}  // namespace cohort::head
