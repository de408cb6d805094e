#include "store_test_util.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "comm/file_store.h"
#include "comm/http_store.h"
#include "comm/tcp_store.h"
#include "common/http.h"
#include "common/json.h"

namespace cohort::comm::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/cohort-comm-test-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  path_ = p ? std::filesystem::canonical(p).string() : std::string();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

ReservedPort::ReservedPort() {
  fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port_ = ntohs(a.sin_port);
  }
}

FakeRendezvousServer::FakeRendezvousServer() {
  // Parked GETs hold a worker each, as on the head: give it enough.
  server_.new_task_queue = [] { return new httplib::ThreadPool(96); };
  constexpr const char* kKeys = R"(/v1/rendezvous/([^/]+)/keys/([\s\S]+))";
  constexpr const char* kAdd = R"(/v1/rendezvous/([^/]+)/add/([\s\S]+))";

  server_.Put(kKeys, [this](const httplib::Request& req, httplib::Response& res) {
    if (!CheckToken(req, res)) return;
    {
      std::lock_guard lock(mu_);
      keys_[req.matches[2].str()] = req.body;
    }
    cv_.notify_all();
    SendJson(res, json{{"ok", true}});
  });

  server_.Get(kKeys, [this](const httplib::Request& req, httplib::Response& res) {
    if (!CheckToken(req, res)) return;
    std::string key = req.matches[2].str();
    auto wait = QueryIntParam(req, "wait_ms", 0, 0, 3'600'000);
    if (!wait) return SendError(res, wait.error());
    std::unique_lock lock(mu_);
    max_wait_ms_ = std::max(max_wait_ms_, *wait);
    bool found = cv_.wait_for(lock, Millis(std::min<int64_t>(*wait, 1000)), [&] { return keys_.contains(key); });
    if (!found) {
      return SendError(res, Error{ErrorCode::kNotFound, "key '" + key + "' is not set", "key"});
    }
    res.set_content(keys_[key], "application/octet-stream");
  });

  server_.Post(kAdd, [this](const httplib::Request& req, httplib::Response& res) {
    if (!CheckToken(req, res)) return;
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("delta") || !body["delta"].is_number_integer()) {
      return SendError(res, Error{ErrorCode::kInvalidArgument, "delta: is required", "delta"});
    }
    int64_t sum = 0;
    {
      std::lock_guard lock(mu_);
      std::string& v = keys_[req.matches[2].str()];
      sum = (v.empty() ? 0 : std::stoll(v)) + body["delta"].get<int64_t>();
      v = std::to_string(sum);
    }
    cv_.notify_all();
    SendJson(res, json{{"value", sum}});
  });

  port_ = server_.bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_.listen_after_bind(); });
  auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (!server_.is_running() && SteadyClock::now() < deadline) std::this_thread::yield();
}

FakeRendezvousServer::~FakeRendezvousServer() {
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

bool FakeRendezvousServer::CheckToken(const httplib::Request& req, httplib::Response& res) {
  {
    std::lock_guard lock(mu_);
    targets_.push_back(req.target);
  }
  std::string token = req.matches[1].str();
  if (token == "live") return true;
  SendError(res, Error{ErrorCode::kNotFound, token == "ended"
                                                 ? "job 7 attempt 0 is not running; its rendezvous keys are gone"
                                                 : "unknown rendezvous token"});
  return false;
}

std::string FakeRendezvousServer::BaseUrl(const std::string& token) const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/v1/rendezvous/" + token;
}

std::vector<std::string> FakeRendezvousServer::Targets() const {
  std::lock_guard lock(mu_);
  return targets_;
}

int64_t FakeRendezvousServer::MaxWaitMs() const {
  std::lock_guard lock(mu_);
  return max_wait_ms_;
}

std::set<std::string> FakeRendezvousServer::Keys() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [k, v] : keys_) out.insert(k);
  return out;
}

namespace {

template <typename T>
std::unique_ptr<Store> OrFail(Result<std::unique_ptr<T>> r) {
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  if (!r) return nullptr;
  return std::move(*r);
}

class FileBackend final : public StoreBackend {
 public:
  std::unique_ptr<Store> NewClient() override { return OrFail(FileStore::Open(dir_.path() + "/store")); }

 private:
  TempDir dir_;
};

class TcpBackend final : public StoreBackend {
 public:
  TcpBackend() {
    auto s = TcpStore::Listen(0, {.timeout = Millis(10'000)});
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    if (s) server_ = std::move(*s);
  }
  std::unique_ptr<Store> NewClient() override {
    if (!server_) return nullptr;
    return OrFail(TcpStore::Connect("127.0.0.1", server_->port(), {.timeout = Millis(10'000)}));
  }

 private:
  std::unique_ptr<TcpStore> server_;
};

class HttpBackend final : public StoreBackend {
 public:
  std::unique_ptr<Store> NewClient() override { return OrFail(HttpStore::Open(fake_.BaseUrl(), Millis(10'000))); }

 private:
  FakeRendezvousServer fake_;
};

}  // namespace

std::unique_ptr<StoreBackend> MakeBackend(BackendKind kind) {
  switch (kind) {
    case BackendKind::kFile: return std::make_unique<FileBackend>();
    case BackendKind::kTcp: return std::make_unique<TcpBackend>();
    case BackendKind::kHttp: return std::make_unique<HttpBackend>();
  }
  return nullptr;
}

std::string BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kFile: return "file";
    case BackendKind::kTcp: return "tcp";
    case BackendKind::kHttp: return "http";
  }
  return "?";
}

}  // namespace cohort::comm::testing
