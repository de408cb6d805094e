// A real Prometheus server scrapes the head and the agents of a LocalCluster, and its
// query API sees them up with values. Skipped when `prometheus` is not installed
// (Debian package 'prometheus'; scripts/install-deps.sh installs it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gmock/gmock.h>

#include "harness.h"

namespace cohort::testing {
namespace {

// A TCP port that was free on 127.0.0.1 a moment ago.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string HostPort(const std::string& url) { return url.substr(url.find("://") + 3); }

std::string Encode(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '_' || ch == '-' || ch == '.') {
      out += static_cast<char>(ch);
    } else {
      out += fmt::format("%{:02X}", ch);
    }
  }
  return out;
}

// A viewer token made by the admin (`cohort token create --role viewer` does the same).
std::string ViewerToken(LocalCluster& c) {
  auto r = c.client().Post("/v1/tokens", json{{"user", "prometheus"}, {"role", "viewer"}});
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? r->value("token", "") : "";
}

TEST(PrometheusScrape, RealServerScrapesHeadAndAgents) {
  if (!std::filesystem::exists("/usr/bin/prometheus")) GTEST_SKIP() << "prometheus is not installed";
  LocalCluster c;
  c.StartHead();
  c.StartAgent("n1", 2);
  c.StartAgent("n2", 1);
  c.WaitForNodes(2);
  std::vector<std::string> agents;
  for (const char* n : {"n1", "n2"}) agents.push_back(HostPort(c.Node(n)["agent_url"].get<std::string>()));

  int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string ca = c.dir() + "/head/tls/ca.crt";
  std::string config = c.dir() + "/prometheus.yml";
  std::ofstream(config) << fmt::format(
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
      "scrape_configs:\n"
      // The head's /metrics takes a token (Prometheus' authorization block); a viewer's does.
      // Head and agents serve HTTPS with certificates from the head's authority.
      "  - job_name: cohort-head\n    scheme: https\n    tls_config:\n      ca_file: '{}'\n"
      "    authorization:\n      credentials: '{}'\n"
      "    static_configs:\n      - targets: ['{}']\n"
      "  - job_name: cohort-agent\n    scheme: https\n    tls_config:\n      ca_file: '{}'\n"
      "    static_configs:\n      - targets: ['{}', '{}']\n",
      ca, ViewerToken(c), HostPort(c.url()), ca, agents[0], agents[1]);
  SpawnOptions o;
  o.argv = {"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + c.dir() + "/tsdb",
            fmt::format("--web.listen-address=127.0.0.1:{}", port), "--log.level=warn"};
  o.stdout_path = c.dir() + "/prometheus.log";
  o.parent_death_signal = SIGKILL;
  auto prom = Subprocess::Spawn(o);
  ASSERT_TRUE(prom.has_value()) << prom.error().message;
  struct Killer {
    Subprocess& p;
    ~Killer() {
      p.Signal(SIGKILL);
      (void)p.Wait();
    }
  } killer{*prom};

  HttpClient api(fmt::format("http://127.0.0.1:{}", port), std::chrono::milliseconds(3000));
  auto query = [&](const std::string& q) -> json {
    auto r = api.Get("/api/v1/query?query=" + Encode(q));
    if (!r || (*r)["status"] != "success") return json::array();
    return (*r)["data"]["result"];
  };
  json up;
  bool all_up = WaitUntil([&] {
    up = query("up");
    if (up.size() != 3) return false;
    for (const auto& s : up) {
      if (s["value"][1] != "1") return false;
    }
    return true;
  }, std::chrono::seconds(60));
  ASSERT_TRUE(all_up) << up.dump(2) << "\nprometheus log:\n" << ReadFile(o.stdout_path);

  json nodes, memory;
  ASSERT_TRUE(WaitUntil([&] {
    nodes = query("cohort_nodes{state=\"up\"}");
    memory = query("cohort_gpu_memory_total_bytes");
    return nodes.size() == 1 && memory.size() == 3;
  }, std::chrono::seconds(30))) << nodes.dump(2) << memory.dump(2);
  EXPECT_EQ(nodes[0]["value"][1], "2");
  EXPECT_EQ(nodes[0]["metric"]["job"], "cohort-head");
  std::set<std::string> gpus;
  for (const auto& s : memory) {
    EXPECT_EQ(s["value"][1], std::to_string(int64_t{80} << 30));
    gpus.insert(s["metric"]["node"].get<std::string>() + "/" + s["metric"]["gpu"].get<std::string>());
  }
  EXPECT_EQ(gpus, (std::set<std::string>{"n1/0", "n1/1", "n2/0"}));
}

}  // namespace
}  // namespace cohort::testing
