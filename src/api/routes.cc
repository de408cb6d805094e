// Path builders of routes.h.
#include "api/routes.h"

#include <cctype>
#include <string>

namespace cohort::api::routes {
namespace {

std::string Path(std::string_view prefix, std::string_view segment, std::string_view suffix = {}) {
  std::string out(prefix);
  out += UrlEncode(segment);
  out += suffix;
  return out;
}

}  // namespace

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::string WithQuery(std::string path, const std::vector<std::pair<std::string, std::string>>& params) {
  char sep = '?';
  for (const auto& [key, value] : params) {
    path += sep;
    path += key;
    path += '=';
    path += UrlEncode(value);
    sep = '&';
  }
  return path;
}

std::string Job(int64_t id) { return Path("/v1/jobs/", std::to_string(id)); }
std::string JobCancel(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/cancel"); }
std::string JobByRef(std::string_view ref) { return Path("/v1/jobs/", ref); }
std::string JobCancelByRef(std::string_view ref) { return Path("/v1/jobs/", ref, "/cancel"); }
std::string JobHold(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/hold"); }
std::string JobRelease(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/release"); }
std::string JobRequeue(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/requeue"); }
std::string JobUpdate(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/update"); }
std::string JobLogs(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/logs"); }
std::string JobExec(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/exec"); }
std::string JobExecOutput(int64_t id, std::string_view session) {
  return Path("/v1/jobs/", std::to_string(id), "/exec/") + UrlEncode(session) + "/output";
}
std::string JobExecInput(int64_t id, std::string_view session) {
  return Path("/v1/jobs/", std::to_string(id), "/exec/") + UrlEncode(session) + "/input";
}
std::string JobSteps(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/steps"); }
std::string JobEnd(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/end"); }
std::string AgentExecOutput(std::string_view session) { return "/v1/exec/" + UrlEncode(session) + "/output"; }
std::string AgentExecInput(std::string_view session) { return "/v1/exec/" + UrlEncode(session) + "/input"; }
std::string JobProgress(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/progress"); }
std::string JobSweep(int64_t id) { return Path("/v1/jobs/", std::to_string(id), "/sweep"); }
std::string Node(std::string_view name) { return Path("/v1/nodes/", name); }
std::string NodeImages(std::string_view name) { return Path("/v1/nodes/", name, "/images"); }
std::string Team(std::string_view name) { return Path("/v1/teams/", name); }
std::string NodeDrain(std::string_view name) { return Path("/v1/nodes/", name, "/drain"); }
std::string NodeResume(std::string_view name) { return Path("/v1/nodes/", name, "/resume"); }
std::string Service(std::string_view name) { return Path("/v1/services/", name); }
std::string ServiceScale(std::string_view name) { return Path("/v1/services/", name, "/scale"); }
std::string AgentHeartbeat(std::string_view name) { return Path("/v1/agents/", name, "/heartbeat"); }
std::string AgentCertificate(std::string_view name) { return Path("/v1/agents/", name, "/certificate"); }
std::string Rendezvous(std::string_view token) { return Path("/v1/rendezvous/", token); }
std::string Report(std::string_view token) { return Path("/v1/report/", token); }
std::string TokenRevoke(std::string_view id) { return Path("/v1/tokens/", id) + "/revoke"; }

}  // namespace cohort::api::routes
