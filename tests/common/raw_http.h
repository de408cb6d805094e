// Test helpers for input no well-behaved client sends: a raw HTTP/1.1 client that can
// send a body that never ends or a header line of 100 MiB, and a process's memory as
// /proc shows it. Header-only; used by the common and the integration tests.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "common/json.h"

namespace cohort::testing {

// A field of /proc/PID/status in bytes ("VmRSS", "VmHWM"); pid 0: this process.
inline int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(pid ? fmt::format("/proc/{}/status", pid) : std::string("/proc/self/status"));
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == field + ":") {
      in >> kb;
      break;
    }
  }
  return kb * 1024;
}
inline int64_t RssBytes(pid_t pid = 0) { return ProcStatusBytes(pid, "VmRSS"); }
inline int64_t PeakRssBytes(pid_t pid = 0) { return ProcStatusBytes(pid, "VmHWM"); }
// Starts the peak (VmHWM) afresh from the current resident set.
inline void ResetPeakRss(pid_t pid = 0) {
  std::ofstream(pid ? fmt::format("/proc/{}/clear_refs", pid) : std::string("/proc/self/clear_refs")) << "5";
}

// How much a process's peak resident set has grown since this was made.
class MemoryWatch {
 public:
  explicit MemoryWatch(pid_t pid = 0) : pid_(pid), before_(RssBytes(pid)) { ResetPeakRss(pid); }
  int64_t PeakGrowth() const { return PeakRssBytes(pid_) - before_; }

 private:
  pid_t pid_;
  int64_t before_;
};

// The request line and headers of a chunked JSON POST to `path`.
inline std::string ChunkedPost(const std::string& path) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                     path);
}

struct RawReply {
  int status = 0;
  std::string text;     // the first reply: status line, headers and body
  bool closed = false;  // the server closed the connection after it
  int64_t sent = 0;     // body bytes the client got to send
};

// The length of the first reply in `text` (headers and Content-Length bytes of body), or
// 0 while it is incomplete.
inline size_t ReplyLength(const std::string& text) {
  size_t end = text.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  size_t at = text.find("Content-Length: ");
  size_t length = end + 4 + (at < end ? std::strtoull(text.c_str() + at + 16, nullptr, 10) : 0);
  return text.size() >= length ? length : 0;
}

// A client on a raw socket to 127.0.0.1:`port`: sends `head`, then up to `body_bytes` of
// body (as 64 KiB chunks when `chunked`), reading the reply as soon as one arrives and
// sending nothing after that, as curl does. With `wait_for_close`, then waits up to 2 s
// for the server to close the connection.
inline RawReply RawUpload(int port, const std::string& head, int64_t body_bytes, bool chunked,
                          bool wait_for_close = true) {
  RawReply out;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return out;
  }
  const std::string data(64 << 10, 'x');
  const std::string chunk = fmt::format("{:x}\r\n{}\r\n", data.size(), data);
  std::string pending = head;
  char buf[65536];
  while (ReplyLength(out.text) == 0) {
    pollfd p{fd, static_cast<short>(POLLIN | (pending.empty() ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.text.append(buf, static_cast<size_t>(n));
      continue;
    }
    ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    pending.erase(0, static_cast<size_t>(n));
    if (pending.empty() && out.text.empty() && out.sent < body_bytes) {
      pending = chunked ? chunk : data;
      out.sent += static_cast<int64_t>(data.size());
      if (chunked && out.sent >= body_bytes) pending += "0\r\n\r\n";
    }
  }
  pollfd p{fd, POLLIN, 0};
  out.closed = wait_for_close && ::poll(&p, 1, 2000) > 0 && ::recv(fd, buf, sizeof buf, 0) <= 0;
  ::close(fd);
  if (size_t n = ReplyLength(out.text); n > 0) out.text.resize(n);  // httplib's server may answer the rest as requests
  if (out.text.starts_with("HTTP/1.1 ")) out.status = std::atoi(out.text.c_str() + 9);
  return out;
}

// The "message" of the JSON error body in a reply, or "".
inline std::string ReplyErrorMessage(const std::string& reply_text) {
  size_t body = reply_text.find("\r\n\r\n");
  if (body == std::string::npos) return "";
  json j = json::parse(reply_text.substr(body + 4), nullptr, false);
  return j.is_object() && j.contains("error") && j["error"].is_object() ? j["error"].value("message", "") : "";
}

}  // namespace cohort::testing
