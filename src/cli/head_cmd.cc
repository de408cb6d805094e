// `cohort head`: run the head daemon.
#include <cstdlib>

#include "cli/cli.h"
#include "cli/daemon_flags.h"
#include "cli/share_flags.h"
#include "common/client_config.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "head/core/liveness.h"
#include "head/core/timing.h"
#include "head/head.h"
#include "head/rate_limit.h"

namespace cohort::cli {

namespace {

// A flag's validator: the text must be a number, which `validate` (the core's own check,
// whose message names the limit) accepts.
CLI::Validator NumberCheckedBy(Result<void> (*validate)(double), std::string description) {
  return CLI::Validator(
      [validate](const std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "not a number: '" + text + "'";
        auto ok = validate(v);
        return ok ? "" : ok.error().message;
      },
      std::move(description));
}

}  // namespace

void AddHeadCommand(CommandContext& ctx) {
  struct Flags {
    head::HeadConfig config;
    TimingFlags timing;
    ShareFlags shares;
    std::string audit_retention = "90d";
    std::string log_level = "info";
  };
  auto f = std::make_shared<Flags>();
  auto* sub = ctx.app.add_subcommand("head", "Run the head node: state, scheduler, API");
  sub->add_option("--host", f->config.listen_host, "Address to listen on (default 127.0.0.1; 0.0.0.0 for all)");
  sub->add_option("--port", f->config.port, "Port to listen on (default 8470; 0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--state-dir", f->config.state_dir, "Directory for state.db (required)")->required();
  sub->add_option("--advertise-url", f->config.advertise_url, "URL agents and tasks use to reach this head");
  sub->add_option("--checkpoint-root", f->config.checkpoint_root,
                  "Parent of each job's COHORT_CHECKPOINT_DIR (default STATE_DIR/checkpoints)");
  sub->add_option("--port-file", f->config.port_file, "Write the bound port to this file once listening");
  sub->add_option("--unhealthy-zone-threshold", f->config.unhealthy_zone_threshold,
                  "When at least this fraction of the UP nodes (and at least 3) are silent at once, the head "
                  "blames itself or its network and marks none DOWN (default 0.55)")
      ->check(NumberCheckedBy(head::core::ValidateUnhealthyZoneThreshold, "FRACTION in (0,1]"));
  sub->add_option("--heartbeat-rate-target", f->config.heartbeat_rate_target,
                  "Heartbeats per second the head aims to handle: with more nodes than --heartbeat-interval "
                  "allows at this rate, agents heartbeat less often and the failure and fence timeouts grow "
                  "by the same factor (default 1000)")
      ->check(NumberCheckedBy(head::core::ValidateHeartbeatRateTarget, "HEARTBEATS/S in [1,1000000]"));
  sub->add_option("--rate-limit", f->config.rate_limit,
                  "API requests a second each caller (a token; an address without one) may make, sustained; "
                  "past it the head answers 429 with Retry-After (0: no limit; default 50). Agents and tasks "
                  "are exempt")
      ->check(NumberCheckedBy([](double v) { return head::RateLimiter::Validate(v, 1); }, "REQUESTS/S >= 0"));
  sub->add_option("--rate-burst", f->config.rate_burst,
                  "API requests each caller may make at once, after an idle spell (default 200)")
      ->check(NumberCheckedBy([](double v) { return head::RateLimiter::Validate(1, v); }, "REQUESTS >= 1"));
  sub->add_option("--max-jobs-per-user", f->config.max_jobs_per_user,
                  "Jobs one user may have pending or running at once (an array counts once, and each element "
                  "made from it); past it a submission gets 429 and arrays wait (0: no limit; default 10000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
  sub->add_option("--max-jobs", f->config.max_jobs,
                  "Jobs the cluster may have pending or running at once, all users together (0: no limit; "
                  "default 100000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
  sub->add_flag("--new-admin-token", f->config.new_admin_token,
                "Make a new admin token for the user running the head, in STATE_DIR/admin.token and the client "
                "config, as the first start does (a lost or leaked one: revoke it with the new one)");
  sub->add_flag("--new-join-token", f->config.new_join_token,
                "Make a new join token for agents in STATE_DIR/join.token, as the first start does");
  sub->add_option("--max-connections-per-client", f->config.max_connections_per_client,
                  "Connections one client address may hold open at once; past it a new one gets 429 (default "
                  "1024). Raise it when many agents reach the head through one address (a NAT, a proxy)")
      ->check(CLI::Range(1, 1'000'000));
  sub->add_option("--audit-retention", f->audit_retention,
                  "Delete audit log rows older than this (e.g. 90d, 12h; 0 keeps them however old; default 90d)");
  sub->add_option("--audit-max-rows", f->config.audit_max_rows,
                  "Keep at most this many audit log rows, the newest (0: no cap; default 10000000)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000'000}));
  sub->add_flag("--insecure", f->config.insecure,
                "Ask no one for credentials: anyone who can reach the head may do anything (tests on a "
                "private machine only; the head says so when it starts)");
  sub->add_option("--client-config", f->config.client_config_path,
                  "Where the first start writes the admin's head URL and token (default "
                  "$XDG_CONFIG_HOME/cohort/config or ~/.config/cohort/config; \"\" for nowhere)");
  f->config.client_config_path = ClientConfigPath();
  auto no_tls = std::make_shared<bool>(false);
  auto node_cert_ttl = std::make_shared<std::string>("7d");
  sub->add_flag("--no-tls", *no_tls,
                "Serve plain HTTP (tokens are still required): only behind a proxy that terminates TLS, on a "
                "network nothing else reaches");
  sub->add_option("--tls-san", f->config.tls_san,
                  "Another DNS name or IP address clients reach the head at, for its certificate (repeatable)");
  sub->add_option("--tls-ca-cert", f->config.tls_ca_cert,
                  "The site's certificate authority (PEM) to issue the head's and nodes' certificates from, "
                  "instead of one the head makes in state_dir/tls");
  sub->add_option("--tls-ca-key", f->config.tls_ca_key, "The private key of --tls-ca-cert (PEM)");
  sub->add_option("--node-cert-ttl", *node_cert_ttl,
                  "How long a node's certificate is valid: 7d (default), 12h, 90m, seconds; agents renew it "
                  "with a third left");
  f->timing.AddTo(sub);
  f->shares.AddTo(sub);
  AddLogLevelFlag(sub, f->log_level);
  ctx.on_run(sub, [f, no_tls, node_cert_ttl] {
    auto timing = f->timing.Resolve();
    if (!timing) return ReportError(timing.error());
    f->config.timing = *timing;
    auto shares = f->shares.Resolve();
    if (!shares) return ReportError(shares.error());
    f->config.shares = *shares;
    f->config.tls = !*no_tls;
    auto ttl = ParseTokenExpiry(*node_cert_ttl);
    if (!ttl || *ttl == 0 || *ttl < 60) {
      return ReportError(Error{ErrorCode::kInvalidArgument,
                               fmt::format("--node-cert-ttl: must be a lifetime of at least 60 seconds (7d, 12h, 90m, "
                                           "seconds), got '{}'", *node_cert_ttl),
                               "--node-cert-ttl"});
    }
    f->config.node_cert_ttl_ms = *ttl * 1000;
    auto retention = ParseDurationMs(f->audit_retention, "--audit-retention");
    if (!retention) return ReportError(retention.error());
    f->config.audit_retention_ms = *retention;
    BlockTerminationSignals();
    InitLogging("head", f->log_level);
    return head::RunHead(f->config);
  });
}

}  // namespace cohort::cli
