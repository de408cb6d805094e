// Inference services: what `cohort serve deploy FILE` submits (ServiceSpec, a job spec of
// `kind: service`), and how the head shows a service (ServiceStatus, GET /v1/services).
//
// A service is `replicas` copies of one `cohort serve` replica, each a job of one task
// (JobSpec::service set) that the head keeps running: a replica that exits or whose node
// is lost is requeued and placed again (core/lifecycle.h); only `scale` and `rm` end
// replicas (by cancelling them). The service exists while it has replica jobs. The head's
// gateway routes requests that name `model_name` to the replicas it finds healthy.
//
// Plain values with strict codecs (the bad field named, as every wire type).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

inline constexpr int kMaxReplicas = 1024;

// Why `attempt` of `job` has no record of its own in job.history (`cohort logs -a`, the
// head's logs route), naming the attempts that can be read; nullopt when it has one. A
// service replica keeps the records of its newest attempts only, the older ones folded into
// its oldest record (head/core/lifecycle.h: FoldOldestAttempts): an attempt folded so is
// said to be, and which record holds it; any other is one that never started.
std::optional<std::string> MissingAttemptRecord(const Job& job, int attempt);

struct ServiceSpec {
  std::string name;        // [A-Za-z0-9._-], <= 64; the replicas' job name and service
  std::string user;        // who deploys; default: the caller
  std::string model;       // path on the nodes: a checkpoint directory or .safetensors file
  std::string model_name;  // the name requests use ("model"); default: name
  int replicas = 1;        // 1..kMaxReplicas
  int gpus_per_replica = 0;
  int cpus_per_replica = 1;
  std::string device;      // cpu | cuda; default: cuda with GPUs, else cpu
  // The replica's program: default (filled by the CLI) [<its cohort binary>, "serve"];
  // the head appends --model, --name, --device and then `args`.
  std::vector<std::string> command;
  std::vector<std::string> args;  // more `cohort serve` flags (--kv-cache-mb 512, ...)
  std::map<std::string, std::string> env;
  std::string workdir;
  int priority = 0;
  Placement placement = Placement::kSpread;  // replicas on different nodes when they can be
};

// Reads a service spec: "kind" must be "service". Errors name the field.
Result<ServiceSpec> ServiceSpecFromJson(const json& j);
json ToJson(const ServiceSpec& s);
// The job spec of one replica of `s` (its command complete, JobSpec::service set).
JobSpec ReplicaJobSpec(const ServiceSpec& s);

// One replica as the head's gateway sees it.
struct ReplicaStatus {
  JobId job = 0;
  int attempt = 0;
  std::string state;     // the job's state (PENDING, RUNNING)
  std::string node;      // RUNNING: where
  std::string site;      // the node's `site` topology label, "" without one
  std::string endpoint;  // RUNNING: http://address:port
  bool healthy = false;  // the gateway routes to it
  std::string health;    // why not healthy, or "ok"
  // Its latest load report (GET /load), when the gateway has one.
  int running = 0, waiting = 0;
  int64_t queued_tokens = 0, inflight_tokens = 0;
  int kv_blocks_used = 0, kv_blocks_total = 0;
  double tokens_per_second = 0, ttft_p50_seconds = 0, ttft_p99_seconds = 0;
  double itl_p50_seconds = 0, itl_p99_seconds = 0;
  int64_t requests = 0, failovers = 0;  // routed to it; streams moved away from it
};

struct ServiceStatus {
  std::string name;
  std::string model_name;
  std::string user;
  int replicas = 0;  // desired: its replica jobs
  int healthy = 0;
  std::vector<ReplicaStatus> replica_status;
};

json ToJson(const ReplicaStatus& r);
json ToJson(const ServiceStatus& s);
// Views are read leniently, as every view (views.h): unknown fields are ignored.
Result<ServiceStatus> ServiceStatusFromJson(const json& j);

}  // namespace cohort::api
