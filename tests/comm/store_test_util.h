// Helpers for the store tests: a temp dir, a fake of the head's rendezvous server, a
// free-but-closed port, and the backends the shared suite runs on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "comm/store.h"
#include "comm/tcp_socket.h"

namespace cohort::comm::testing {

// A fresh directory under $TMPDIR (or /tmp), removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A port with a bound socket on it that does not listen: connections to it are refused
// until Release() closes the socket (then the port is free for a server to take).
class ReservedPort {
 public:
  ReservedPort();
  int port() const { return port_; }
  void Release() { fd_.reset(); }

 private:
  UniqueFd fd_;
  int port_ = 0;
};

// A fake of the head's rendezvous endpoints (src/head/rendezvous_api.cc), implementing
// exactly the protocol HttpStore documents, on 127.0.0.1 with an ephemeral port.
// Token "live" is a running job; token "ended" answers every request with the head's
// 404 for a job that is no longer running. Thread-safe.
class FakeRendezvousServer {
 public:
  FakeRendezvousServer();
  ~FakeRendezvousServer();

  // http://127.0.0.1:PORT/v1/rendezvous/TOKEN
  std::string BaseUrl(const std::string& token = "live") const;
  // Request targets seen (raw, still percent-encoded) and the largest wait_ms asked for.
  std::vector<std::string> Targets() const;
  int64_t MaxWaitMs() const;
  // The keys stored, decoded.
  std::set<std::string> Keys() const;

 private:
  bool CheckToken(const httplib::Request& req, httplib::Response& res);

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;                  // signalled with mu_ on every set and add
  std::map<std::string, std::string> keys_;     // guarded by mu_
  std::vector<std::string> targets_;            // guarded by mu_
  int64_t max_wait_ms_ = 0;                     // guarded by mu_
};

// One backing store and a way to open clients of it.
class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  // A new client of this backend's store (its own connections).
  virtual std::unique_ptr<Store> NewClient() = 0;
};

enum class BackendKind { kFile, kTcp, kHttp };
std::unique_ptr<StoreBackend> MakeBackend(BackendKind kind);
std::string BackendName(BackendKind kind);
inline void PrintTo(BackendKind kind, std::ostream* os) { *os << BackendName(kind); }

}  // namespace cohort::comm::testing
