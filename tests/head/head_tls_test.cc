// The head's TLS (head/head_tls.h) against an in-process head: its authority and
// certificate on disk, registration with a certificate request, mutual TLS on the agent
// protocol (no certificate, another node's certificate, a revoked join token), renewal
// by a real agent with a short certificate lifetime, and the head's calls to an agent
// (only the head's certificate may make them).
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "agent/agent.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/mutex.h"
#include "common/tls.h"
#include "head/head.h"
#include "head/head_tls.h"
#include "head/router.h"

namespace cohort::head {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 0777) : 0;
}

// The SHA-256 fingerprint of the certificate the TLS server at 127.0.0.1:`port` presents
// (its handshake, not trusting it); "" if it completes none.
std::string ServerCertFingerprint(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      if (X509* peer = SSL_get0_peer_certificate(ssl)) {
        unsigned char md[32];
        unsigned int len = 0;
        X509_digest(peer, EVP_sha256(), md, &len);
        for (unsigned i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
      }
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  close(fd);
  return out;
}

class HeadTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-head-tls-XXXXXX";
    dir_ = mkdtemp(tmpl);
    ASSERT_NO_FATAL_FAILURE(StartHead());
  }
  void TearDown() override {
    head_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void StartHead(std::vector<std::string> sans = {}) {
    head_.reset();
    HeadConfig config;
    config.port = port_;
    config.state_dir = dir_ + "/head";
    config.http_threads = 2;
    config.timing.heartbeat_interval_ms = 200;
    config.timing.fence_timeout_ms = 300'000;
    config.timing.failure_timeout_ms = 600'000;
    config.client_config_path = "";
    config.node_cert_ttl_ms = node_cert_ttl_ms_;
    config.tls_san = std::move(sans);
    auto h = HeadServer::Start(config);
    ASSERT_TRUE(h.has_value()) << h.error().message;
    head_ = std::move(*h);
    port_ = head_->port();
    admin_ = Slurp(config.state_dir + "/admin.token");
    join_ = Slurp(config.state_dir + "/join.token");
    auto ca = tls::ReadCaFile(config.state_dir + "/tls/ca.crt");
    ASSERT_TRUE(ca.has_value()) << ca.error().message;
    ca_ = *ca;
  }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }

  // A client that trusts the head's authority, with `token` and, optionally, `id`.
  HttpClient Client(const std::string& token, std::shared_ptr<const tls::Identity> id = nullptr) const {
    HttpClient c(url(), Millis(5000));
    c.set_bearer_token(token);
    std::shared_ptr<tls::IdentitySlot> slot;
    if (id) {
      slot = std::make_shared<tls::IdentitySlot>();
      slot->Set(std::move(id));
    }
    c.set_tls(tls::ClientOptions{ca_, slot});
    return c;
  }

  struct Node {
    std::string credential;
    std::shared_ptr<const tls::Identity> identity;
    json reply;
  };
  // Registers `name` with a join token and a certificate request, as an agent does.
  Result<Node> Register(const std::string& name, const std::string& token, const std::string& address = "127.0.0.1",
                        const std::string& agent_url = "https://127.0.0.1:1") {
    std::string key = tls::NewPrivateKeyPem().value();
    api::Registration reg;
    reg.name = name;
    reg.address = address;
    reg.agent_url = agent_url;
    reg.incarnation = "inc-" + name;
    reg.cpus = 4;
    reg.csr = tls::MakeCsrPem(key, "anything").value();
    Node n;
    n.reply = COHORT_TRY(Client(token).Post(api::routes::kAgentRegister, api::ToJson(reg)));
    n.credential = n.reply.value("node_credential", "");
    n.identity = COHORT_TRY(tls::Identity::Parse(n.reply.value("certificate", ""), key));
    return n;
  }

  Result<json> Heartbeat(const std::string& name, const std::string& credential,
                         std::shared_ptr<const tls::Identity> id) {
    api::Heartbeat hb;
    hb.incarnation = "inc-" + name;
    return Client(credential, std::move(id)).Post(api::routes::AgentHeartbeat(name), api::ToJson(hb));
  }

  std::string dir_;
  int port_ = 0;
  int64_t node_cert_ttl_ms_ = 7LL * 24 * 3600 * 1000;
  std::unique_ptr<HeadServer> head_;
  std::string admin_, join_, ca_;
};

TEST_F(HeadTlsTest, AuthorityAndCertificateOnDisk) {
  const std::string tls_dir = dir_ + "/head/tls";
  EXPECT_EQ(ModeOf(tls_dir), 0700u);
  EXPECT_EQ(ModeOf(tls_dir + "/ca.key"), 0600u);
  EXPECT_EQ(ModeOf(tls_dir + "/head.key"), 0600u);
  EXPECT_EQ(ModeOf(tls_dir + "/ca.crt"), 0644u);
  auto cert = tls::ReadPemFile(tls_dir + "/head.crt");
  ASSERT_TRUE(cert.has_value());
  auto info = tls::Inspect(*cert);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->common_name, tls::kHeadName);
  EXPECT_NE(std::find(info->ip_addresses.begin(), info->ip_addresses.end(), "127.0.0.1"), info->ip_addresses.end());
  EXPECT_TRUE(tls::VerifyIssuedBy(ca_, *cert, NowUnixMs()).has_value());
  EXPECT_EQ(head_->url().substr(0, 8), "https://");

  // A restart keeps the authority and the certificate; a new name issues a new one.
  ASSERT_NO_FATAL_FAILURE(StartHead());
  EXPECT_EQ(*tls::ReadPemFile(tls_dir + "/head.crt"), *cert);
  ASSERT_NO_FATAL_FAILURE(StartHead({"cohort.example", "10.9.8.7"}));
  auto again = tls::ReadPemFile(tls_dir + "/head.crt");
  EXPECT_NE(*again, *cert);
  auto info2 = tls::Inspect(*again);
  EXPECT_NE(std::find(info2->dns_names.begin(), info2->dns_names.end(), "cohort.example"), info2->dns_names.end());
  EXPECT_NE(std::find(info2->ip_addresses.begin(), info2->ip_addresses.end(), "10.9.8.7"), info2->ip_addresses.end());
  EXPECT_EQ(*tls::ReadPemFile(tls_dir + "/ca.crt"), ca_);

  // A plain-HTTP client reaches nothing.
  auto plain = HttpClient("http://127.0.0.1:" + std::to_string(port_), Millis(3000)).Get("/v1/health");
  EXPECT_FALSE(plain.has_value());
  EXPECT_TRUE(Client(admin_).Get("/v1/health").has_value());
}

TEST_F(HeadTlsTest, HalfAnAuthorityIsRefused) {
  head_.reset();
  std::filesystem::remove(dir_ + "/head/tls/ca.key");
  HeadConfig config;
  config.state_dir = dir_ + "/head";
  config.port = 0;
  config.client_config_path = "";
  auto h = HeadServer::Start(config);
  ASSERT_FALSE(h.has_value());
  EXPECT_NE(h.error().message.find("holds ca.crt but not ca.key"), std::string::npos) << h.error().message;
}

TEST_F(HeadTlsTest, RegistrationIssuesTheNodeItsCertificate) {
  auto n = Register("gpu-1", join_);
  ASSERT_TRUE(n.has_value()) << n.error().message;
  EXPECT_EQ(n->identity->info().common_name, "gpu-1");
  EXPECT_EQ(n->identity->info().ip_addresses, std::vector<std::string>{"127.0.0.1"});
  EXPECT_GT(n->reply.value("certificate_expires_ms", int64_t{0}), NowUnixMs());
  EXPECT_TRUE(tls::VerifyIssuedBy(ca_, n->identity->cert_pem(), NowUnixMs()).has_value());

  // Without a certificate request, or with an http agent URL, a TLS head refuses.
  api::Registration reg;
  reg.name = "gpu-2";
  reg.address = "127.0.0.1";
  reg.agent_url = "https://127.0.0.1:1";
  reg.incarnation = "inc";
  auto no_csr = Client(join_).Post(api::routes::kAgentRegister, api::ToJson(reg));
  ASSERT_FALSE(no_csr.has_value());
  EXPECT_EQ(no_csr.error().field, "csr");
  reg.csr = "-----BEGIN CERTIFICATE REQUEST-----\nnot one\n-----END CERTIFICATE REQUEST-----\n";
  auto bad_csr = Client(join_).Post(api::routes::kAgentRegister, api::ToJson(reg));
  ASSERT_FALSE(bad_csr.has_value());
  EXPECT_EQ(bad_csr.error().field, "csr");
  reg.csr = tls::MakeCsrPem(tls::NewPrivateKeyPem().value(), "x").value();
  reg.agent_url = "http://127.0.0.1:1";
  auto plain_agent = Client(join_).Post(api::routes::kAgentRegister, api::ToJson(reg));
  ASSERT_FALSE(plain_agent.has_value());
  EXPECT_EQ(plain_agent.error().field, "agent_url");
  // None of the refused registrations made a node.
  auto nodes = Client(admin_).Get("/v1/nodes");
  ASSERT_TRUE(nodes.has_value());
  EXPECT_EQ((*nodes)["nodes"].size(), 1u);
}

// A node's certificate is a server certificate of the authority every client of the head
// trusts, for the name and address the registration claims: a join token must not get one
// that passes for the head's (its name, which agents accept as the head's; a wildcard; or
// the head's own address, claimed from another machine).
TEST_F(HeadTlsTest, NoNodeGetsACertificateThatPassesForTheHeads) {
  auto named_head = Register(tls::kHeadName, join_);
  ASSERT_FALSE(named_head.has_value());
  EXPECT_EQ(named_head.error().field, "name") << named_head.error().message;
  EXPECT_NE(named_head.error().message.find("the name of the head's certificate"), std::string::npos)
      << named_head.error().message;
  for (const std::string address : {"*.example.com", "*", "a b", "head..example.com"}) {
    auto wild = Register("gpu-w", join_, address);
    ASSERT_FALSE(wild.has_value()) << address;
    EXPECT_EQ(wild.error().field, "address") << address << ": " << wild.error().message;
  }
  auto nodes = Client(admin_).Get("/v1/nodes");
  ASSERT_TRUE(nodes.has_value());
  EXPECT_TRUE((*nodes)["nodes"].empty()) << nodes->dump();

  // The head's own address: from this machine (a local cluster's agents), yes; from
  // another, no. The connections of this test all come from this machine, so the head's
  // check is called as the handler calls it, with another peer address.
  const HeadTls* head_tls = head_->router().tls();
  ASSERT_NE(head_tls, nullptr);
  const std::string csr = tls::MakeCsrPem(tls::NewPrivateKeyPem().value(), "x").value();
  EXPECT_TRUE(head_tls->IssueNode("gpu-1", "127.0.0.1", csr, NowUnixMs(), "127.0.0.1").has_value());
  EXPECT_TRUE(head_tls->IssueNode("gpu-1", "localhost", csr, NowUnixMs(), "::1").has_value());
  for (const std::string head_name : {"127.0.0.1", "localhost"}) {
    auto remote = head_tls->IssueNode("gpu-1", head_name, csr, NowUnixMs(), "192.0.2.7");
    ASSERT_FALSE(remote.has_value()) << head_name;
    EXPECT_EQ(remote.error().field, "address");
    EXPECT_NE(remote.error().message.find("is the head's own address"), std::string::npos) << remote.error().message;
  }
  // Its own address, from wherever: yes.
  auto own = head_tls->IssueNode("gpu-1", "192.0.2.7", csr, NowUnixMs(), "192.0.2.7");
  ASSERT_TRUE(own.has_value()) << own.error().message;
  EXPECT_EQ(tls::Inspect(own->cert_pem)->ip_addresses, std::vector<std::string>{"192.0.2.7"});
  EXPECT_TRUE(head_tls->IssueNode("gpu-2", "gpu-2.example.com", csr, NowUnixMs(), "192.0.2.8").has_value());
  EXPECT_TRUE(head_tls->IssueNode("gpu-3", "gpu_3.lab", csr, NowUnixMs(), "192.0.2.9").has_value());
}

// An agent of this test: a TLS server (its certificate set once known) that answers the
// head's GET /v1/images and keeps the credential each call presented.
class FakeAgent {
 public:
  explicit FakeAgent(const std::string& ca) : ctx_(tls::ServerContext::Create(ca).value()) {
    HttpServerOptions o;
    o.tls = ctx_;
    server_ = std::make_unique<HttpServer>(o);
    server_->Get(api::routes::kAgentImages, [this](const httplib::Request& req, httplib::Response& res) {
      MutexLock lock(mu_);
      bearers_.push_back(req.get_header_value("Authorization"));
      res.set_content(R"({"images": []})", "application/json");
    });
    port_ = server_->Reserve().value();
  }
  ~FakeAgent() {
    server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  void Serve(std::shared_ptr<const tls::Identity> id) {
    ctx_->SetIdentity(std::move(id));
    ASSERT_TRUE(server_->Listen().has_value());
    thread_ = std::thread([this] { server_->Serve(); });
  }
  std::vector<std::string> bearers() {
    MutexLock lock(mu_);
    return bearers_;
  }

 private:
  std::shared_ptr<tls::ServerContext> ctx_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
  Mutex mu_;
  std::vector<std::string> bearers_;
};

// The head's calls to a node's agent carry that node's credential (and users' exec input):
// the agent must show that node's certificate, not merely one for its address, which any
// node can claim (every node of a local cluster has 127.0.0.1).
TEST_F(HeadTlsTest, TheHeadCallsANodesAgentOnlyThroughThatNodesCertificate) {
  FakeAgent own(ca_), other(ca_);
  auto a = Register("node-a", join_, "127.0.0.1", own.url());
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_NO_FATAL_FAILURE(own.Serve(a->identity));
  auto listed = Client(admin_).Get("/v1/nodes/node-a/images");
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  EXPECT_EQ(own.bearers(), std::vector<std::string>{"Bearer " + a->credential});

  // Node b's agent URL serves node a's certificate (same address): the head does not call it.
  auto b = Register("node-b", join_, "127.0.0.1", other.url());
  ASSERT_TRUE(b.has_value()) << b.error().message;
  ASSERT_NO_FATAL_FAILURE(other.Serve(a->identity));
  auto crossed = Client(admin_).Get("/v1/nodes/node-b/images");
  ASSERT_FALSE(crossed.has_value());
  EXPECT_EQ(crossed.error().code, ErrorCode::kUnavailable) << crossed.error().message;
  EXPECT_TRUE(other.bearers().empty()) << "node b's credential went to a server with node a's certificate";
}

TEST_F(HeadTlsTest, ANodeCredentialNeedsThatNodesCertificate) {
  auto a = Register("node-a", join_);
  auto b = Register("node-b", join_);
  ASSERT_TRUE(a.has_value() && b.has_value());
  // Its own certificate and credential: accepted.
  auto ok = Heartbeat("node-a", a->credential, a->identity);
  EXPECT_TRUE(ok.has_value()) << ok.error().message;
  // The credential alone (stolen, say) is not enough.
  auto bare = Heartbeat("node-a", a->credential, nullptr);
  ASSERT_FALSE(bare.has_value());
  EXPECT_EQ(bare.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(bare.error().message.find("without a client certificate"), std::string::npos) << bare.error().message;
  // Node b's certificate with node a's credential: refused.
  auto crossed = Heartbeat("node-a", a->credential, b->identity);
  ASSERT_FALSE(crossed.has_value());
  EXPECT_EQ(crossed.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(crossed.error().message.find("node node-b's certificate"), std::string::npos) << crossed.error().message;
  // Node b, fully itself, may not act for node a.
  auto other = Heartbeat("node-a", b->credential, b->identity);
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kPermissionDenied);
  // A certificate from another authority does not get past the handshake.
  auto stranger_ca = tls::NewAuthority("stranger", 24LL * 3600 * 1000, NowUnixMs()).value();
  std::string key = tls::NewPrivateKeyPem().value();
  tls::LeafProfile p{"node-a", {}, {"127.0.0.1"}, true, true, 3600'000};
  auto forged = tls::Identity::Parse(tls::IssueForKey(stranger_ca, key, p, NowUnixMs()).value(), key).value();
  auto r = Heartbeat("node-a", a->credential, forged);
  ASSERT_FALSE(r.has_value());
  // Under TLS 1.3 the client learns of it when it sends: the server closed the connection.
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().message;
  auto metrics = Client(admin_).GetRaw("/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_NE(metrics->body.find("cohort_http_tls_handshake_failures_total 1"), std::string::npos)
      << metrics->body.substr(0, 4000);
  // Every connection was accepted first; the heartbeats above each made a handshake that
  // completed (their refusals came after it), the forged one a handshake that failed.
  const auto sample = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::atof(metrics->body.c_str() + at + name.size() + 2);
  };
  const double handshakes = sample("cohort_http_tls_handshakes_total");
  EXPECT_GE(handshakes, 3) << metrics->body.substr(0, 4000);
  EXPECT_GE(sample("cohort_http_accepted_connections_total"), handshakes + 1);
}

TEST_F(HeadTlsTest, RevokedJoinTokenGetsNoCertificate) {
  auto created = Client(admin_).Post("/v1/tokens", json{{"user", "rack-7"}, {"role", "agent"}});
  ASSERT_TRUE(created.has_value()) << created.error().message;
  const std::string token = (*created)["token"];
  ASSERT_TRUE(Register("rack-7-1", token).has_value());
  auto revoked = Client(admin_).Post(api::routes::TokenRevoke((*created)["id"].get<std::string>()), json::object());
  ASSERT_TRUE(revoked.has_value()) << revoked.error().message;
  auto refused = Register("rack-7-2", token);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated);
}

TEST_F(HeadTlsTest, NodesRenewTheirCertificates) {
  auto n = Register("gpu-1", join_);
  ASSERT_TRUE(n.has_value());
  std::string key = tls::NewPrivateKeyPem().value();
  std::string csr = tls::MakeCsrPem(key, "gpu-1").value();
  auto renewed = Client(n->credential, n->identity).Post(api::routes::AgentCertificate("gpu-1"), json{{"csr", csr}});
  ASSERT_TRUE(renewed.has_value()) << renewed.error().message;
  auto id = tls::Identity::Parse((*renewed)["certificate"], key);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ((*id)->info().common_name, "gpu-1");
  EXPECT_NE((*id)->info().sha256, n->identity->info().sha256);
  // The renewed certificate works; renewing for another node does not.
  EXPECT_TRUE(Heartbeat("gpu-1", n->credential, *id).has_value());
  auto other = Client(n->credential, n->identity).Post(api::routes::AgentCertificate("gpu-2"), json{{"csr", csr}});
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kPermissionDenied);
  // A user's token cannot get a node certificate at all.
  auto user = Client(admin_).Post(api::routes::AgentCertificate("gpu-1"), json{{"csr", csr}});
  ASSERT_FALSE(user.has_value());
  EXPECT_EQ(user.error().code, ErrorCode::kPermissionDenied);
}

// A real agent: it registers over TLS, serves HTTPS with its node's certificate, renews it
// when two thirds of its (here, three-second) life have passed, and accepts the head's
// calls but no one else's.
TEST_F(HeadTlsTest, AgentRenewsAndOnlyTheHeadMayCallIt) {
  node_cert_ttl_ms_ = 3000;
  ASSERT_NO_FATAL_FAILURE(StartHead());
  agent::AgentConfig c;
  c.head_url = url();
  c.name = "n1";
  c.address = "127.0.0.1";
  c.simulated_gpus = 1;
  c.cpus = 1;
  c.work_dir = dir_ + "/agent";
  c.shim_path = "/bin/false";
  c.join_token = join_;
  c.head_ca_file = dir_ + "/head/tls/ca.crt";
  c.task_user = agent::TaskUserPolicy::kAgentUser;
  auto a = agent::Agent::Start(c);
  ASSERT_TRUE(a.has_value()) << a.error().message;
  const std::string agent_url = (*a)->url();
  ASSERT_EQ(agent_url.substr(0, 8), "https://");
  const int agent_port = std::stoi(agent_url.substr(agent_url.rfind(':') + 1));
  std::string first;
  ASSERT_TRUE(WaitUntil([&] { return !(first = ServerCertFingerprint(agent_port)).empty(); }, std::chrono::seconds(10)))
      << "the agent never served its certificate";
  std::string later;
  ASSERT_TRUE(WaitUntil([&] {
    later = ServerCertFingerprint(agent_port);
    return !later.empty() && later != first;
  }, std::chrono::seconds(15))) << "the agent did not renew its certificate";
  // Still UP, heartbeating with the renewed certificate.
  auto node = Client(admin_).Get("/v1/nodes/n1");
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ((*node)["state"], "UP");

  // A client trusting the authority but presenting no certificate (or a node's) may not
  // wake the agent or read its logs; the head, with its certificate, may.
  HttpClient anyone(agent_url, Millis(3000));
  anyone.set_tls(tls::ClientOptions{ca_, nullptr});
  auto wake = anyone.Post(api::routes::kAgentWake, json::object());
  ASSERT_FALSE(wake.has_value());
  EXPECT_EQ(wake.error().code, ErrorCode::kUnauthenticated);
  auto logs = anyone.GetRaw(std::string(api::routes::kAgentLogs) + "?job=1&attempt=0&rank=0");
  ASSERT_TRUE(logs.has_value());
  EXPECT_EQ(logs->status, 401);
  EXPECT_TRUE(anyone.Get(api::routes::kHealth).has_value());  // health and metrics are public
  auto head_key = tls::ReadPemFile(dir_ + "/head/tls/head.key");
  auto head_cert = tls::ReadPemFile(dir_ + "/head/tls/head.crt");
  auto slot = std::make_shared<tls::IdentitySlot>();
  slot->Set(tls::Identity::Parse(*head_cert, *head_key).value());
  HttpClient as_head(agent_url, Millis(3000));
  as_head.set_tls(tls::ClientOptions{ca_, slot});
  auto woken = as_head.Post(api::routes::kAgentWake, json::object());
  EXPECT_TRUE(woken.has_value()) << woken.error().message;
  (*a)->Stop();
  (*a)->Wait();
}

}  // namespace
}  // namespace cohort::head
