// Drives a headless Chromium through the DevTools protocol, for the dashboard's browser
// test. There is no network here (no Playwright, no npm), so this is the whole client:
//
//   HeadlessChromium  starts `chromium --headless=new --remote-debugging-port=0` with its
//                     own profile directory, reads the port from DevToolsActivePort, and
//                     kills the browser's process group on destruction.
//   WebSocket         the client side of RFC 6455 over a blocking TCP socket: the opening
//                     handshake (with the Sec-WebSocket-Accept check), masked text frames
//                     out, and frames in (fragments joined, pings answered, close noticed).
//   CdpSession        JSON-RPC over that socket: Call(method, params) waits, up to a
//                     deadline, for the reply with its id, skipping events. Calls carry a
//                     sessionId once Attach has attached to a page target ("flatten" mode),
//                     so one browser connection drives one page.
//
// Everything returns Result; nothing throws. One thread uses an instance at a time.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/subprocess.h"

namespace cohort::testing {

using Deadline = std::chrono::steady_clock::time_point;

inline Deadline After(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

inline std::string Base64Encode(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

inline Result<std::string> Base64Decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    if (c == '\n' || c == '\r') continue;
    int v = value(c);
    if (v < 0) return MakeError(ErrorCode::kInvalidArgument, "base64: bad character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

class WebSocket {
 public:
  WebSocket() = default;
  WebSocket(const WebSocket&) = delete;
  WebSocket& operator=(const WebSocket&) = delete;
  ~WebSocket() {
    if (fd_ >= 0) close(fd_);
  }

  // Connects to ws://127.0.0.1:`port``path` and completes the opening handshake.
  Result<void> Connect(int port, const std::string& path, Deadline deadline) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return MakeError(ErrorCode::kUnavailable, "socket() failed");
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      return Errorf(ErrorCode::kUnavailable, "cannot connect to 127.0.0.1:{}: {}", port, strerror(errno));
    }
    std::string nonce(16, '\0');
    std::random_device rd;
    for (auto& c : nonce) c = static_cast<char>(rd());
    std::string key = Base64Encode(nonce);
    std::string req = fmt::format(
        "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        path, port, key);
    COHORT_TRY_VOID(WriteAll(req));
    // The reply's header, byte by byte so that no frame byte is read past it.
    std::string head;
    while (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) {
      char c;
      COHORT_TRY_VOID(ReadExact(&c, 1, deadline));
      head += c;
      if (head.size() > 16384) return MakeError(ErrorCode::kInternal, "websocket: handshake reply too long");
    }
    if (head.rfind("HTTP/1.1 101", 0) != 0) {
      return Errorf(ErrorCode::kInternal, "websocket: handshake refused: {}", head.substr(0, head.find('\r')));
    }
    // Sec-WebSocket-Accept = base64(SHA-1(key + the RFC's GUID)).
    std::string magic = key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(magic.data()), magic.size(), digest);
    std::string expect = Base64Encode(std::string_view(reinterpret_cast<char*>(digest), sizeof digest));
    std::string lower = head;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t at = lower.find("sec-websocket-accept:");
    if (at == std::string::npos) return MakeError(ErrorCode::kInternal, "websocket: no Sec-WebSocket-Accept");
    size_t v = head.find_first_not_of(' ', at + 21);
    std::string accept = head.substr(v, head.find('\r', v) - v);
    if (accept != expect) return Errorf(ErrorCode::kInternal, "websocket: bad Sec-WebSocket-Accept '{}'", accept);
    return {};
  }

  // Sends one text message in one masked frame.
  Result<void> SendText(std::string_view payload) { return SendFrame(0x1, payload); }

  // The next text or binary message (fragments joined); answers pings on the way.
  Result<std::string> Receive(Deadline deadline) {
    std::string message;
    while (true) {
      unsigned char h[2];
      COHORT_TRY_VOID(ReadExact(h, 2, deadline));
      bool fin = h[0] & 0x80;
      int opcode = h[0] & 0x0f;
      bool masked = h[1] & 0x80;
      uint64_t len = h[1] & 0x7f;
      if (len == 126) {
        unsigned char b[2];
        COHORT_TRY_VOID(ReadExact(b, 2, deadline));
        len = (uint64_t(b[0]) << 8) | b[1];
      } else if (len == 127) {
        unsigned char b[8];
        COHORT_TRY_VOID(ReadExact(b, 8, deadline));
        len = 0;
        for (unsigned char x : b) len = (len << 8) | x;
      }
      if (len > (256u << 20)) return MakeError(ErrorCode::kInternal, "websocket: frame over 256 MiB");
      unsigned char mask[4] = {0, 0, 0, 0};
      if (masked) COHORT_TRY_VOID(ReadExact(mask, 4, deadline));
      std::string payload(len, '\0');
      if (len) COHORT_TRY_VOID(ReadExact(payload.data(), len, deadline));
      if (masked) {
        for (size_t i = 0; i < payload.size(); ++i) payload[i] ^= static_cast<char>(mask[i % 4]);
      }
      if (opcode == 0x9) {  // ping
        COHORT_TRY_VOID(SendFrame(0xA, payload));
        continue;
      }
      if (opcode == 0xA) continue;  // pong
      if (opcode == 0x8) return MakeError(ErrorCode::kUnavailable, "websocket: closed by the browser");
      message += payload;
      if (fin) return message;
    }
  }

 private:
  Result<void> SendFrame(int opcode, std::string_view payload) {
    std::string f;
    f += static_cast<char>(0x80 | opcode);
    if (payload.size() < 126) {
      f += static_cast<char>(0x80 | payload.size());
    } else if (payload.size() < 65536) {
      f += static_cast<char>(0x80 | 126);
      f += static_cast<char>(payload.size() >> 8);
      f += static_cast<char>(payload.size() & 0xff);
    } else {
      f += static_cast<char>(0x80 | 127);
      for (int s = 56; s >= 0; s -= 8) f += static_cast<char>((uint64_t(payload.size()) >> s) & 0xff);
    }
    // Client frames are masked (RFC 6455 5.3); the key need not be secret for a test.
    char mask[4];
    std::random_device rd;
    for (auto& m : mask) m = static_cast<char>(rd());
    f.append(mask, 4);
    for (size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
    return WriteAll(f);
  }

  Result<void> WriteAll(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errorf(ErrorCode::kUnavailable, "websocket: send failed: {}", strerror(errno));
      data.remove_prefix(static_cast<size_t>(n));
    }
    return {};
  }

  Result<void> ReadExact(void* buf, size_t n, Deadline deadline) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return MakeError(ErrorCode::kDeadlineExceeded, "websocket: timed out waiting for the browser");
      pollfd pfd{fd_, POLLIN, 0};
      int r = poll(&pfd, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      ssize_t got = recv(fd_, p, n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return MakeError(ErrorCode::kUnavailable, "websocket: connection closed");
      p += got;
      n -= static_cast<size_t>(got);
    }
    return {};
  }

  int fd_ = -1;
};

class CdpSession {
 public:
  Result<void> Connect(int port, const std::string& browser_path, Deadline deadline) {
    return ws_.Connect(port, browser_path, deadline);
  }

  // Opens a page target and attaches to it; later calls go to that page.
  Result<void> Attach(Deadline deadline) {
    session_.clear();
    json target = COHORT_TRY(Call("Target.createTarget", {{"url", "about:blank"}}, deadline));
    json attached = COHORT_TRY(
        Call("Target.attachToTarget", {{"targetId", target["targetId"]}, {"flatten", true}}, deadline));
    session_ = attached["sessionId"].get<std::string>();
    return {};
  }

  // Sends a command and waits for its reply; a protocol error becomes kInternal.
  Result<json> Call(const std::string& method, json params, Deadline deadline) {
    json msg = {{"id", ++next_id_}, {"method", method}, {"params", std::move(params)}};
    if (!session_.empty()) msg["sessionId"] = session_;
    COHORT_TRY_VOID(ws_.SendText(msg.dump()));
    while (true) {
      std::string text = COHORT_TRY(ws_.Receive(deadline));
      json reply = json::parse(text, nullptr, false);
      if (!reply.is_object() || !reply.contains("id") || reply["id"] != next_id_) continue;  // an event
      if (reply.contains("error")) return Errorf(ErrorCode::kInternal, "{}: {}", method, reply["error"].dump());
      return reply.value("result", json::object());
    }
  }

  // Evaluates `expression` in the page (awaiting a promise) and returns its value.
  Result<json> Evaluate(const std::string& expression, Deadline deadline) {
    json r = COHORT_TRY(Call("Runtime.evaluate",
                             {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}},
                             deadline));
    if (r.contains("exceptionDetails")) {
      return Errorf(ErrorCode::kInternal, "page threw: {}", r["exceptionDetails"].dump());
    }
    return r["result"].value("value", json());
  }

  // A real mouse click (press and release) at page coordinates.
  Result<void> Click(double x, double y, Deadline deadline) {
    for (const char* type : {"mouseMoved", "mousePressed", "mouseReleased"}) {
      json p = {{"type", type}, {"x", x}, {"y", y}, {"button", "left"}, {"clickCount", 1}};
      if (std::string(type) == "mouseMoved") p["button"] = "none";
      COHORT_TRY(Call("Input.dispatchMouseEvent", p, deadline));
    }
    return {};
  }

 private:
  WebSocket ws_;
  int64_t next_id_ = 0;
  std::string session_;
};

// A headless Chromium with its own profile; killed (its whole process group) on destruction.
class HeadlessChromium {
 public:
  ~HeadlessChromium() {
    if (proc_.valid()) {
      proc_.Signal(SIGKILL, /*group=*/true);  // the browser and its renderers
      (void)proc_.Wait();
    }
  }

  // The browser binary: $COHORT_CHROMIUM, else the first of chromium, chromium-browser,
  // google-chrome found in PATH; empty if none.
  static std::string FindBinary() {
    if (const char* env = std::getenv("COHORT_CHROMIUM"); env && *env) return env;
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/bin";
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      size_t start = 0;
      while (start <= dirs.size()) {
        size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        std::string candidate = dirs.substr(start, end - start) + "/" + name;
        if (access(candidate.c_str(), X_OK) == 0) return candidate;
        start = end + 1;
      }
    }
    return "";
  }

  // Starts the browser with its profile in `dir` and connects a session to a fresh page.
  // kUnavailable (with the browser's log) when it cannot start here.
  // `extra` is appended to the browser's arguments.
  Result<void> Start(const std::string& binary, const std::string& dir, int width, int height,
                     const std::vector<std::string>& extra = {}) {
    std::filesystem::create_directories(dir + "/profile");
    std::filesystem::create_directories(dir + "/tmp");
    log_path_ = dir + "/chromium.log";
    SpawnOptions o;
    // Its scratch files (org.chromium.Chromium.*) go with the test's directory.
    o.env = {{"TMPDIR", dir + "/tmp"}};
    o.argv = {binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--no-default-browser-check", "--disable-extensions",
              "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
              "--user-data-dir=" + dir + "/profile", fmt::format("--window-size={},{}", width, height)};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.argv.push_back("about:blank");
    o.stdout_path = log_path_;
    o.new_process_group = true;
    o.parent_death_signal = SIGKILL;
    proc_ = COHORT_TRY(Subprocess::Spawn(o));
    // DevToolsActivePort: the port on line 1 and the browser's WebSocket path on line 2.
    std::string port_file = dir + "/profile/DevToolsActivePort";
    auto deadline = After(std::chrono::seconds(45));
    int port = 0;
    std::string path;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(port_file);
      if (in >> port >> path && port > 0 && !path.empty()) break;
      port = 0;
      if (auto done = proc_.TryWait()) {
        return Errorf(ErrorCode::kUnavailable, "chromium exited ({}) before it listened; log:\n{}",
                      done->ToString(), Log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port == 0) return Errorf(ErrorCode::kUnavailable, "chromium wrote no DevToolsActivePort in 45 s; log:\n{}", Log());
    COHORT_TRY_VOID(cdp_.Connect(port, path, After(std::chrono::seconds(15))));
    COHORT_TRY_VOID(cdp_.Attach(After(std::chrono::seconds(15))));
    return {};
  }

  CdpSession& cdp() { return cdp_; }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }

 private:
  Subprocess proc_;
  CdpSession cdp_;
  std::string log_path_;
};

}  // namespace cohort::testing
