// /v1/jobs/{id}/logs: one task's output, read from the agent that ran it.
//
// The body is the raw bytes from `offset`; headers carry the position so a follower can
// poll: X-Cohort-Next-Offset, X-Cohort-Size, X-Cohort-Done ("1" when the task has ended
// and everything was read), X-Cohort-Attempt, X-Cohort-Node.
#include <charconv>

#include "head/routes.h"

namespace cohort::head {
namespace {

Result<int64_t> IntParam(const httplib::Request& req, const char* name, int64_t def, int64_t min,
                         int64_t max) {
  if (!req.has_param(name)) return def;
  std::string s = req.get_param_value(name);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < min || v > max) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}: must be an integer from {} to {}, got '{}'", name, min, max, s), name);
  }
  return v;
}

}  // namespace

void RegisterLogRoutes(httplib::Server& server, Cluster& cluster) {
  server.Get(R"(/v1/jobs/([^/]+)/logs)", [&](const httplib::Request& req, httplib::Response& res) {
    auto id = ParseIdParam(req.matches[1].str(), "job id");
    if (!id) return SendError(res, id.error());
    auto job = cluster.GetJob(*id);
    if (!job) return SendError(res, job.error());
    if (job->history.empty()) {
      return SendError(res, Error{ErrorCode::kFailedPrecondition,
                                  fmt::format("job {} has not started yet: {}", *id, job->reason)});
    }
    auto rank = IntParam(req, "rank", 0, 0, INT32_MAX);
    auto attempt = IntParam(req, "attempt", job->history.back().attempt, 0, INT32_MAX);
    auto offset = IntParam(req, "offset", 0, 0, INT64_MAX);
    auto limit = IntParam(req, "limit", 1 << 20, 1, 16 << 20);
    for (auto* r : {&rank, &attempt, &offset, &limit}) {
      if (!*r) return SendError(res, r->error());
    }
    auto loc = cluster.LocateLog(*id, static_cast<int>(*attempt), static_cast<int>(*rank));
    if (!loc) return SendError(res, loc.error());
    if (loc->node_down) {
      return SendError(res, Error{ErrorCode::kUnavailable,
                                  fmt::format("the log of rank {} is on node {}, which is down", *rank, loc->node)});
    }
    HttpClient agent(loc->agent_url, Millis(5000));
    auto r = agent.GetRaw(fmt::format("/v1/logs?job={}&attempt={}&rank={}&offset={}&limit={}", *id,
                                      *attempt, *rank, *offset, *limit));
    if (!r) {
      return SendError(res, Error{ErrorCode::kUnavailable,
                                  fmt::format("cannot read the log of rank {} from node {}: its agent at {} does not answer",
                                              *rank, loc->node, loc->agent_url)});
    }
    if (r->status != 200) return SendError(res, ErrorFromResponse(r->status, r->body));
    auto header_int = [&](const char* name) -> int64_t {
      int64_t v = 0;
      const std::string& s = r->headers[name];
      std::from_chars(s.data(), s.data() + s.size(), v);
      return v;
    };
    int64_t next = header_int("X-Cohort-Next-Offset");
    int64_t size = header_int("X-Cohort-Size");
    bool done = loc->task_finished && next >= size;
    res.set_header("X-Cohort-Next-Offset", std::to_string(next));
    res.set_header("X-Cohort-Size", std::to_string(size));
    res.set_header("X-Cohort-Done", done ? "1" : "0");
    res.set_header("X-Cohort-Attempt", std::to_string(*attempt));
    res.set_header("X-Cohort-Node", loc->node);
    res.set_content(std::move(r->body), "application/octet-stream");
  });
}

}  // namespace cohort::head
