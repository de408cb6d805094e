// Routes: every HTTP path of the head's API and of the agent's API, in one place.
//
// Each resource has a constant (a fixed path) or a builder (a path with segments in it),
// and where a server registers a path with segments, a k...Pattern: the cpp-httplib
// regex it registers, capturing the segments in order. Builders percent-encode the names
// they are given, so callers pass raw names; job ids are api::JobId (int64_t).
// routes_test.cc checks that each builder's output matches its pattern. Pure functions;
// any thread may call them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::api::routes {

// Percent-encodes everything but [A-Za-z0-9-_.~] (RFC 3986 unreserved characters), for a
// path segment or a query value.
std::string UrlEncode(std::string_view s);

// `path` followed by "?k=v&k=v" with each value percent-encoded; `path` alone when
// `params` is empty. Keys are written as given (callers pass literal names).
std::string WithQuery(std::string path, const std::vector<std::pair<std::string, std::string>>& params);

// ---- Served by both the head and the agent.
inline constexpr char kHealth[] = "/v1/health";  // GET: liveness and identity
// GET (public): the head's certificate authority, PEM; `cohort login --ca-fingerprint`
// fetches it and trusts it only if its SHA-256 is the one given.
inline constexpr char kCa[] = "/v1/ca";
inline constexpr char kMetrics[] = "/metrics";   // GET: Prometheus text format

// ---- The head's API.
// Jobs: POST submits, GET lists (?state=&user=&since=&until=&limit=).
inline constexpr char kJobs[] = "/v1/jobs";
std::string Job(int64_t id);  // GET: one job in detail
inline constexpr char kJobPattern[] = R"(/v1/jobs/([^/]+))";
std::string JobCancel(int64_t id);  // POST
// The same two for a job written as users write it: "12", or "12_7" (element 7 of array 12).
std::string JobByRef(std::string_view ref);
std::string JobCancelByRef(std::string_view ref);
inline constexpr char kJobCancelPattern[] = R"(/v1/jobs/([^/]+)/cancel)";
// Job control of a PENDING job (POST): hold, release, update {time_limit_s, priority, name}.
std::string JobHold(int64_t id);
inline constexpr char kJobHoldPattern[] = R"(/v1/jobs/([^/]+)/hold)";
std::string JobRelease(int64_t id);
inline constexpr char kJobReleasePattern[] = R"(/v1/jobs/([^/]+)/release)";
std::string JobRequeue(int64_t id);
inline constexpr char kJobRequeuePattern[] = R"(/v1/jobs/([^/]+)/requeue)";
std::string JobUpdate(int64_t id);
inline constexpr char kJobUpdatePattern[] = R"(/v1/jobs/([^/]+)/update)";
std::string JobLogs(int64_t id);  // GET ?rank=&attempt=&offset=&limit=
inline constexpr char kJobLogsPattern[] = R"(/v1/jobs/([^/]+)/logs)";
std::string JobProgress(int64_t id);  // GET ?limit=
// GET: a sweep's elements with their values and last reported loss, best first (api/sweep.h).
std::string JobSweep(int64_t id);
inline constexpr char kJobSweepPattern[] = R"(/v1/jobs/([^/]+)/sweep)";
inline constexpr char kJobProgressPattern[] = R"(/v1/jobs/([^/]+)/progress)";
// Exec sessions beside a running task (api/exec.h): POST starts one (?rank=), then GET its
// output and POST its input (?rank=&attempt=, and for output &offset=&wait_ms=).
std::string JobExec(int64_t id);
inline constexpr char kJobExecPattern[] = R"(/v1/jobs/([^/]+)/exec)";
std::string JobExecOutput(int64_t id, std::string_view session);
inline constexpr char kJobExecOutputPattern[] = R"(/v1/jobs/([^/]+)/exec/([0-9a-f]+)/output)";
std::string JobExecInput(int64_t id, std::string_view session);
inline constexpr char kJobExecInputPattern[] = R"(/v1/jobs/([^/]+)/exec/([0-9a-f]+)/input)";
// Steps of an allocation (api/step.h): POST runs a command on its tasks as exec sessions.
std::string JobSteps(int64_t id);
inline constexpr char kJobStepsPattern[] = R"(/v1/jobs/([^/]+)/steps)";
// POST {"exit_code", "signal"}: the holder of an allocation (cohort alloc) ends it.
std::string JobEnd(int64_t id);
inline constexpr char kJobEndPattern[] = R"(/v1/jobs/([^/]+)/end)";

// Nodes: GET lists.
inline constexpr char kNodes[] = "/v1/nodes";
std::string Node(std::string_view name);  // GET: one node; DELETE ?force=: remove it (admins)
inline constexpr char kNodePattern[] = R"(/v1/nodes/([^/]+))";
std::string NodeDrain(std::string_view name);  // POST {"now": bool}
inline constexpr char kNodeDrainPattern[] = R"(/v1/nodes/([^/]+)/drain)";
// The node's image cache (agent/image_cache.h): GET lists it; POST .../remove {"image"}
// removes one (admin); POST .../prune {"unused_for_s"} removes the unused (admin).
std::string NodeImages(std::string_view name);
inline constexpr char kNodeImagesPattern[] = R"(/v1/nodes/([^/]+)/images)";
inline constexpr char kNodeImagesRemovePattern[] = R"(/v1/nodes/([^/]+)/images/remove)";
inline constexpr char kNodeImagesPrunePattern[] = R"(/v1/nodes/([^/]+)/images/prune)";
std::string NodeResume(std::string_view name);
std::string Service(std::string_view name);
std::string ServiceScale(std::string_view name);  // POST
inline constexpr char kNodeResumePattern[] = R"(/v1/nodes/([^/]+)/resume)";

// The agent protocol (agent → head).
inline constexpr char kAgentRegister[] = "/v1/agents/register";  // POST Registration
std::string AgentHeartbeat(std::string_view name);               // POST Heartbeat
inline constexpr char kAgentHeartbeatPattern[] = R"(/v1/agents/([^/]+)/heartbeat)";
// POST {"csr": PEM} with the node's current certificate: a new one (TLS heads only).
std::string AgentCertificate(std::string_view name);
inline constexpr char kAgentCertificatePattern[] = R"(/v1/agents/([^/]+)/certificate)";

// A job's rendezvous store (COHORT_RENDEZVOUS is the head URL + Rendezvous(token)); its
// clients add "/keys/{key}" (PUT, GET) and "/add/{key}" (POST) themselves.
std::string Rendezvous(std::string_view token);
inline constexpr char kRendezvousKeyPattern[] = R"(/v1/rendezvous/([^/]+)/keys/([\s\S]+))";
inline constexpr char kRendezvousAddPattern[] = R"(/v1/rendezvous/([^/]+)/add/([\s\S]+))";

// Progress reports from a job's tasks (COHORT_REPORT is the head URL + Report(token)).
std::string Report(std::string_view token);  // POST
inline constexpr char kReportPattern[] = R"(/v1/report/([^/]+))";

// API tokens (admin only): GET lists, POST {"user", "role", "expires_s", "description"}
// makes one (the reply holds the token, shown this once).
inline constexpr char kTokens[] = "/v1/tokens";
inline constexpr char kWhoAmI[] = "/v1/whoami";  // GET: the caller's user, role and token id
std::string TokenRevoke(std::string_view id);  // POST
inline constexpr char kTokenRevokePattern[] = R"(/v1/tokens/([^/]+)/revoke)";

// The audit log (admin only): GET ?since=&until=&user=&limit=&cursor= (head/audit.h).
inline constexpr char kAudit[] = "/v1/audit";

// Teams (api/team.h): GET lists, POST creates (admins). One team: GET, PUT changes it and
// DELETE removes it (admins).
inline constexpr char kTeams[] = "/v1/teams";
std::string Team(std::string_view name);
inline constexpr char kTeamPattern[] = R"(/v1/teams/([^/]+))";
inline constexpr char kShares[] = "/v1/shares";          // GET: each team's share, usage, factor
inline constexpr char kPriorities[] = "/v1/priorities";  // GET: pending jobs' priority factors
// Inference services (api/service.h): POST a ServiceSpec, GET the list; GET, DELETE one;
// POST {"replicas": N} to scale. The gateway's OpenAI-compatible routes (head/gateway.h).
inline constexpr char kServices[] = "/v1/services";
inline constexpr char kServicePattern[] = R"(/v1/services/([^/]+))";
inline constexpr char kServiceScalePattern[] = R"(/v1/services/([^/]+)/scale)";
inline constexpr char kCompletions[] = "/v1/completions";
inline constexpr char kChatCompletions[] = "/v1/chat/completions";
inline constexpr char kModels[] = "/v1/models";

inline constexpr char kDashboard[] = "/v1/dashboard";  // GET ?recent=&queue=&points=
inline constexpr char kUsage[] = "/v1/usage";          // GET ?since=&until=&user=

// ---- The agent's API (head → agent, and tests).
inline constexpr char kAgentWake[] = "/v1/wake";  // POST: heartbeat now
inline constexpr char kAgentLogs[] = "/v1/logs";  // GET ?job=&attempt=&rank=&offset=&limit=
// POST, only with --simulated-gpus: inject an Xid on a simulated GPU.
inline constexpr char kAgentSimulateXid[] = "/v1/simulate/xid";
inline constexpr char kAgentImages[] = "/v1/images";               // GET: the image cache
inline constexpr char kAgentImagesRemove[] = "/v1/images/remove";  // POST {"image"}
inline constexpr char kAgentImagesPrune[] = "/v1/images/prune";    // POST {"unused_for_s"}
// Exec sessions (api/exec.h), each call with ?job=&attempt=&rank=: POST starts one, then
// GET its output (&offset=&wait_ms=) and POST its input.
inline constexpr char kAgentExec[] = "/v1/exec";
std::string AgentExecOutput(std::string_view session);
inline constexpr char kAgentExecOutputPattern[] = R"(/v1/exec/([0-9a-f]+)/output)";
std::string AgentExecInput(std::string_view session);
inline constexpr char kAgentExecInputPattern[] = R"(/v1/exec/([0-9a-f]+)/input)";

}  // namespace cohort::api::routes
