// Configuration of the head daemon, filled from `cohort head` flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/types.h"
#include "head/core/share_state.h"

namespace cohort::head {

struct HeadConfig {
  std::string listen_host = "127.0.0.1";
  int port = 8470;                 // 0: pick a free port (printed and written to port_file)
  std::string advertise_url;       // how tasks and agents reach the head; default from host/port
  std::string state_dir;           // holds state.db; required
  std::string checkpoint_root;     // COHORT_CHECKPOINT_DIR parent; default state_dir/checkpoints
  std::string port_file;           // when set, the bound port is written here once listening
  api::AgentTiming timing;         // heartbeat interval, failure and fence timeouts, kill grace
  // Heartbeats per second the head aims to handle: with more nodes than the interval
  // allows at this rate, agents get a longer interval and proportionally longer
  // timeouts (core/timing.h). In [1, 1e6].
  double heartbeat_rate_target = 1000;
  int64_t schedule_interval_ms = 1000;  // periodic pass, besides the event-driven ones
  int64_t liveness_interval_ms = 100;   // how often the control loop checks node liveness
  // When at least this fraction of the UP nodes (and at least 3) are silent at once, no node
  // is marked DOWN (core/liveness.h); a fraction in (0, 1].
  double unhealthy_zone_threshold = 0.55;
  // HTTP (common/http_server.h): threads per pool. Agents (registration, heartbeats) and
  // tasks (rendezvous, progress reports) have pools of their own that API clients cannot
  // take; rendezvous reads park a task thread for up to 1 s each. API requests are CPU
  // work (building and serializing lists), so their pool is sized to the cores (0: twice
  // the cores, at least 4) and runs at nice +5: a storm of list requests cannot take the
  // CPU from heartbeats.
  int http_threads = 0;         // the API's pool
  int agent_http_threads = 16;  // the agent protocol's pool
  int task_http_threads = 64;   // rendezvous and progress reports
  int gateway_http_threads = 256;  // inference requests (gateway.h): each stream holds one
  int64_t request_timeout_ms = 10'000;  // a request must arrive whole within this (408)
  int max_connections_per_client = 1024;  // per client address, at once (429)
  int api_requests_per_client = 64;       // one address's API requests queued or running (429)
  // Security (auth.h): every route but health and the dashboard's page asks for a token.
  // --insecure turns that off (anyone may do anything), and the head says so when it starts.
  bool insecure = false;
  // Requests a second each API caller may make, sustained, and at once (rate_limit.h;
  // router.h says who is a caller and which routes are exempt); rate 0: no limit. Sized so
  // that people and their scripts never meet it; a runaway loop does.
  double rate_limit = 50;
  double rate_burst = 200;
  // Jobs open (pending or running) at once, per user and in all (core/job_limits.h); past
  // them a submission gets 429. 0: no limit.
  int64_t max_jobs_per_user = 10'000;
  int64_t max_jobs = 100'000;
  // The audit log (audit.h): rows older than this are deleted (0: kept however old), and
  // beyond the newest audit_max_rows (0: no cap).
  int64_t audit_retention_ms = int64_t{90} * 24 * 3600 * 1000;
  int64_t audit_max_rows = 10'000'000;
  // Where the first start (a store without tokens) writes the admin's client config
  // (common/client_config.h); "" writes none. The tokens also go to state_dir/admin.token
  // and state_dir/join.token.
  std::string client_config_path;
  // Recovery, for an admin token or a join token lost or leaked: this start makes a new one
  // as the first start does (admin: for the user running the head, in admin.token and the
  // client config; join: in join.token). The old ones keep working until revoked.
  bool new_admin_token = false;
  bool new_join_token = false;
  // TLS (head_tls.h): the API and the agent protocol over HTTPS, agents with certificates
  // of their own. Off with --insecure, or with --no-tls (tokens are still asked for: for a
  // head behind a proxy that terminates TLS, on a network nothing else reaches).
  bool tls = true;
  std::vector<std::string> tls_san;  // more names (DNS or IP) the head's certificate carries
  std::string tls_ca_cert;           // the site's authority, instead of one the head makes
  std::string tls_ca_key;
  int64_t node_cert_ttl_ms = 7LL * 24 * 3600 * 1000;  // agents renew with a third left
  // Set by the head when it starts with TLS: its authority's certificate, which tasks get
  // as COHORT_CA to reach it (rendezvous, progress reports).
  std::string task_ca_pem;
  // Fair share, quotas' preemption (core/share_state.h): priority weights, usage
  // half-life, preemption on or off, a victim's minimum runtime and checkpoint grace.
  core::SharesConfig shares;
};

}  // namespace cohort::head
