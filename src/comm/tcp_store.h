// TcpStore: a Store hosted by one rank over TCP, like torch's TCPStore. URL tcp://HOST:PORT
// (MASTER_ADDR:MASTER_PORT); for use outside a Cohort cluster or where the head is not
// reachable from the job.
//
// Rank 0 calls Listen: it hosts a TcpStoreServer (a thread serving every interface) and is
// itself a client of it. Other ranks call Connect, which retries until the timeout, so
// they may start before rank 0. The server parks a blocking GET/WAIT until its keys are
// set, so waiting costs no polling. Keys live in rank 0's memory and go when its store is
// destroyed; clients then get kUnavailable.
//
// Threads: every method may be called from any thread. Each call borrows a connection
// from a small pool (opening a new one when all are busy), so one thread's blocking Get
// never holds up another thread's Set. Many TcpStore objects may live in one process.
// Destroy a TcpStore only after every call on it has returned.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/store.h"
#include "comm/tcp_socket.h"

namespace cohort::comm {

class TcpStoreServer;

struct TcpStoreOptions {
  // How long Connect keeps retrying, and how long Set/Add wait for a reply.
  Millis timeout{30'000};
  // Called after each failed connection attempt with its cause (logging, tests).
  std::function<void(const Error&)> on_connect_retry = {};
};

class TcpStore final : public Store {
 public:
  // Hosts the store on `port` (0 = any free port; see port()) on every interface and
  // connects to it over loopback. kUnavailable if the port cannot be bound.
  static Result<std::unique_ptr<TcpStore>> Listen(int port, TcpStoreOptions options = {});
  // Connects to the store at host:port, retrying until options.timeout. kUnavailable
  // "cannot reach store tcp://h:p: Connection refused (after 5.0s)" when it cannot.
  static Result<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                   TcpStoreOptions options = {});
  // Closes the connections; on the hosting rank also stops the server.
  ~TcpStore() override;

  Result<void> Set(const std::string& key, const std::string& value) override;
  Result<std::string> Get(const std::string& key, Millis timeout) override;
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<int64_t> Add(const std::string& key, int64_t delta) override;

  int port() const { return port_; }
  // "tcp://host:port"
  const std::string& url() const { return url_; }

 private:
  TcpStore(std::string host, int port, TcpStoreOptions options);

  // A new connection that passed the PING handshake, retrying until options_.timeout.
  Result<UniqueFd> Dial();
  // Sends one request frame and returns the reply payload (status byte first). Replies
  // arriving after `reply_deadline` count as a lost store.
  Result<std::string> Call(const std::string& frame, SteadyTime reply_deadline);

  std::unique_ptr<TcpStoreServer> server_;  // set on the hosting rank only
  const std::string host_;
  const int port_;
  const TcpStoreOptions options_;
  const std::string url_;

  std::mutex mu_;
  std::vector<UniqueFd> idle_;  // guarded by mu_: connections not in use by any call
};

}  // namespace cohort::comm
