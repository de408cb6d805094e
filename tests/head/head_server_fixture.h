// An in-process head for the head's HTTP tests: HeadServer on a kernel-chosen port with a
// fresh state directory, its "agents" registered by calls into its Cluster (nobody
// heartbeats, so the timing keeps every node UP for the test's lifetime), and an HTTP
// client to it. A test fixture may change the configuration (Configure) and restart the
// head on the same state (Restart).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/json.h"
#include "head/cluster.h"
#include "head/head.h"

namespace cohort::head {

class HeadServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-head-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    config_.port = 0;
    config_.state_dir = dir_ + "/head";
    config_.http_threads = 4;
    config_.timing.heartbeat_interval_ms = 1000;
    config_.timing.fence_timeout_ms = 300'000;
    config_.timing.failure_timeout_ms = 600'000;
    config_.client_config_path = "";  // never the user's own
    // Routes and their checks over plain HTTP; TLS itself is head_tls_test's.
    config_.tls = false;
    Configure(config_);
    Restart();
  }

  // Changes the configuration before the head starts.
  virtual void Configure(HeadConfig&) {}

  // Stops the head (if it runs) and starts it again on the same state directory.
  void Restart() {
    http_.reset();
    head_.reset();
    auto h = HeadServer::Start(config_);
    ASSERT_TRUE(h.has_value()) << h.error().message;
    head_ = std::move(*h);
    // The admin token the first start wrote (head/auth.h), sent with every request.
    std::ifstream token_file(config_.state_dir + "/admin.token");
    ASSERT_TRUE(std::getline(token_file, admin_token_) && !admin_token_.empty());
    http_ = std::make_unique<httplib::Client>("127.0.0.1", head_->port());
    http_->set_default_headers({{"Authorization", "Bearer " + admin_token_}});
  }
  void TearDown() override {
    head_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Cluster& cluster() { return head_->cluster(); }

  // Registers node `name` with `gpus` simulated 80 GB GPUs named "Test GPU 80GB".
  void AddNode(const std::string& name, int gpus) {
    api::Registration reg;
    reg.name = name;
    reg.address = "127.0.0.1";
    reg.agent_url = "http://127.0.0.1:1";
    reg.incarnation = "inc-" + name;
    reg.cpus = 16;
    for (int g = 0; g < gpus; ++g) {
      api::Gpu gpu;
      gpu.index = g;
      gpu.name = "Test GPU 80GB";
      gpu.uuid = name + "-gpu" + std::to_string(g);
      gpu.memory_bytes = 80LL << 30;
      gpu.simulated = true;
      reg.gpus.push_back(gpu);
    }
    auto r = cluster().Register(reg);
    ASSERT_TRUE(r.has_value()) << r.error().message;
  }

  // A new token of `role` for `user`, made through the API with the admin token.
  std::string MakeToken(const std::string& user, const std::string& role) {
    auto res = http_->Post("/v1/tokens", json{{"user", user}, {"role", role}}.dump(), "application/json");
    EXPECT_TRUE(res && res->status == 201) << (res ? res->body : "no reply");
    return res ? json::parse(res->body).value("token", "") : "";
  }

  // `method path` on a connection of its own, with `token` ("": none) and, for a change,
  // `body` of `content_type`.
  httplib::Result Send(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "{}", httplib::Headers extra = {},
                       const std::string& content_type = "application/json") {
    httplib::Client c("127.0.0.1", head_->port());
    httplib::Headers h = std::move(extra);
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    return method == "GET"    ? c.Get(path, h)
           : method == "POST" ? c.Post(path, h, body, content_type)
           : method == "PUT"  ? c.Put(path, h, body, content_type)
                              : c.Delete(path, h);
  }

  // GET `path`: expects 200 with a JSON body and returns it parsed (null if no reply).
  json GetJson(const std::string& path) {
    auto res = http_->Get(path);
    EXPECT_TRUE(res) << "no reply to " << path;
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    return json::parse(res->body);
  }

  std::string dir_;
  HeadConfig config_;
  std::unique_ptr<HeadServer> head_;
  std::unique_ptr<httplib::Client> http_;
  std::string admin_token_;
};

}  // namespace cohort::head
