// Configuration of the head daemon, filled from `cohort head` flags.
#pragma once

#include <cstdint>
#include <string>

#include "api/types.h"

namespace cohort::head {

struct HeadConfig {
  std::string listen_host = "127.0.0.1";
  int port = 8470;                 // 0: pick a free port (printed and written to port_file)
  std::string advertise_url;       // how tasks and agents reach the head; default from host/port
  std::string state_dir;           // holds state.db; required
  std::string checkpoint_root;     // COHORT_CHECKPOINT_DIR parent; default state_dir/checkpoints
  std::string port_file;           // when set, the bound port is written here once listening
  api::AgentTiming timing;         // heartbeat interval, failure and fence timeouts, kill grace
  int64_t schedule_interval_ms = 1000;  // periodic pass, besides the event-driven ones
  int64_t liveness_interval_ms = 100;   // how often the control loop checks node liveness
  // When at least this fraction of the UP nodes (and at least 3) are silent at once, no node
  // is marked DOWN (core/liveness.h); a fraction in (0, 1].
  double unhealthy_zone_threshold = 0.55;
  int http_threads = 64;  // rendezvous reads park a thread for up to 1 s each
};

}  // namespace cohort::head
