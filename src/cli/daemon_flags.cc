#include "cli/daemon_flags.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>

#include "common/clock.h"

namespace cohort::cli {

void TimingFlags::AddTo(CLI::App* sub) {
  sub->add_option("--heartbeat-interval", heartbeat_interval, "How often agents heartbeat (default 1s)");
  sub->add_option("--failure-timeout", failure_timeout,
                  "A node silent this long is DOWN and its jobs are requeued (default 3s)");
  sub->add_option("--fence-timeout", fence_timeout,
                  "An agent that cannot reach the head this long kills its tasks (default 2/3 of the failure timeout)");
  sub->add_option("--kill-grace", kill_grace, "SIGTERM to SIGKILL delay when stopping tasks (default 5s)");
}

Result<api::AgentTiming> TimingFlags::Resolve() const {
  api::AgentTiming t;
  t.heartbeat_interval_ms = COHORT_TRY(ParseDurationMs(heartbeat_interval, "--heartbeat-interval"));
  t.failure_timeout_ms = COHORT_TRY(ParseDurationMs(failure_timeout, "--failure-timeout"));
  t.fence_timeout_ms = fence_timeout.empty() ? t.failure_timeout_ms * 2 / 3
                                             : COHORT_TRY(ParseDurationMs(fence_timeout, "--fence-timeout"));
  t.kill_grace_ms = COHORT_TRY(ParseDurationMs(kill_grace, "--kill-grace"));
  if (t.heartbeat_interval_ms < 10) return MakeError(ErrorCode::kInvalidArgument, "--heartbeat-interval: at least 10ms");
  if (t.failure_timeout_ms < 30) return MakeError(ErrorCode::kInvalidArgument, "--failure-timeout: at least 30ms");
  return t;
}

void AddLogLevelFlag(CLI::App* sub, std::string& level) {
  sub->add_option("--log-level", level, "trace, debug, info, warn or error (default info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

Result<std::string> ResolveJoinToken(const std::string& token, const std::string& file) {
  if (!token.empty()) return token;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return Errorf(ErrorCode::kInvalidArgument, "--join-token-file: cannot read {}: {}", file, std::strerror(errno));
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) return Errorf(ErrorCode::kInvalidArgument, "--join-token-file: {} holds no token", file);
    return line;
  }
  if (const char* env = std::getenv("COHORT_JOIN_TOKEN"); env && *env) return std::string(env);
  return std::string();
}

void HideSecretArguments(int argc, char** argv) {
  static constexpr std::string_view kSecretFlags[] = {"--join-token", "--token"};
  auto blank = [](char* p) {
    for (; *p; ++p) *p = '*';
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return;  // a command's own arguments follow
    for (std::string_view flag : kSecretFlags) {
      if (arg == flag && i + 1 < argc) {
        blank(argv[++i]);
      } else if (arg.size() > flag.size() && arg.starts_with(flag) && arg[flag.size()] == '=') {
        blank(argv[i] + flag.size() + 1);
      }
    }
  }
}

}  // namespace cohort::cli
