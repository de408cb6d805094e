// /v1/jobs/{id}/logs: one task's output, read from the agent that ran it.
//
// The body is the raw bytes from `offset`; headers carry the position so a follower can
// poll: X-Cohort-Next-Offset, X-Cohort-Size, X-Cohort-Done ("1" when the task has ended
// and everything was read), X-Cohort-Attempt, X-Cohort-Node.
#include "head/routes.h"

namespace cohort::head {
void RegisterLogRoutes(Router& router, Cluster& cluster) {
  router.Get(api::routes::kJobLogsPattern, Access::kUser, [&](const Caller& caller, const httplib::Request& req,
                                                              httplib::Response& res) {
    auto id = JobIdOfPath(cluster, req.matches[1].str());
    if (!id) return SendError(res, id.error());
    if (auto mine = CheckOwner(cluster, caller, *id, "read the logs of"); !mine) return SendError(res, mine.error());
    auto job = cluster.GetJob(*id);
    if (!job) return SendError(res, job.error());
    if (job->history.empty()) {
      return SendError(res, Error{ErrorCode::kFailedPrecondition,
                                  fmt::format("job {} has not started yet: {}", *id, job->reason)});
    }
    auto rank = QueryIntParam(req, "rank", 0, 0, INT32_MAX);
    auto attempt = QueryIntParam(req, "attempt", job->history.back().attempt, 0, INT32_MAX);
    auto offset = QueryIntParam(req, "offset", 0, 0, INT64_MAX);
    auto limit = QueryIntParam(req, "limit", 1 << 20, 1, 16 << 20);
    for (auto* r : {&rank, &attempt, &offset, &limit}) {
      if (!*r) return SendError(res, r->error());
    }
    auto loc = cluster.LocateLog(*id, static_cast<int>(*attempt), static_cast<int>(*rank));
    if (!loc) return SendError(res, loc.error());
    if (loc->node_down) {
      return SendError(res, Error{ErrorCode::kUnavailable,
                                  fmt::format("the log of rank {} is on node {}, which is down", *rank, loc->node)});
    }
    HttpClient agent = router.AgentClient(loc->node, loc->agent_url, Millis(5000));
    // What was asked for and a little more: a node that answers with more is not read.
    agent.set_max_response_bytes(static_cast<size_t>(*limit) + (64 << 10));
    auto r = agent.GetRaw(api::routes::WithQuery(api::routes::kAgentLogs, {{"job", std::to_string(*id)},
                                                                       {"attempt", std::to_string(*attempt)},
                                                                       {"rank", std::to_string(*rank)},
                                                                       {"offset", std::to_string(*offset)},
                                                                       {"limit", std::to_string(*limit)}}));
    if (!r && r.error().code == ErrorCode::kResourceExhausted) {
      return SendError(res, Error{ErrorCode::kInternal, fmt::format("the agent of node {} sent more than the {} bytes "
                                                                    "asked for: {}",
                                                                    loc->node, *limit, r.error().message)});
    }
    if (!r) {
      return SendError(res, Error{ErrorCode::kUnavailable,
                                  fmt::format("cannot read the log of rank {} from node {}: its agent at {} does not answer ({})",
                                              *rank, loc->node, loc->agent_url, r.error().message)});
    }
    if (r->status != 200) return SendError(res, ErrorFromResponse(r->status, r->body));
    auto next = ParseIntParam(r->headers["X-Cohort-Next-Offset"], "X-Cohort-Next-Offset", 0, INT64_MAX);
    auto size = ParseIntParam(r->headers["X-Cohort-Size"], "X-Cohort-Size", 0, INT64_MAX);
    if (!next || !size) {
      return SendError(res, Error{ErrorCode::kInternal, fmt::format("the agent of node {} sent a malformed log reply", loc->node)});
    }
    bool done = loc->task_finished && *next >= *size;
    res.set_header("X-Cohort-Next-Offset", std::to_string(*next));
    res.set_header("X-Cohort-Size", std::to_string(*size));
    res.set_header("X-Cohort-Done", done ? "1" : "0");
    res.set_header("X-Cohort-Attempt", std::to_string(*attempt));
    res.set_header("X-Cohort-Node", loc->node);
    res.set_content(std::move(r->body), "application/octet-stream");
  }, JobScope::kOwnJob);
}

}  // namespace cohort::head
