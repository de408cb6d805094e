// TLS (common/tls.h): the authority, the certificates it issues and their checks, and
// HttpServer and HttpClient over TLS on loopback: server and client certificates, a
// client that trusts another authority, a certificate for another host, renewal, and
// clients that speak plain HTTP or stall in the handshake.
#include "common/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include <csignal>
#include <httplib.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/clock.h"
#include "common/http.h"
#include "common/http_server.h"
#include "common/tls_buffers.h"
#include "common/tls_seal.h"
#include "tls_test_util.h"

// As cohort's main does: every test here runs its TLS over the record-buffer pool.
COHORT_TLS_RECORD_BUFFER_POOL_AT_START();

namespace cohort::tls {
namespace {

using test_certs::kDay;
using test_certs::Leaf;
using test_certs::MakeCa;
using test_certs::MakeLeaf;

TEST(Tls, AuthorityIssuesCertificatesThatSayWhatWasAsked) {
  Authority ca = MakeCa();
  ASSERT_TRUE(CheckAuthority(ca, "ca").has_value());
  Leaf leaf = MakeLeaf(ca, "node-7", {"127.0.0.1", "::1"}, {"localhost", "gpu-7.example"});
  auto info = Inspect(leaf.cert_pem);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->common_name, "node-7");
  EXPECT_EQ(info->ip_addresses, (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_EQ(info->dns_names, (std::vector<std::string>{"localhost", "gpu-7.example"}));
  const int64_t now = NowUnixMs();
  EXPECT_LE(info->not_before_ms, now - kClockSkewMs + 1000);
  EXPECT_NEAR(static_cast<double>(info->not_after_ms), static_cast<double>(now + kDay), 2000.0);
  EXPECT_EQ(info->sha256.size(), 64u);
  EXPECT_TRUE(VerifyIssuedBy(ca.cert_pem, leaf.cert_pem, now).has_value());

  // Another authority's certificate, and this one past its expiry, do not verify.
  Authority other = MakeCa("other-ca");
  auto wrong = VerifyIssuedBy(other.cert_pem, leaf.cert_pem, now);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kUnauthenticated);
  auto late = VerifyIssuedBy(ca.cert_pem, leaf.cert_pem, now + 2 * kDay);
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().message.find("expired"), std::string::npos) << late.error().message;
}

TEST(Tls, CertificateRequestsAreCheckedBeforeSigning) {
  Authority ca = MakeCa();
  std::string key = NewPrivateKeyPem().value();
  std::string csr = MakeCsrPem(key, "whatever-the-agent-says").value();
  LeafProfile p{"gpu-3", {}, {"10.0.0.3"}, true, true, kDay};
  auto cert = IssueFromCsr(ca, csr, p, NowUnixMs());
  ASSERT_TRUE(cert.has_value()) << cert.error().message;
  // The head names the certificate, not the request; the key is the requester's.
  EXPECT_EQ(Inspect(*cert)->common_name, "gpu-3");
  EXPECT_TRUE(Identity::Parse(*cert, key).has_value());

  auto garbage = IssueFromCsr(ca, "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", p,
                              NowUnixMs());
  ASSERT_FALSE(garbage.has_value());
  EXPECT_EQ(garbage.error().field, "csr");
  // A request whose signature was tampered with: flip a character in its body.
  std::string tampered = csr;
  size_t mid = tampered.find('\n') + 40;
  tampered[mid] = tampered[mid] == 'A' ? 'B' : 'A';
  auto bad = IssueFromCsr(ca, tampered, p, NowUnixMs());
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().field, "csr");
}

TEST(Tls, AuthorityChecksCatchMismatchedFiles) {
  Authority a = MakeCa("a"), b = MakeCa("b");
  auto mixed = CheckAuthority(Authority{a.cert_pem, b.key_pem}, "--tls-ca");
  ASSERT_FALSE(mixed.has_value());
  EXPECT_NE(mixed.error().message.find("not the certificate's"), std::string::npos) << mixed.error().message;
  Leaf leaf = MakeLeaf(a, "leaf");
  auto not_ca = CheckAuthority(Authority{leaf.cert_pem, leaf.key_pem}, "--tls-ca");
  ASSERT_FALSE(not_ca.has_value());
  EXPECT_NE(not_ca.error().message.find("not a certificate authority"), std::string::npos);
  EXPECT_FALSE(Identity::Parse(leaf.cert_pem, b.key_pem).has_value());
}

// A TLS server on a free loopback port; GET /who answers the client certificate's name.
class TlsServer {
 public:
  TlsServer(const Authority& ca, const Leaf& leaf, Millis idle = Millis(5000), int per_client = 1024) {
    ctx_ = ServerContext::Create(ca.cert_pem).value();
    ctx_->SetIdentity(leaf.identity());
    HttpServerOptions o;
    o.tls = ctx_;
    o.max_connections_per_client = per_client;
    o.idle_timeout = idle;
    o.request_timeout = idle;
    server_ = std::make_unique<HttpServer>(o);
    server_->Get("/who", [](const httplib::Request& req, httplib::Response& res) {
      SendJson(res, json{{"peer", PeerName(req.ssl).value_or("")}});
    });
    PostWithBodyCap(*server_, "/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "application/octet-stream");
    });
    port_ = server_->Bind().value();
    thread_ = std::thread([this] { server_->Serve(); });
  }
  ~TlsServer() {
    server_->Stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  ServerContext& ctx() { return *ctx_; }
  HttpServer& server() { return *server_; }

 private:
  std::shared_ptr<ServerContext> ctx_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::thread thread_;
};

HttpClient Client(const std::string& url, const Authority& trust, std::shared_ptr<IdentitySlot> id = nullptr) {
  HttpClient c(url, Millis(5000));
  c.set_tls(ClientOptions{trust.cert_pem, std::move(id)});
  return c;
}

TEST(Tls, ServerAndClientCertificatesOverHttpServer) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName));

  // A client without a certificate (a user's CLI) is served; it is nobody in particular.
  auto anon = Client(server.url(), ca).Get("/who");
  ASSERT_TRUE(anon.has_value()) << anon.error().message;
  EXPECT_EQ((*anon)["peer"], "");

  // A client with a certificate from the authority is named by it, on every request of a
  // kept-alive connection.
  auto slot = std::make_shared<IdentitySlot>();
  slot->Set(MakeLeaf(ca, "node-1").identity());
  HttpClient node = Client(server.url(), ca, slot);
  for (int i = 0; i < 5; ++i) {
    auto who = node.Get("/who");
    ASSERT_TRUE(who.has_value()) << who.error().message;
    EXPECT_EQ((*who)["peer"], "node-1");
  }
  // A renewed certificate is presented on the next new connection.
  slot->Set(MakeLeaf(ca, "node-1-renewed").identity());
  auto renewed = Client(server.url(), ca, slot).Get("/who");
  ASSERT_TRUE(renewed.has_value());
  EXPECT_EQ((*renewed)["peer"], "node-1-renewed");

  // A body far larger than one TLS record goes both ways intact.
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  httplib::SSLClient raw("127.0.0.1", server.port());
  raw.enable_server_certificate_verification(false);
  auto echoed = raw.Post("/echo", big, "application/octet-stream");
  ASSERT_TRUE(echoed);
  EXPECT_EQ(echoed->status, 200);
  EXPECT_TRUE(echoed->body == big);
}

// A connection over a cap is told why over TLS, once its handshake is done: the refusal
// written in clear into the handshake made the client fail with "wrong version number"
// (the CLI: "the server's certificate is not from the authority this client trusts").
TEST(Tls, AConnectionOverACapIsToldWhyOverTls) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName), Millis(5000), /*per_client=*/1);
  HttpClient first = Client(server.url(), ca);  // keeps its connection for the next request
  ASSERT_TRUE(first.Get("/who").has_value());
  auto second = Client(server.url(), ca).Get("/who");
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kResourceExhausted) << second.error().message;
  EXPECT_NE(second.error().message.find("too many connections from 127.0.0.1 (at most 1 at once)"),
            std::string::npos)
      << second.error().message;
  EXPECT_TRUE(first.Get("/who").has_value()) << "the connection under the cap is served still";
}

// A process that runs no server (the CLI, a task's progress reporter) has SIGPIPE at its
// default action. A TLS client writing to a connection the server closed must get an
// error, not be killed: here the server refuses a 64 MiB body after its headers (413)
// and closes while the client is still writing it.
// The request path clears OpenSSL's error queue through ClearErrors, which only looks when
// it is empty: an error left there must still go, or SSL_get_error would call the next
// SSL_read's "want read" a failure.
TEST(Tls, ClearErrorsEmptiesAQueueThatHoldsErrors) {
  ERR_clear_error();
  ClearErrors();
  EXPECT_EQ(ERR_peek_error(), 0UL);
  ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
  ERR_raise(ERR_LIB_SYS, 1);
  ASSERT_NE(ERR_peek_error(), 0UL);
  ClearErrors();
  EXPECT_EQ(ERR_peek_error(), 0UL);
  EXPECT_EQ(ERR_peek_last_error(), 0UL);
}

TEST(Tls, AClientWritingToAClosedConnectionGetsAnErrorNotKilledBySigpipe) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName));
  auto previous = signal(SIGPIPE, SIG_DFL);  // httplib's server set SIG_IGN for the process
  auto r = Client(server.url(), ca).Post("/echo", json{{"x", std::string(64 << 20, 'a')}});
  if (r) ADD_FAILURE() << "a 64 MiB body past the 4 MiB limit was accepted";
  EXPECT_EQ(signal(SIGPIPE, previous), SIG_IGN) << "the client ignores SIGPIPE once it speaks TLS";
}

TEST(Tls, UntrustedPartiesAreRefusedInTheHandshake) {
  Authority ca = MakeCa(), other = MakeCa("other-ca");
  TlsServer server(ca, MakeLeaf(ca, kHeadName));

  // A client that trusts another authority refuses the server.
  auto distrust = Client(server.url(), other).Get("/who");
  ASSERT_FALSE(distrust.has_value());
  EXPECT_NE(distrust.error().message.find("TLS handshake failed"), std::string::npos) << distrust.error().message;

  // A client certificate from another authority is refused by the server.
  auto slot = std::make_shared<IdentitySlot>();
  slot->Set(MakeLeaf(other, "node-1").identity());
  auto forged = Client(server.url(), ca, slot).Get("/who");
  ASSERT_FALSE(forged.has_value());
  EXPECT_GE(server.server().Stats().tls_handshake_failures, 1);

  // Plain HTTP to the TLS port gets no answer, and the server goes on serving.
  auto plain = HttpClient("http://127.0.0.1:" + std::to_string(server.port()), Millis(3000)).Get("/who");
  EXPECT_FALSE(plain.has_value());
  EXPECT_TRUE(Client(server.url(), ca).Get("/who").has_value());
}

TEST(Tls, ClientChecksTheServerCertificateNamesTheHost) {
  Authority ca = MakeCa();
  // Names only "localhost", and the client dials 127.0.0.1.
  TlsServer server(ca, MakeLeaf(ca, kHeadName, {}, {"localhost"}));
  auto wrong_host = Client(server.url(), ca).Get("/who");
  ASSERT_FALSE(wrong_host.has_value());
  EXPECT_NE(wrong_host.error().message.find("does not name 127.0.0.1"), std::string::npos);
  auto by_name = Client("https://localhost:" + std::to_string(server.port()), ca).Get("/who");
  EXPECT_TRUE(by_name.has_value()) << by_name.error().message;
}

TEST(Tls, AStalledHandshakeHoldsNothingElseUp) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName), Millis(60'000));
  // A client that opens a connection and sends three bytes of a ClientHello, then stops.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(send(fd, "\x16\x03\x01", 3, 0), 3);
  // Others are served meanwhile: the handshake does not block the event loop.
  for (int i = 0; i < 3; ++i) {
    auto r = Client(server.url(), ca).Get("/who");
    EXPECT_TRUE(r.has_value()) << r.error().message;
  }
  close(fd);
}

TEST(Tls, CaFromTheEnvironment) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName));
  ASSERT_EQ(setenv("COHORT_CA", ca.cert_pem.c_str(), 1), 0);
  auto r = HttpClient(server.url(), Millis(5000)).Get("/who");
  EXPECT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(setenv("COHORT_CA", "not a certificate", 1), 0);
  auto bad = HttpClient(server.url(), Millis(5000)).Get("/who");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("$COHORT_CA"), std::string::npos);
  unsetenv("COHORT_CA");
}

// A head or agent started where $COHORT_CA_FILE names a file that is gone (a user's
// setting for another cluster, or an earlier test's head) still reaches its peers with
// the authority it sets: set_tls replaces the environment's trust, and its error.
TEST(Tls, ExplicitTrustIgnoresABrokenEnvironment) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName));
  ASSERT_EQ(setenv("COHORT_CA_FILE", "/nonexistent/ca.crt", 1), 0);
  HttpClient env_only(server.url(), Millis(5000));
  auto bad = env_only.Get("/who");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("$COHORT_CA_FILE"), std::string::npos) << bad.error().message;
  HttpClient c(server.url(), Millis(5000));
  c.set_tls(ClientOptions{ca.cert_pem, nullptr});
  auto r = c.Get("/who");
  EXPECT_TRUE(r.has_value()) << r.error().message;
  unsetenv("COHORT_CA_FILE");
}

}  // namespace
}  // namespace cohort::tls

namespace cohort::tls {
namespace {

// A connected pair of SSLs over a socket pair: the server's from ServerContext (as
// HttpServer's), the client's trusting the authority; handshake done.
class SslPair {
 public:
  SslPair(const Authority& ca, const Leaf& leaf) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    server_ctx_ = ServerContext::Create(ca.cert_pem).value();
    server_ctx_->SetIdentity(leaf.identity());
    server = server_ctx_->NewConnection(fds_[0]);
    client_ctx_ = SSL_CTX_new(TLS_client_method());
    EXPECT_TRUE(ConfigureClientContext(client_ctx_, ClientOptions{ca.cert_pem, nullptr}, "127.0.0.1").has_value());
    client = SSL_new(client_ctx_);
    SSL_set_fd(client, fds_[1]);
    std::thread accept([&] { EXPECT_EQ(SSL_do_handshake(server), 1); });
    EXPECT_EQ(SSL_connect(client), 1);
    accept.join();
  }
  ~SslPair() {
    SSL_free(server);
    SSL_free(client);
    SSL_CTX_free(client_ctx_);
    close(fds_[0]);
    close(fds_[1]);
  }
  int server_fd() const { return fds_[0]; }
  int client_fd() const { return fds_[1]; }
  // Reads exactly `n` bytes of application data on the client.
  std::string ClientReads(size_t n) {
    std::string got(n, '\0');
    size_t done = 0;
    while (done < n) {
      size_t k = 0;
      if (SSL_read_ex(client, got.data() + done, n - done, &k) != 1) break;
      done += k;
    }
    got.resize(done);
    return got;
  }

  SSL* server = nullptr;
  SSL* client = nullptr;

 private:
  int fds_[2] = {-1, -1};
  std::shared_ptr<ServerContext> server_ctx_;
  SSL_CTX* client_ctx_ = nullptr;
};

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

// A reply of many records is sealed into the caller's buffer (HttpServer then sends it in
// a few writes): nothing reaches the socket meanwhile, the buffer holds one application
// data record per 16 KiB, the peer reads every byte in order, and once the sealer is gone
// the connection writes to its socket again.
TEST(TlsSeal, RecordsSealedIntoMemoryReachThePeerAndTheSocketIsGivenBack) {
  Authority ca = MakeCa();
  SslPair pair(ca, MakeLeaf(ca, kHeadName));
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 102400\r\n\r\n";
  std::string body(100 << 10, 'x');
  for (size_t i = 0; i < body.size(); i += 997) body[i] = static_cast<char>('a' + i % 26);

  std::string sealed;
  {
    RecordSealer sealer(pair.server);
    ASSERT_TRUE(sealer.ok());
    ASSERT_TRUE(sealer.Seal(head, sealed));
    ASSERT_TRUE(sealer.Seal(body, sealed));
    EXPECT_TRUE(sealer.Seal("", sealed));
  }
  EXPECT_FALSE(Readable(pair.client_fd())) << "the sealed records went to the socket";

  // TLS 1.3 records: type 23 (application data), legacy version 0x0303, a length of at
  // most 16 KiB of plaintext and its overhead. The head's record, then 7 for 100 KiB.
  size_t records = 0;
  for (size_t pos = 0; pos < sealed.size(); ++records) {
    ASSERT_LE(pos + 5, sealed.size());
    const auto* h = reinterpret_cast<const unsigned char*>(sealed.data() + pos);
    EXPECT_EQ(h[0], 23);
    EXPECT_EQ(h[1], 3);
    EXPECT_EQ(h[2], 3);
    const size_t len = (size_t(h[3]) << 8) | h[4];
    EXPECT_LE(len, (16u << 10) + 256);
    pos += 5 + len;
    ASSERT_LE(pos, sealed.size());
  }
  EXPECT_EQ(records, 1u + 7u);

  std::thread sender([&] { ASSERT_EQ(write(pair.server_fd(), sealed.data(), sealed.size()), ssize_t(sealed.size())); });
  EXPECT_EQ(pair.ClientReads(head.size() + body.size()), head + body);
  sender.join();

  // The socket is the connection's again: a write through the SSL reaches the peer.
  ASSERT_EQ(SSL_write(pair.server, "tail", 4), 4);
  EXPECT_EQ(pair.ClientReads(4), "tail");
  // And so does the peer's answer (the read side was never touched).
  ASSERT_EQ(SSL_write(pair.client, "ping", 4), 4);
  char buf[4];
  ASSERT_EQ(SSL_read(pair.server, buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
}

// Counts the records a server SSL reads (OpenSSL's message callback sees each header).
void CountReadRecords(int write_p, int /*version*/, int content_type, const void* /*buf*/, size_t /*len*/,
                      SSL* /*ssl*/, void* arg) {
  if (write_p == 0 && content_type == SSL3_RT_HEADER) ++*static_cast<std::atomic<int>*>(arg);
}

// HttpClient sends a request's head and body together: one TLS record (cpp-httplib's own
// stream wrote them apart, two records, and the head's event loop decrypted both for every
// heartbeat); and it reads each reply whole on a kept connection.
TEST(TlsClient, ARequestLeavesInOneRecord) {
  Authority ca = MakeCa();
  auto ctx = ServerContext::Create(ca.cert_pem).value();
  ctx->SetIdentity(MakeLeaf(ca, kHeadName).identity());
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);

  constexpr int kRequests = 3;
  std::vector<int> records_per_request;
  std::thread server([&] {
    const int fd = accept(listener, nullptr, nullptr);
    SSL* ssl = ctx->NewConnection(fd);
    EXPECT_EQ(SSL_do_handshake(ssl), 1);
    std::atomic<int> records{0};
    SSL_set_msg_callback(ssl, &CountReadRecords);
    SSL_set_msg_callback_arg(ssl, &records);
    for (int i = 0; i < kRequests; ++i) {
      std::string req;
      size_t whole = std::string::npos;
      while (whole == std::string::npos || req.size() < whole) {
        char buf[4096];
        const int n = SSL_read(ssl, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        const size_t end = req.find("\r\n\r\n");
        const size_t cl = req.find("Content-Length: ");
        if (end != std::string::npos && cl != std::string::npos) whole = end + 4 + std::stoul(req.substr(cl + 16));
      }
      records_per_request.push_back(records.exchange(0));
      const std::string answer = "{\"n\":" + std::to_string(100 + i) + "}";
      const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(answer.size()) + "\r\n\r\n" + answer;
      if (SSL_write(ssl, reply.data(), static_cast<int>(reply.size())) != static_cast<int>(reply.size())) break;
    }
    SSL_free(ssl);
    close(fd);
  });

  HttpClient client("https://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), Millis(5000));
  client.set_tls(ClientOptions{ca.cert_pem, nullptr});
  const json body = {{"node", "node-1"}, {"pad", std::string(600, 'x')}};  // a heartbeat's size
  for (int i = 0; i < kRequests; ++i) {
    auto r = client.Post("/v1/nodes/node-1/heartbeat", body);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ((*r)["n"], 100 + i);
  }
  server.join();
  close(listener);
  EXPECT_EQ(records_per_request, std::vector<int>(kRequests, 1));
}

TEST(TlsBuffers, OpenSslAllocatesThroughThePool) {
  ASSERT_TRUE(GetRecordBufferPoolStats().installed) << "OpenSSL allocated before the preinit hook ran";
  EXPECT_FALSE(InstallRecordBufferPool()) << "a second install must be refused";

  // A freed record-sized buffer is the next one handed out.
  const auto before = GetRecordBufferPoolStats();
  void* a = OPENSSL_malloc(16709);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0xab, 16709);
  OPENSSL_free(a);
  void* b = OPENSSL_malloc(17000);
  EXPECT_EQ(a, b);
  const auto after = GetRecordBufferPoolStats();
  EXPECT_EQ(after.handed_out - before.handed_out, 2u);
  // The first came from the pool too if an earlier test in this process left one idle.
  EXPECT_EQ(after.reused - before.reused, before.idle > 0 ? 2u : 1u);

  // realloc keeps the bytes across every kind of move: within the block, out to malloc,
  // back into a pooled block, and plain sizes as they are.
  auto* p = static_cast<unsigned char*>(b);
  for (size_t i = 0; i < 17000; ++i) p[i] = static_cast<unsigned char>(i * 7);
  p = static_cast<unsigned char*>(OPENSSL_realloc(p, kBufferBytes));
  ASSERT_NE(p, nullptr);
  p = static_cast<unsigned char*>(OPENSSL_realloc(p, 100000));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < 17000; ++i) ASSERT_EQ(p[i], static_cast<unsigned char>(i * 7)) << i;
  p = static_cast<unsigned char*>(OPENSSL_realloc(p, 16500));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < 16500; ++i) ASSERT_EQ(p[i], static_cast<unsigned char>(i * 7)) << i;
  OPENSSL_free(p);
  auto* small = static_cast<char*>(OPENSSL_malloc(10));
  std::memcpy(small, "cohort!!!", 10);
  small = static_cast<char*>(OPENSSL_realloc(small, 5000));
  EXPECT_STREQ(small, "cohort!!!");
  OPENSSL_free(small);
  EXPECT_LE(GetRecordBufferPoolStats().idle, kMaxIdle);
}

// The reason for the pool: a server that releases a kept-alive connection's record
// buffers after every request gets them back from the pool on the next, instead of
// from malloc. If OpenSSL's buffers fell outside the pooled sizes, nothing would be
// handed out here.
TEST(TlsBuffers, RequestsOnAKeptConnectionReuseReleasedBuffers) {
  Authority ca = MakeCa();
  TlsServer server(ca, MakeLeaf(ca, kHeadName));
  auto slot = std::make_shared<IdentitySlot>();
  slot->Set(MakeLeaf(ca, "node-1").identity());
  HttpClient node = Client(server.url(), ca, slot);
  ASSERT_TRUE(node.Get("/who").has_value());  // the handshake's allocations are not counted
  const auto before = GetRecordBufferPoolStats();
  constexpr int kRequests = 50;
  for (int i = 0; i < kRequests; ++i) {
    auto who = node.Get("/who");
    ASSERT_TRUE(who.has_value()) << who.error().message;
    EXPECT_EQ((*who)["peer"], "node-1");
  }
  const auto after = GetRecordBufferPoolStats();
  const uint64_t handed = after.handed_out - before.handed_out;
  const uint64_t reused = after.reused - before.reused;
  EXPECT_GE(handed, static_cast<uint64_t>(kRequests)) << "a read buffer per request on the server at least";
  EXPECT_GE(reused + 4, handed) << "released buffers come back from the pool";
}

}  // namespace
}  // namespace cohort::tls
