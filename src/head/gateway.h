// Gateway: the head's front for inference services (`cohort serve deploy`): POST
// /v1/completions and /v1/chat/completions and GET /v1/models[/{id}] on the head's own port,
// authenticated like the rest of the API (a bearer token: the OpenAI SDK's apiKey), routed
// by the request's "model" to a healthy replica of the service that serves it. Control
// plane: it speaks HTTP to the replicas (src/serve) and never links the engine.
//
// Replicas are the RUNNING jobs of services (JobSpec::service), found in the Cluster at
// every health tick, reached at their allocation's MASTER_ADDR:MASTER_PORT, each with its
// node's `site` label.
//
//   - Health: active — every tick a replica's GET /load (its load report), and a short
//     canary decode (one greedy token) when first seen and every `canary_every` ticks; a
//     replica is routed to only after a canary succeeded. Passive — a connection error or
//     a 5xx (but 503) from a request marks it unhealthy until a canary passes again. An
//     overloaded answer (429, 503) never does.
//   - Routing: among the healthy replicas of the model, those on the site the request
//     names (header X-Cohort-Site) when there are any; with a session header
//     (X-Session-Id) the same replica for the same session while it stays healthy
//     (rendezvous hashing, so a conversation's prefix stays where it was computed); else
//     the least loaded by tokens: what its last report (queued and in-flight tokens) held
//     beyond the gateway's own requests of that moment, plus the estimated tokens of the
//     requests the gateway has in progress there now (so a burst arriving between two
//     reports spreads over the replicas, and a report of a burst since ended is not held
//     against the replica). /metrics has each replica's requests in progress at the
//     gateway (cohort_replica_gateway_inflight_requests).
//   - Retries: a request that has not started streaming goes to another replica after a
//     connection error, a 5xx or an overload (up to max_attempts replicas); when every
//     replica is overloaded it waits in a bounded queue (max_queued; beyond it, and after
//     queue_timeout, 429 with Retry-After). At most max_inflight requests are in progress
//     at once (429 beyond): memory stays bounded.
//   - Failover: a stream whose replica dies (the connection breaks or the replica sends an
//     error event) is re-submitted to another replica with the prompt plus the tokens
//     already sent ("cohort_resume", openai_api.h), and only the new tokens are relayed:
//     the client receives every token exactly once, and logprobs.text_offset goes on as if
//     it never moved (the replica rebuilds the text sent from those tokens, and from the
//     prompt when its echo went out: cohort_resume.echoed). A stream of several choices (n > 1, several prompts) cannot be resumed so: it ends
//     with an error event instead. An echoed
//     prompt (completions' echo) that went out is not asked for again. The gateway gives every streamed
//     sampling request a seed when it has none, so the continuation equals what the dead
//     replica would have sent (seeded sampling is keyed by token index, sampling.h).
//   - Hang-ups: a client that closes its connection is given up: a stream's next write
//     fails, an unstreamed request's handler looks every 250 ms; either way the replica's
//     connection is closed, which makes the replica cancel the request. The replica stays
//     healthy.
// Replies name the replica that answered (X-Cohort-Replica: "job.attempt"; a stream's
// first). Errors are in OpenAI's shape, the head's own refusals on these routes too (401
// without an accepted token, 403, 429 past the rate limit: Router::UseOpenAiErrors): 404
// unknown model (param "model"), 503 no healthy replica and 429 overloaded, both with
// Retry-After, 400 for a body that is not a JSON object with a model (or whose stream is
// not a boolean). A field that is null is unset, as at a replica.
//
// Threads: Start runs the health thread; handlers run on the HTTP pool's threads; every
// public method may be called from any thread. Stop (idempotent; the destructor calls it)
// before the Cluster goes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/service.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/json.h"
#include "common/mutex.h"
#include "common/prometheus.h"

namespace httplib {
class Client;
struct Request;
struct Response;
}

namespace cohort::head {

class Cluster;
class Router;

struct GatewayOptions {
  Millis health_interval{1000};
  int canary_every = 10;             // ticks between canaries of a healthy replica
  Millis check_timeout{2000};        // GET /load
  Millis canary_timeout{10000};
  Millis connect_timeout{2000};
  Millis read_timeout{120'000};      // the most a replica may go silent within a reply
  int max_attempts = 3;              // replicas tried before a request streams
  int max_moves = 4;                 // failovers of one stream
  int max_inflight = 4096;
  int max_queued = 1024;
  Millis queue_timeout{30'000};
  int retry_after_s = 1;
  std::string session_header = "X-Session-Id";
  std::string site_header = "X-Cohort-Site";
};

class Gateway {
 public:
  Gateway(Cluster& cluster, GatewayOptions options = {});
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  void Start();
  void Stop();
  // Finds the replicas and checks their health now (the health thread's tick).
  void Tick() EXCLUDES(mu_);
  // Finds the replicas now, without checking them (after a service changed): a removed
  // one is gone at once, a new one waits for its canary. Returns the running replicas' keys.
  std::vector<std::string> Discover() EXCLUDES(mu_);

  // POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}.
  void Register(Router& router);

  // The replicas of `service` as the gateway sees them (RUNNING ones; PENDING ones are
  // the caller's to add from the Cluster).
  std::vector<api::ReplicaStatus> Replicas(const std::string& service) const EXCLUDES(mu_);
  // The cohort_gateway_* and per-replica and per-service families for /metrics.
  void WriteMetrics(prom::TextWriter& w) const EXCLUDES(mu_);

  struct Counters {
    int64_t requests = 0, retries = 0, failovers = 0, overloaded = 0, unavailable = 0;
  };
  Counters counters() const;

 private:
  struct Replica;
  struct Lease;
  struct Picked;
  class Upstream;
  struct StreamState;

  // A replica for `model`: healthy, not in `exclude`, by site, session or load. Takes a
  // lease (the request's estimated tokens count as outstanding on it). kNotFound for a
  // model no service serves, kUnavailable when none is healthy.
  Result<std::shared_ptr<Lease>> Pick(const std::string& model, const std::string& session,
                                      const std::string& site, const std::vector<std::string>& exclude,
                                      int64_t tokens) EXCLUDES(mu_);
  void MarkFailed(const std::string& key, const std::string& why) EXCLUDES(mu_);
  void CountFailover(const std::string& key) EXCLUDES(mu_);
  std::unique_ptr<httplib::Client> TakeClient(const Lease& lease) EXCLUDES(mu_);
  void ReturnClient(const Lease& lease, std::unique_ptr<httplib::Client> client) EXCLUDES(mu_);
  // Health of one replica (GET /load, and the canary when due); on the health thread.
  void Check(const std::string& key) EXCLUDES(mu_);
  void HealthLoop();
  // Waits (bounded) for a replica to have room; false when the queue is full or the wait
  // timed out.
  bool WaitForRoom() EXCLUDES(mu_);
  void Handle(bool chat, const std::string& path, const httplib::Request& req, httplib::Response& res);

  Cluster& cluster_;
  const GatewayOptions options_;

  mutable Mutex mu_;
  CondVar room_cv_;  // a request ended: a replica may have room
  std::map<std::string, std::shared_ptr<Replica>> replicas_ GUARDED_BY(mu_);  // by "job.attempt"
  std::map<std::string, std::string> model_services_ GUARDED_BY(mu_);        // every service's model
  // When each model's service was deployed (its oldest replica's submission, Unix seconds):
  // /v1/models' "created".
  std::map<std::string, int64_t> model_created_ GUARDED_BY(mu_);
  std::set<std::string> scaled_to_zero_ GUARDED_BY(mu_);  // models of services scaled to 0
  int queued_ GUARDED_BY(mu_) = 0;
  uint64_t round_robin_ GUARDED_BY(mu_) = 0;

  std::atomic<int> inflight_{0};
  std::atomic<int64_t> requests_{0}, retries_{0}, failovers_{0}, overloaded_{0}, unavailable_{0};
  prom::Histogram ttft_seconds_{prom::ExponentialBuckets(0.001, 2, 16)};
  prom::Histogram moved_extra_seconds_{prom::ExponentialBuckets(0.001, 2, 16)};
  // What the clients of one service's streams see through the gateway: arrival to first
  // token, and the gap between tokens (a failover's included). Kept while the service has
  // replicas; a stream holds its own reference.
  struct ServiceLatency {
    prom::Histogram ttft{prom::ExponentialBuckets(0.001, 2, 16)};
    prom::Histogram itl{prom::ExponentialBuckets(0.0005, 2, 16)};
  };
  std::map<std::string, std::shared_ptr<ServiceLatency>> latency_ GUARDED_BY(mu_);  // by service
  // The histograms of the service that serves `model` (nullptr: none does).
  std::shared_ptr<ServiceLatency> LatencyOf(const std::string& model) EXCLUDES(mu_);

  std::atomic<bool> stopping_{false};
  Mutex stop_mu_;
  CondVar stop_cv_;
  std::thread health_thread_;
};

}  // namespace cohort::head
