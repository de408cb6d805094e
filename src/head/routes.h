// HTTP routes of the head, one file per resource. Each Register* function installs its
// handlers on `server`; handlers call into `cluster` (thread-safe) and convert Results to
// JSON responses at the edge.
#pragma once

#include <httplib.h>

#include "common/http.h"
#include "head/cluster.h"

namespace cohort::head {

void RegisterJobRoutes(httplib::Server& server, Cluster& cluster);
void RegisterNodeRoutes(httplib::Server& server, Cluster& cluster);
void RegisterAgentRoutes(httplib::Server& server, Cluster& cluster);
void RegisterLogRoutes(httplib::Server& server, Cluster& cluster);
void RegisterRendezvousRoutes(httplib::Server& server, Cluster& cluster);
void RegisterProgressRoutes(httplib::Server& server, Cluster& cluster);
void RegisterMetricsRoutes(httplib::Server& server, Cluster& cluster);  // GET /metrics
void RegisterUsageRoutes(httplib::Server& server, Cluster& cluster);    // GET /v1/usage
void RegisterDashboardRoutes(httplib::Server& server, Cluster& cluster);
// The dashboard's static files (web/) at the root URL; register after the /v1 routes.
void RegisterWebRoutes(httplib::Server& server);
// Drops "br" from requests' Accept-Encoding, so that replies to browsers are gzipped:
// cpp-httplib compresses Brotli at quality 11, which takes seconds for a reply of a few
// MB (GET /v1/dashboard at 1,000 nodes: 5.1 s with br, 0.11 s with gzip, 0.10 s plain).
void PreferGzipOverBrotli(httplib::Server& server);

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

json ToJson(const NodeStatus& s);

}  // namespace cohort::head
