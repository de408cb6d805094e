// HeadServer: the head daemon — state store, cluster state, HTTP API and control loop.
//
// Start opens (or creates) state_dir/state.db, reconciles the loaded state, binds the
// HTTP server and starts four threads besides the server's pool: the control loop
// (liveness every 100 ms, scheduling passes on events and periodically), the agent
// waker (asks agents to heartbeat now when their assignments change), the dashboard's
// snapshot refresher (DashboardSnapshots, head/routes.h) and the audit log's writer
// (audit.h). Stop may be called from any thread, once or more: it stops the HTTP server
// and joins the refresher; Wait blocks until Stop and joins the rest. The audit log
// writes what it still holds when it is destroyed, after the server; the cluster is
// destroyed last, after every thread that uses it.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "common/error.h"
#include "head/config.h"

namespace cohort {
class HttpServer;
}

namespace cohort::head {

class Cluster;
class AgentClients;
class AgentWaker;
class DashboardSnapshots;
class TokenBook;
class Router;
class AuditLog;
class RateLimiter;
class HeadTls;
class Gateway;
class Services;

class HeadServer {
 public:
  static Result<std::unique_ptr<HeadServer>> Start(HeadConfig config);
  ~HeadServer();

  int port() const { return port_; }
  const std::string& url() const { return url_; }
  Cluster& cluster() { return *cluster_; }
  // Every route registered, with the access it asks (router.h).
  const Router& router() const { return *router_; }
  // The audit log of the requests that change state (audit.h).
  AuditLog& audit() { return *audit_; }

  void Stop();
  void Wait();

 private:
  HeadServer() = default;
  void ControlLoop();

  HeadConfig config_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<AgentClients> agents_;  // used by waker_ and router_: declared before both
  std::unique_ptr<AgentWaker> waker_;
  // After cluster_ (its store) and before server_ (whose handlers record into it).
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<Gateway> gateway_;    // inference requests to service replicas
  std::unique_ptr<Services> services_;
  // Declared after cluster_ and before server_ (whose handlers use it): destroyed after
  // the server, before the cluster.
  std::unique_ptr<DashboardSnapshots> dashboard_;
  std::unique_ptr<HeadTls> tls_;  // with TLS (config.tls)
  std::unique_ptr<TokenBook> tokens_;
  std::unique_ptr<RateLimiter> limiter_;  // used by router_'s handlers
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<Router> router_;  // registers on server_; its handlers use tokens_ and limiter_
  std::thread server_thread_;
  std::thread control_thread_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
  int lock_fd_ = -1;  // flock on state_dir/head.lock, held for the head's lifetime
  std::string url_;
};

// `cohort head`: runs a head until SIGINT or SIGTERM. Returns the process exit code.
int RunHead(const HeadConfig& config);

}  // namespace cohort::head
