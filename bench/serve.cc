// bench_serve: the inference server and the gateway, side by side in one run.
//
//   1. Throughput and latency of a small model on the CPU at concurrency 1, 8 and 32:
//      `cohort serve` (continuous batching, streamed requests from that many clients)
//      beside PyTorch eager generation with a KV cache (bench/torch_generate.py, Debian's
//      python3-torch, the same weights and threads, static batches of that many prompts).
//      Output tokens/s and time to first token (p50/p99). Target: >= 2x PyTorch's
//      tokens/s at concurrency 8.
//   2. Gateway overhead: short completions (max_tokens 1) at a fixed rate, straight to a
//      replica and through the head's gateway in alternating one-second rounds (the same
//      background load for both); p50 and p99 latency and what the gateway adds. Target: <= 0.3 ms p50, <= 1 ms p99 added at 1,000 requests/s.
//   3. Failover: 32 streams through the gateway to a 2-replica service, kill -9 of the
//      agent under one replica once every stream has its first token: requests lost
//      (target 0; a stream is lost unless it completes with the tokens of the run without
//      the failure), the extra latency of the streams that moved (their break to their
//      next token, as the gateway measures it, and their total latency beside the streams
//      that stayed), and the time until the service has 2 healthy replicas again.
//
// Usage: bench_serve [--threads N] [--rate R] [--seconds S] [--only throughput|gateway|failover]
//                    [--concurrency 1,8,32] [--serve-binary PATH]
// --concurrency picks section 1's client counts; --serve-binary runs section 1's replica
// from another `cohort` build (a before/after comparison alternates two binaries, the
// same PyTorch baseline beside each).
// The head runs with tokens over plain HTTP (--no-tls) so that the gateway's own cost is
// what section 2 measures. Prints the machine's load (uptime) first.
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include <httplib.h>

#include "bench_cluster.h"
#include "common/json.h"
#include "engine/kernels/cpu/matmul.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The `cohort` whose `serve` section 1 measures (--serve-binary).
std::string g_serve_binary = COHORT_BINARY;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

std::string Run(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    pclose(f);
  }
  return out;
}

// A random model made by `cohort train` (one step); returns its step directory.
std::string MakeModel(const std::string& dir, int layers, int embd, int heads, int ctx) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/train.yaml") << "model: {n_layer: " << layers << ", n_head: " << heads << ", n_embd: " << embd
                                     << ", seq_len: " << ctx << "}\ntokenizer: {type: byte}\n"
                                     << "data: {text: " << COHORT_SOURCE_DIR << "/README.md}\n"
                                     << "train: {steps: 1, micro_batch: 1, threads: 1}\n"
                                     << "checkpoint: {dir: " << dir << "/ckpt, every: 1}\nsample: {every: 0, tokens: 0}\n";
  const std::string out = Run(std::string("env -u COHORT_JOB_ID ") + COHORT_BINARY + " train --config " + dir +
                              "/train.yaml > " + dir + "/train.log 2>&1; echo $?");
  if (out != "0\n") BenchCluster::Die("cohort train failed; see " + dir + "/train.log");
  return dir + "/ckpt/step_00000001";
}

// A `cohort serve` process; its port read from its first line.
struct Replica {
  Subprocess proc;
  int port = 0;
  ~Replica() {
    if (proc.valid()) {
      proc.Signal(SIGKILL);
      (void)proc.Wait();
    }
  }
};

std::unique_ptr<Replica> StartReplica(const std::string& model, const std::string& dir, int threads) {
  auto r = std::make_unique<Replica>();
  SpawnOptions o;
  o.argv = {g_serve_binary, "serve", "--model", model, "--name", "bench", "--port", "0", "--threads",
            std::to_string(threads), "--kv-cache-mb", "512", "--max-waiting", "100000"};
  o.stdout_path = dir + "/replica.log";
  o.parent_death_signal = SIGKILL;
  o.unset_env = {"COHORT_JOB_ID"};
  auto p = Subprocess::Spawn(o);
  if (!p) BenchCluster::Die("cannot start cohort serve: " + p.error().message);
  r->proc = std::move(*p);
  for (int i = 0; i < 3000 && r->port == 0; ++i) {
    const std::string log = [&] {
      std::ifstream in(dir + "/replica.log");
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }();
    if (auto at = log.find("on http://"); at != std::string::npos) {
      r->port = std::atoi(log.c_str() + log.find(':', at + 10) + 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (r->port == 0) BenchCluster::Die("cohort serve did not start; see " + dir + "/replica.log");
  return r;
}

// One streamed completion: time to first token, tokens, total time, replica, completeness.
struct StreamResult {
  double ttft = 0, total = 0;
  std::vector<int64_t> tokens;
  std::string replica;
  bool done = false;
};

StreamResult StreamOnce(const std::string& host, int port, const std::string& path, const json& body,
                        const std::string& token, std::atomic<int>* started = nullptr) {
  StreamResult out;
  httplib::Client cli(host, port);
  cli.set_tcp_nodelay(true);
  cli.set_read_timeout(300, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}};
  if (!token.empty()) req.headers.emplace("Authorization", "Bearer " + token);
  req.body = body.dump();
  std::string buf;
  const auto t0 = Clock::now();
  req.response_handler = [&](const httplib::Response& r) {
    out.replica = r.get_header_value("X-Cohort-Replica");
    return r.status == 200;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    buf.append(d, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (!ev.starts_with("data: ")) continue;
      if (ev == "data: [DONE]") {
        out.done = true;
        continue;
      }
      json j = json::parse(ev.substr(6), nullptr, false);
      if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) continue;
      for (const auto& id : j["choices"][0].value("token_ids", json::array())) {
        if (out.tokens.empty()) {
          out.ttft = Since(t0);
          if (started) *started += 1;
        }
        out.tokens.push_back(id.get<int64_t>());
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  cli.send(req, res, err);
  out.total = Since(t0);
  return out;
}

std::vector<int> PromptIds(int n) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back((7 * i + 3) % 256);
  return p;
}

// ---- 1. throughput ---------------------------------------------------------------------

void Throughput(int threads, const std::vector<int>& concurrency) {
  const int kPrompt = 32, kTokens = 128;
  char tmpl[] = "/tmp/cohort-bench-serve-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string model = MakeModel(dir + "/model", 6, 384, 6, 512);
  std::printf("\n== 1. throughput: 6 layers, n_embd 384, 6 heads, byte vocabulary (%s), %d threads each; "
              "prompt %d tokens, %d generated, greedy; serving binary %s\n",
              model.c_str(), threads, kPrompt, kTokens, g_serve_binary.c_str());
  auto replica = StartReplica(dir + "/model/ckpt", dir, threads);
  const std::vector<int> prompt = PromptIds(kPrompt);
  std::string ids;
  for (int t : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const json body = {{"model", "bench"}, {"prompt", prompt}, {"max_tokens", kTokens}, {"temperature", 0},
                     {"stream", true}};
  StreamOnce("127.0.0.1", replica->port, "/v1/completions", body, "");  // warm-up
  std::printf("%-6s %14s %12s %12s | %14s %12s | %7s  %s\n", "conc", "cohort tok/s", "TTFT p50", "TTFT p99",
              "torch tok/s", "torch TTFT", "ratio", "target");
  std::vector<int64_t> first_tokens;
  for (int c : concurrency) {
    const int per_client = c == 1 ? 3 : 2;
    std::vector<double> ttft;
    std::mutex mu;
    int64_t tokens = 0;
    const CpuSeconds cpu0 = ProcessCpu(replica->proc.pid());
    const auto t0 = Clock::now();
    std::vector<std::thread> clients;
    for (int i = 0; i < c; ++i) {
      clients.emplace_back([&] {
        for (int k = 0; k < per_client; ++k) {
          StreamResult r = StreamOnce("127.0.0.1", replica->port, "/v1/completions", body, "");
          std::lock_guard<std::mutex> l(mu);
          ttft.push_back(r.ttft);
          tokens += static_cast<int64_t>(r.tokens.size());
          if (first_tokens.empty()) first_tokens = r.tokens;
        }
      });
    }
    for (auto& t : clients) t.join();
    const double secs = Since(t0);
    const CpuSeconds cpu1 = ProcessCpu(replica->proc.pid());
    const double ours = static_cast<double>(tokens) / secs;
    const double ours_per_cpu = static_cast<double>(tokens) / std::max(1e-9, cpu1.self - cpu0.self);
    // The same threads for PyTorch's own pools: torch.set_num_threads does not bound the
    // OpenBLAS or OpenMP pools under it, which otherwise take the other core when it is idle.
    const std::string torch_env = "OMP_NUM_THREADS=" + std::to_string(threads) +
                                  " OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " ";
    const std::string torch_out = Run(torch_env + COHORT_TORCH_PYTHON + " " + COHORT_TORCH_SCRIPT + " --checkpoint " +
                                      model + " --threads " + std::to_string(threads) + " --batch " +
                                      std::to_string(c) + " --prompt " + std::to_string(kPrompt) + " --tokens " +
                                      std::to_string(kTokens) + " --prompt-ids " + ids + " 2>&1");
    json t = json::parse(torch_out.substr(0, torch_out.find('\n')), nullptr, false);
    double theirs = 0, their_ttft = 0, theirs_per_cpu = 0;
    if (t.is_object() && t.contains("tokens_per_second")) {
      theirs = t["tokens_per_second"];
      theirs_per_cpu = t["tokens_per_cpu_second"];
      their_ttft = t["ttft_seconds"].back();
      if (c == 1) {
        const auto& seq = t["first_sequence"];
        size_t same = 0;
        while (same < first_tokens.size() && same < seq.size() && seq[same] == first_tokens[same]) ++same;
        std::printf("       (greedy tokens of cohort serve and PyTorch agree on the first %zu of %zu)\n", same,
                    first_tokens.size());
      }
    } else {
      std::printf("       PyTorch baseline failed: %s\n", torch_out.c_str());
    }
    std::printf("%-6d %14.1f %10.1fms %10.1fms | %14.1f %10.1fms | %6.2fx  %s\n", c, ours, Quantile(ttft, 0.5) * 1e3,
                Quantile(ttft, 0.99) * 1e3, theirs, their_ttft * 1e3, theirs > 0 ? ours / theirs : 0.0,
                c == 8 ? ">= 2x" : "");
    std::printf("       per CPU-second: cohort %.1f tokens, PyTorch %.1f tokens (%.2fx)\n", ours_per_cpu, theirs_per_cpu,
                theirs_per_cpu > 0 ? ours_per_cpu / theirs_per_cpu : 0.0);
    std::fflush(stdout);
  }
  replica.reset();
  std::filesystem::remove_all(dir);  // the model: 126 MB a run
}

// ---- 2. gateway overhead ----------------------------------------------------------------

// Sends `rate` requests per second for `seconds` (open loop: each request at its planned
// time, from `senders` threads with kept-alive connections); returns the latencies (s).
std::vector<double> FixedRate(const std::string& host, int port, const std::string& token, double rate,
                              double seconds, int* errors) {
  const std::string body = json{{"model", "bench"}, {"prompt", "Hi"}, {"max_tokens", 1}, {"temperature", 0}}.dump();
  const int senders = 32;
  const int total = static_cast<int>(rate * seconds);
  std::vector<std::vector<double>> lat(senders);
  std::atomic<int> failed{0};
  const auto t0 = Clock::now() + std::chrono::milliseconds(50);
  std::vector<std::thread> ts;
  for (int s = 0; s < senders; ++s) {
    ts.emplace_back([&, s] {
      httplib::Client cli(host, port);
      cli.set_keep_alive(true);
      cli.set_tcp_nodelay(true);  // httplib writes a request's head and body apart
      httplib::Headers h;
      if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
      for (int i = s; i < total; i += senders) {
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(i / rate)));
        const auto start = Clock::now();
        auto r = cli.Post("/v1/completions", h, body, "application/json");
        if (!r || r->status != 200) {
          ++failed;
          continue;
        }
        lat[s].push_back(Since(start));
      }
    });
  }
  for (auto& t : ts) t.join();
  *errors = failed;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  return all;
}

json WaitService(BenchCluster& c, const std::string& name, int healthy, int timeout_s) {
  HttpClient client = c.Client();
  for (int i = 0; i < timeout_s * 10; ++i) {
    if (auto r = client.Get("/v1/services/" + name); r && (*r)["healthy"] == healthy && (*r)["replicas"] == healthy) {
      return *r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  BenchCluster::Die("service " + name + " did not get " + std::to_string(healthy) + " healthy replicas");
}

void Deploy(BenchCluster& c, const std::string& name, const std::string& model, int replicas,
            const std::vector<std::string>& args) {
  json spec = {{"kind", "service"}, {"name", name}, {"model", model}, {"model_name", "bench"},
               {"replicas", replicas}, {"command", {COHORT_BINARY, "serve"}}, {"args", args}};
  auto r = c.Client().Post("/v1/services", spec);
  if (!r) BenchCluster::Die("deploy: " + r.error().message);
}

std::pair<std::string, int> HostPort(const std::string& url) {
  auto u = ParseHttpUrl(url);
  if (!u) BenchCluster::Die("bad url " + url);
  return {u->host, u->port};
}

void GatewayOverhead(double rate, double seconds) {
  std::printf("\n== 2. gateway overhead: max_tokens 1 completions at %.0f/s for %.0f s, 1 replica (2 layers, "
              "n_embd 64)\n", rate, seconds);
  BenchCluster c;
  c.StartHead({"--no-tls"});
  c.StartAgent("n1", 0);
  c.WaitForNodes(1);
  const std::string model = MakeModel(c.dir() + "/model", 2, 64, 4, 64);
  Deploy(c, "overhead", c.dir() + "/model/ckpt", 1, {"--threads", "1", "--kv-cache-mb", "64", "--max-waiting", "100000"});
  const json svc = WaitService(c, "overhead", 1, 60);
  const auto [rhost, rport] = HostPort(svc["replica_status"][0]["endpoint"]);
  const auto [ghost, gport] = HostPort(c.url());
  std::string token;
  std::ifstream(c.dir() + "/head/admin.token") >> token;
  int e1 = 0, e2 = 0, e0 = 0;
  FixedRate(rhost, rport, "", rate, 1, &e0);  // warm-up
  FixedRate(ghost, gport, token, rate, 1, &e0);
  // Alternating one-second rounds, so that both see the same background load.
  std::vector<double> direct, gateway;
  for (int round = 0; round < static_cast<int>(std::ceil(seconds)); ++round) {
    int e = 0;
    auto d = FixedRate(rhost, rport, "", rate, 1, &e);
    e1 += e;
    auto g = FixedRate(ghost, gport, token, rate, 1, &e);
    e2 += e;
    direct.insert(direct.end(), d.begin(), d.end());
    gateway.insert(gateway.end(), g.begin(), g.end());
  }
  std::printf("%-24s %10s %10s %10s %8s\n", "", "requests", "p50", "p99", "errors");
  std::printf("%-24s %10zu %8.3fms %8.3fms %8d\n", "straight to the replica", direct.size(),
              Quantile(direct, 0.5) * 1e3, Quantile(direct, 0.99) * 1e3, e1);
  std::printf("%-24s %10zu %8.3fms %8.3fms %8d\n", "through the gateway", gateway.size(), Quantile(gateway, 0.5) * 1e3,
              Quantile(gateway, 0.99) * 1e3, e2);
  std::printf("%-24s %10s %8.3fms %8.3fms   (target <= 0.3 ms p50, <= 1 ms p99)\n", "added by the gateway", "",
              (Quantile(gateway, 0.5) - Quantile(direct, 0.5)) * 1e3, (Quantile(gateway, 0.99) - Quantile(direct, 0.99)) * 1e3);
  std::fflush(stdout);
}

// ---- 3. failover ------------------------------------------------------------------------

double Metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

void Failover() {
  std::printf("\n== 3. failover: 32 streams (300 tokens, half greedy, half seeded sampling) through the gateway to "
              "2 replicas (6 layers, n_embd 256, 1 thread each); kill -9 of one replica's agent\n");
  BenchCluster c;
  c.StartHead({"--no-tls", "--heartbeat-interval", "250ms", "--fence-timeout", "2s", "--failure-timeout", "3s"});
  for (const char* n : {"n1", "n2", "n3"}) c.StartAgent(n, 0);
  c.WaitForNodes(3);
  MakeModel(c.dir() + "/model", 6, 256, 4, 512);
  Deploy(c, "failover", c.dir() + "/model/ckpt", 2, {"--threads", "1", "--kv-cache-mb", "128"});
  const json svc = WaitService(c, "failover", 2, 120);
  const auto [ghost, gport] = HostPort(c.url());
  std::string token;
  std::ifstream(c.dir() + "/head/admin.token") >> token;
  std::vector<json> reqs;
  for (int i = 0; i < 32; ++i) {
    json r = {{"model", "bench"}, {"prompt", "Stream " + std::to_string(i) + ": "}, {"max_tokens", 300}, {"stream", true}};
    if (i % 2) {
      r["temperature"] = 0.8;
      r["seed"] = 7 + i;
    } else {
      r["temperature"] = 0;
    }
    reqs.push_back(r);
  }
  // Starts the 32 streams into `out` (which must outlive the threads).
  auto run = [&](std::vector<StreamResult>& out, std::atomic<int>* started) {
    out.assign(32, {});
    std::vector<std::thread> ts;
    for (int i = 0; i < 32; ++i) {
      ts.emplace_back([&, i, started] { out[i] = StreamOnce(ghost, gport, "/v1/completions", reqs[i], token, started); });
    }
    return ts;
  };
  std::vector<StreamResult> reference, got;
  for (auto& t : run(reference, nullptr)) t.join();
  // Which agent to kill: the one under the first replica; its key ("job.attempt").
  const json& victim = svc["replica_status"][0];
  const std::string victim_key = std::to_string(victim["job"].get<int64_t>()) + "." + std::to_string(victim["attempt"].get<int>());
  const std::string victim_node = victim["node"];
  const auto before = c.Client().GetRaw("/metrics");
  std::atomic<int> started{0};
  std::vector<std::thread> threads = run(got, &started);
  for (int i = 0; i < 6000 && started < 32; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto kill_at = Clock::now();
  const std::vector<int> pids = c.pids();  // head, n1, n2, n3
  const int agent_pid = pids.at(victim_node == "n1" ? 1 : victim_node == "n2" ? 2 : 3);
  kill(agent_pid, SIGKILL);
  for (auto& t : threads) t.join();
  int lost = 0, moved = 0;
  std::vector<double> moved_total, stayed_total, ref_total;
  for (int i = 0; i < 32; ++i) {
    const bool ok = got[i].done && got[i].tokens == reference[i].tokens;
    lost += ok ? 0 : 1;
    ref_total.push_back(reference[i].total);
    if (got[i].replica == victim_key) {
      ++moved;
      moved_total.push_back(got[i].total);
    } else {
      stayed_total.push_back(got[i].total);
    }
  }
  // Back to full strength: 2 healthy replicas again.
  HttpClient client = c.Client();
  double recovered = -1;
  for (int i = 0; i < 1200; ++i) {
    if (auto r = client.Get("/v1/services/failover"); r && (*r)["healthy"] == 2) {
      bool all_new = true;
      for (const auto& rep : (*r)["replica_status"]) all_new = all_new && rep["node"] != victim_node;
      if (all_new) {
        recovered = Since(kill_at);
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto after = c.Client().GetRaw("/metrics");
  const double moves = Metric(after->body, "cohort_gateway_failovers_total") - Metric(before->body, "cohort_gateway_failovers_total");
  const double delay_sum = Metric(after->body, "cohort_gateway_failover_delay_seconds_sum") -
                           Metric(before->body, "cohort_gateway_failover_delay_seconds_sum");
  const double delay_n = Metric(after->body, "cohort_gateway_failover_delay_seconds_count") -
                         Metric(before->body, "cohort_gateway_failover_delay_seconds_count");
  std::printf("requests lost: %d of 32 (target 0); streams on the killed replica: %d, moved by the gateway: %.0f\n", lost,
              moved, moves);
  std::printf("stream latency p50: moved %.2f s, stayed on the live replica %.2f s, the run without the failure "
              "%.2f s: the moved streams took %.2f s more than those that stayed\n",
              Quantile(moved_total, 0.5), Quantile(stayed_total, 0.5), Quantile(ref_total, 0.5),
              Quantile(moved_total, 0.5) - Quantile(stayed_total, 0.5));
  std::printf("gateway: from a stream's break to its next token: mean %.1f ms over %.0f moves\n",
              delay_n > 0 ? delay_sum / delay_n * 1e3 : 0.0, delay_n);
  std::printf("service back to 2 healthy replicas %.1f s after the kill (fence 2 s, failure timeout 3 s)\n", recovered);
  std::fflush(stdout);
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) {
  using namespace cohort::bench;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  double rate = 1000, seconds = 5;
  std::string only;
  std::vector<int> concurrency = {1, 8, 32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--rate") rate = std::atof(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--only") only = argv[i + 1];
    else if (a == "--serve-binary") g_serve_binary = argv[i + 1];
    else if (a == "--concurrency") {
      concurrency.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) {
        const int c = std::atoi(item.c_str());
        if (c < 1 || c > 1024) BenchCluster::Die("--concurrency: each count must be in [1, 1024], got '" + item + "'");
        concurrency.push_back(c);
      }
      if (concurrency.empty()) BenchCluster::Die("--concurrency: no count given");
    } else {
      BenchCluster::Die("unknown flag " + a);
    }
  }
  std::printf("bench_serve on %u cores; load: %s", std::thread::hardware_concurrency(), Run("uptime").c_str());
  // The replicas choose OpenBLAS's kernels as `cohort serve` does (OPENBLAS_CORETYPE when
  // OpenBLAS does not know the CPU); PyTorch, started from here, gets the same.
  if (const std::string core = cohort::engine::cpu::SuggestedBlasCoreType(); !core.empty()) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    std::printf("OpenBLAS kernels: OPENBLAS_CORETYPE=%s for both sides (OpenBLAS detected %s)\n", core.c_str(),
                cohort::engine::cpu::BlasCoreName().c_str());
  }
  if (!std::filesystem::exists(g_serve_binary)) BenchCluster::Die("--serve-binary: no file " + g_serve_binary);
  if (only.empty() || only == "throughput") Throughput(threads, concurrency);
  if (only.empty() || only == "gateway") GatewayOverhead(rate, seconds);
  if (only.empty() || only == "failover") Failover();
  return 0;
}
