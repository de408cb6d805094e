// TcpStoreServer: the server side of TcpStore, hosted by rank 0 (internal to src/comm;
// users get it through TcpStore::Listen or OpenStore("tcp://...", is_server=true)).
//
// It listens on every interface (IPv6 dual-stack where available, else IPv4) and serves
// the protocol in tcp_store_wire.h from one thread with epoll: all sockets are
// non-blocking, a GET or WAIT whose keys are missing is parked (no polling) until a SET
// or ADD provides them or its deadline passes, and replies larger than the socket buffer
// are written as the client drains them. Keys live in memory for the server's lifetime.
//
// Threads: Start and the destructor are called by the owner; everything else runs on the
// server thread, which alone touches the connection and key state (so it needs no lock).
// The destructor wakes the thread through an eventfd, joins it and closes every socket:
// clients then see "connection closed by peer".
#pragma once

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "comm/tcp_socket.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

class TcpStoreServer {
 public:
  // Binds `port` (0 = any free port) and starts serving. kUnavailable if the port cannot be
  // bound ("Address already in use").
  static Result<std::unique_ptr<TcpStoreServer>> Start(int port);
  ~TcpStoreServer();

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The bound port (the chosen one when Start was given 0).
  int port() const { return port_; }

 private:
  // A GET or WAIT waiting for keys.
  struct Parked {
    bool is_get = false;
    std::vector<std::string> keys;             // as requested, for ordered replies
    std::unordered_set<std::string> missing;   // keys not yet set
    SteadyTime deadline;
  };
  struct Conn {
    UniqueFd fd;
    std::string in;         // received bytes; in[in_pos..] not yet handled
    size_t in_pos = 0;
    std::string out;        // reply bytes; out[out_pos..] not yet sent
    size_t out_pos = 0;
    bool watching_out = false;  // EPOLLOUT registered
    bool dead = false;          // to be closed by the event loop
    std::unique_ptr<Parked> parked;
  };

  TcpStoreServer() = default;

  void Run();
  void Accept();
  void ReadFrom(Conn& c);
  void Flush(Conn& c);
  void ProcessInput(Conn& c);
  void Handle(Conn& c, std::string_view payload);
  void Reply(Conn& c, std::string frame);
  void Park(Conn& c, bool is_get, std::vector<std::string> keys, int64_t timeout_ms);
  void Unpark(Conn& c);
  // Replies to the parked requests that were waiting only for `key`.
  void KeySet(const std::string& key);
  void ExpireParked();
  void Close(int fd);
  int EpollTimeoutMs() const;

  UniqueFd listen_fd_;
  UniqueFd epoll_fd_;
  UniqueFd wake_fd_;  // eventfd: written by the destructor to stop the thread
  int port_ = 0;
  std::thread thread_;

  // Server-thread state: only thread_ touches these (no mutex needed).
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;  // key -> parked conn fds
  std::set<std::pair<SteadyTime, int>> deadlines_;                   // parked conns by deadline
  std::vector<int> resume_;  // conns unparked this round whose buffered input is unhandled
};

}  // namespace cohort::comm
