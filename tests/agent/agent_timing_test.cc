// The agent obeys the timing in the head's newest reply (the head scales it with the
// cluster, head/core/timing.h): its heartbeat interval, its tasks' lease (the fence
// timeout, and failure - fence beyond it), and a lease that never shrinks when the timing
// does; a wake-up (POST /v1/wake) brings a heartbeat however long the interval. Against a
// fake head in the test (httplib on a kernel-chosen port); no test asserts on speed: the
// waits are conditions with generous deadlines, and the one timing bound is a lower one
// (heartbeats no closer than the interval asked for). The GPU readings, sampled on a thread
// of their own, never hold a heartbeat up (a GPU monitor that hangs, in the test).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "agent/agent.h"
#include "agent/lease.h"
#include "api/routes.h"
#include "api/types.h"
#include "common/http.h"
#include "common/json.h"
#include "test_util.h"

namespace cohort::agent {
namespace {

api::AgentTiming Timing(int64_t interval, int64_t failure, int64_t fence) {
  api::AgentTiming t;
  t.heartbeat_interval_ms = interval;
  t.failure_timeout_ms = failure;
  t.fence_timeout_ms = fence;
  t.kill_grace_ms = 1000;
  return t;
}

// A head that answers registrations and heartbeats with the timing the test sets, and
// records when each heartbeat arrived.
class FakeHead {
 public:
  explicit FakeHead(api::AgentTiming timing) : timing_(timing) {
    server_.Post(api::routes::kAgentRegister, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard lock(mu_);
      res.set_content(json{{"timing", api::ToJson(timing_)}}.dump(), "application/json");
    });
    server_.Post(api::routes::kAgentHeartbeatPattern, [this](const httplib::Request& req, httplib::Response& res) {
      api::HeartbeatReply reply;
      std::vector<api::TaskReport> reported;
      std::vector<api::GpuReport> gpus;
      if (auto body = ParseJson(req.body, "heartbeat")) {
        if (auto hb = api::HeartbeatFromJson(*body)) {
          reported = hb->tasks;
          gpus = hb->gpus;
        }
      }
      Millis delay{0};
      {
        std::lock_guard lock(mu_);
        reply.timing = timing_;
        reply.tasks = tasks_;
        delay = reply_delay_;
        beats_.push_back({SteadyClock::now(), timing_, std::move(reported), std::move(gpus)});
      }
      cv_.notify_all();
      if (delay > Millis(0)) std::this_thread::sleep_for(delay);  // a slow head, answering late
      res.set_content(api::ToJson(reply).dump(), "application/json");
    });
    // One request per connection: the agent outlives this head in every test (the
    // fixture stops it after the body), and a kept-alive connection would hold the
    // server's stop for its whole keep-alive timeout (5 s a test).
    server_.set_keep_alive_max_count(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeHead() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void SetTiming(api::AgentTiming t) {
    std::lock_guard lock(mu_);
    timing_ = t;
  }

  // Every heartbeat from now on is answered `delay` after it arrived.
  void SetReplyDelay(Millis delay) {
    std::lock_guard lock(mu_);
    reply_delay_ = delay;
  }

  // The tasks every reply from now on assigns.
  void SetTasks(std::vector<api::TaskLaunch> tasks) {
    std::lock_guard lock(mu_);
    tasks_ = std::move(tasks);
  }

  struct Beat {
    SteadyTime at;
    api::AgentTiming sent;                // the timing in this heartbeat's reply
    std::vector<api::TaskReport> tasks;  // the tasks the heartbeat reported
    std::vector<api::GpuReport> gpus;    // and its GPU readings
  };

  // Waits (up to 30 s) until at least `n` heartbeats arrived; returns them all.
  std::vector<Beat> WaitForBeats(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [&] { return beats_.size() >= n; });
    return beats_;
  }

  size_t beats() {
    std::lock_guard lock(mu_);
    return beats_.size();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  api::AgentTiming timing_;             // guarded by mu_
  std::vector<api::TaskLaunch> tasks_;  // guarded by mu_
  std::vector<Beat> beats_;             // guarded by mu_
  Millis reply_delay_{0};               // guarded by mu_
};

// A gate a GPU monitor's Sample waits at: shut, every Sample after the first hangs there
// (an NVML call stuck in the driver, or a node so loaded that sampling takes longer than a
// fence timeout) until the gate opens.
struct SampleGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int waiting = 0;  // Samples hanging at the gate now
  void Set(bool o) {
    std::lock_guard lock(mu);
    open = o;
    cv.notify_all();
  }
  // Waits (up to 30 s) until a Sample hangs at the gate.
  bool WaitForHungSample() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return waiting > 0; });
  }
};

class GatedGpuMonitor : public GpuMonitor {
 public:
  GatedGpuMonitor(std::unique_ptr<GpuMonitor> inner, std::shared_ptr<SampleGate> gate)
      : inner_(std::move(inner)), gate_(std::move(gate)) {}
  std::vector<GpuReading> Sample(const std::vector<bool>& busy, SteadyTime now) override {
    {
      std::unique_lock lock(gate_->mu);
      ++gate_->waiting;
      gate_->cv.notify_all();
      gate_->cv.wait(lock, [&] { return gate_->open; });
      --gate_->waiting;
    }
    return inner_->Sample(busy, now);
  }
  Result<void> InjectXid(int index, int xid) override { return inner_->InjectXid(index, xid); }
  void RecordHealthEvent(int index, std::string what) override { inner_->RecordHealthEvent(index, std::move(what)); }
  std::vector<GpuProcess> Processes() override { return inner_->Processes(); }

 private:
  std::unique_ptr<GpuMonitor> inner_;
  std::shared_ptr<SampleGate> gate_;
};

class AgentTimingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-agent-timing-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    gate_->Set(true);  // a Sample hanging at the gate would hold the agent's stop
    agent_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // `gpus` simulated GPUs, whose monitor samples through gate_.
  void StartAgent(const FakeHead& head, std::map<std::string, std::string> runtimes = {}, int gpus = 0,
                  Millis gpu_monitor_timeout = Millis(30'000)) {
    AgentConfig c;
    c.gpu_monitor_timeout_ms = gpu_monitor_timeout.count();
    c.container_runtimes = std::move(runtimes);
    c.head_url = head.url();
    c.name = "n1";
    c.address = "127.0.0.1";
    c.simulated_gpus = gpus;
    c.cpus = 1;
    c.work_dir = dir_ + "/agent";
    c.shim_path = "/bin/false";  // no task starts here
    c.wrap_gpu_monitor = [gate = gate_](std::unique_ptr<GpuMonitor> m) -> std::unique_ptr<GpuMonitor> {
      return std::make_unique<GatedGpuMonitor>(std::move(m), gate);
    };
    auto a = Agent::Start(c);
    ASSERT_TRUE(a.has_value()) << a.error().message;
    agent_ = std::move(*a);
  }

  // Waits (up to 30 s) until the lease file was granted `granted` (and expires after
  // `after`); returns it.
  std::optional<Lease> WaitForLease(Millis granted, SteadyTime after = {}) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
    std::optional<Lease> l;
    while (SteadyClock::now() < deadline) {
      l = ReadLeaseFile(AgentLeasePath(dir_ + "/agent"));
      if (l && l->granted == granted && l->expires > after) return l;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return l;
  }

  std::string dir_;
  std::shared_ptr<SampleGate> gate_ = std::make_shared<SampleGate>();
  std::unique_ptr<Agent> agent_;
};

// A hung Docker daemon (issue 18): its client never answers the agent's container sweep,
// which runs as the agent starts. The agent's stop kills the call rather than waiting out
// its 30 s timeout; the fake runtime blocks on a FIFO nobody writes, so without the kill
// the stop would last the whole timeout.
// With the head's defaults (a beat every 1 s, fence after 2 s) every agent logged
// "heartbeats sent 1.0s apart ..." as a warning every 5 s: a beat on time is not slow.
TEST(SlowHeartbeatGap, ABeatOnTimeIsNotSlowAndALateOneIs) {
  const api::AgentTiming defaults = Timing(1000, 3000, 2000);
  EXPECT_GT(SlowHeartbeatGap(defaults), Millis(1000) + Millis(100)) << "on time, with the loop's jitter";
  EXPECT_LT(SlowHeartbeatGap(defaults), Millis(2000)) << "before the lease runs out";
  EXPECT_EQ(SlowHeartbeatGap(defaults), Millis(1500));
  // The head's scaled timing at 10,000 nodes (head/core/timing.h): every 10 s, fence after 20 s.
  EXPECT_EQ(SlowHeartbeatGap(Timing(10'000, 30'000, 20'000)), Millis(15'000));
  // An interval that leaves the lease no room: half the fence timeout, as before.
  EXPECT_EQ(SlowHeartbeatGap(Timing(3000, 4000, 2000)), Millis(1000));
}

TEST_F(AgentTimingTest, AHungContainerRuntimeDoesNotHoldTheStop) {
  const std::string runtime = dir_ + "/docker", fifo = dir_ + "/never", pid_file = dir_ + "/runtime.pid";
  ASSERT_TRUE(agent_testing::WriteHungRuntime(runtime, fifo, pid_file));
  FakeHead head(Timing(1000, 30000, 20000));
  StartAgent(head, {{"docker", runtime}});
  int pid = 0;
  for (const auto deadline = SteadyClock::now() + std::chrono::seconds(30); pid == 0 && SteadyClock::now() < deadline;) {
    std::ifstream(pid_file) >> pid;
    if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(pid, 0) << "the sweep never called the runtime";
  const auto before = SteadyClock::now();
  agent_->Stop();
  const auto took = std::chrono::duration_cast<Millis>(SteadyClock::now() - before);
  // A bound, not a speed: the call's own timeout is 30 s.
  EXPECT_LT(took.count(), 20'000) << "the stop waited on the hung runtime";
  EXPECT_TRUE(kill(pid, 0) != 0 && errno == ESRCH) << "the hung runtime " << pid << " still runs";
}

TEST_F(AgentTimingTest, FollowsTheIntervalAndFenceTimeoutOfTheNewestReply) {
  FakeHead head(Timing(50, 3000, 2000));
  StartAgent(head);
  ASSERT_GE(head.WaitForBeats(3).size(), 3u);
  auto lease = WaitForLease(Millis(2000));
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->granted, Millis(2000));
  EXPECT_EQ(lease->deadline - lease->expires, Millis(1000)) << "failure - fence beyond the expiry";

  // The cluster grew: a longer interval and timeouts, from the next reply on.
  head.SetTiming(Timing(300, 12'000, 8000));
  lease = WaitForLease(Millis(8000));
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->granted, Millis(8000)) << "the lease follows the reply's fence timeout";
  EXPECT_EQ(lease->deadline - lease->expires, Millis(4000));
  const size_t from = head.beats();
  auto beats = head.WaitForBeats(from + 4);
  ASSERT_GE(beats.size(), from + 4);
  // Every heartbeat after one that carried the new timing waits its interval.
  for (size_t i = 1; i < beats.size(); ++i) {
    if (beats[i - 1].sent.heartbeat_interval_ms != 300) continue;
    EXPECT_GE(beats[i].at - beats[i - 1].at, Millis(300)) << "heartbeat " << i;
  }

  // The timing shrinks again: a lease granted under the longer fence still runs to its end
  // (the head holds the node to the longer failure timeout meanwhile).
  const Lease before = *lease;
  head.SetTiming(Timing(50, 3000, 2000));
  const size_t now = head.beats();
  head.WaitForBeats(now + 3);
  auto after = ReadLeaseFile(AgentLeasePath(dir_ + "/agent"));
  ASSERT_TRUE(after);
  EXPECT_GE(after->expires, before.expires) << "a lease never shrinks";
  EXPECT_GE(after->deadline, before.deadline);
}

// A request to the head may take as long as the interval the head asked for, not the one
// of the agent's registration: when the cluster grows to a longer interval, a head that
// answers slower than the old interval still gets its heartbeats through. A heartbeat
// that gets its answer waits the interval before the next; one that timed out would be
// retried 200 ms later, so the gaps tell which happened.
TEST_F(AgentTimingTest, ARequestMayTakeAsLongAsTheNewestInterval) {
  FakeHead head(Timing(50, 3000, 2000));  // the agent's first client gives up after 500 ms
  StartAgent(head);
  ASSERT_GE(head.WaitForBeats(2).size(), 2u);
  // A fence timeout that the answers below outlast: the lease no longer holds the wait
  // open (HeartbeatTimeout), the interval does.
  head.SetTiming(Timing(1000, 3000, 1500));
  // Once a reply carried the new timing, the head starts answering 900 ms late.
  for (;;) {
    auto beats = head.WaitForBeats(head.beats() + 1);
    ASSERT_FALSE(beats.empty());
    if (beats.back().sent.heartbeat_interval_ms == 1000) break;
  }
  head.SetReplyDelay(Millis(900));
  const size_t from = head.beats();
  auto beats = head.WaitForBeats(from + 3);
  ASSERT_GE(beats.size(), from + 3);
  for (size_t i = from + 1; i < beats.size(); ++i) {
    EXPECT_GE(beats[i].at - beats[i - 1].at, Millis(900 + 1000))
        << "heartbeat " << i << " came early: the one before it timed out instead of waiting for its answer";
  }
}

// A heartbeat waits for its answer as long as the lease that answer renews still runs
// (from the send): answers 650 ms late under a 2 s fence timeout keep the tasks' lease
// renewed at every heartbeat. A client that gave up after 500 ms (the 50 ms interval, at
// least 500 ms) timed every one of them out, sent again 50 ms later, and let it lapse.
TEST_F(AgentTimingTest, AHeartbeatWaitsForItsAnswerWhileTheLeaseRuns) {
  FakeHead head(Timing(50, 3000, 2000));
  StartAgent(head);
  ASSERT_GE(head.WaitForBeats(2).size(), 2u);
  head.SetReplyDelay(Millis(650));
  const size_t from = head.beats();
  auto lease_before = WaitForLease(Millis(2000));
  ASSERT_TRUE(lease_before);
  auto beats = head.WaitForBeats(from + 4);
  ASSERT_GE(beats.size(), from + 4);
  // Answered: the next one comes 650 + 50 ms later; timed out: 500 + 50 ms later.
  for (size_t i = from + 1; i < beats.size(); ++i) {
    EXPECT_GE(beats[i].at - beats[i - 1].at, Millis(650 + 50))
        << "heartbeat " << i << " came early: the one before it timed out instead of waiting for its answer";
  }
  auto lease_after = ReadLeaseFile(AgentLeasePath(dir_ + "/agent"));
  ASSERT_TRUE(lease_after);
  EXPECT_GE(lease_after->expires - lease_before->expires, Millis(2 * 700))
      << "the late answers did not renew the lease";
}

// The heartbeat's cadence does not depend on the GPU monitor (nor the /proc scan): a
// Sample that hangs longer than the fence timeout leaves the heartbeats, and the tasks'
// lease, going at their interval with the last readings. Once the monitor answers again, a
// GPU health event still reaches the head with the heartbeat that follows it at once, and
// its counter counts it once.
TEST_F(AgentTimingTest, AHungGpuMonitorDoesNotHoldTheHeartbeats) {
  FakeHead head(Timing(50, 900, 600));
  StartAgent(head, {}, /*gpus=*/2);
  ASSERT_GE(head.WaitForBeats(1).size(), 1u);
  gate_->Set(false);
  ASSERT_TRUE(gate_->WaitForHungSample()) << "the monitor was never sampled again";
  const SteadyTime hung = SteadyClock::now();

  // 20 heartbeats at 50 ms are a second, longer than the fence timeout: without a thread of
  // its own the sample would have held every one of them (the wait ends after 30 s).
  const size_t from = head.beats();
  auto beats = head.WaitForBeats(from + 20);
  ASSERT_GE(beats.size(), from + 20) << "the heartbeats stopped while the GPU monitor hung";
  for (size_t i = from; i < beats.size(); ++i) {
    ASSERT_EQ(beats[i].gpus.size(), 2u) << "heartbeat " << i << " lost the last GPU readings";
    EXPECT_EQ(beats[i].gpus[1].health_events, 0);
  }
  // Renewed from a heartbeat sent while the sample hung (its expiry: that send + 600 ms).
  auto lease = WaitForLease(Millis(600), hung + Millis(600));
  ASSERT_TRUE(lease);
  EXPECT_GT(lease->expires, hung + Millis(600)) << "the tasks' lease was not renewed while the monitor hung";

  // An XID on GPU 1: the agent samples at once (the gate open again) and heartbeats.
  gate_->Set(true);
  HttpClient client(agent_->url(), Millis(5000));
  ASSERT_TRUE(client.Post(api::routes::kAgentSimulateXid, json{{"gpu", 1}, {"xid", 79}}).has_value());
  size_t seen = 0;
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  while (seen == 0 && SteadyClock::now() < deadline) {
    beats = head.WaitForBeats(beats.size() + 1);
    if (!beats.back().gpus.empty() && beats.back().gpus[1].health_events > 0) seen = beats.size();
  }
  ASSERT_GT(seen, 0u) << "the health event never reached the head";
  beats = head.WaitForBeats(seen + 5);
  for (size_t i = seen - 1; i < beats.size(); ++i) {
    ASSERT_EQ(beats[i].gpus.size(), 2u);
    EXPECT_EQ(beats[i].gpus[1].health_events, 1) << "heartbeat " << i << ": one event, counted once";
    EXPECT_EQ(beats[i].gpus[0].health_events, 0);
  }
}

// A GPU query that has not returned for the agent's GPU monitor timeout marks every GPU of
// the node unhealthy: a health event on each, with the reason, and one more for each further
// timeout it hangs (so a GPU resumed meanwhile is marked again); once the query returns, no
// more. On main the heartbeats went on with the last readings and no event at all.
TEST_F(AgentTimingTest, AGpuQueryHungPastTheTimeoutMarksEveryGpuUnhealthy) {
  FakeHead head(Timing(50, 3000, 2000));
  StartAgent(head, {}, /*gpus=*/2, /*gpu_monitor_timeout=*/Millis(1000));
  auto beats = head.WaitForBeats(5);
  ASSERT_GE(beats.size(), 5u);
  for (const auto& b : beats) {
    ASSERT_EQ(b.gpus.size(), 2u);
    EXPECT_EQ(b.gpus[0].health_events, 0) << "no event while the queries return";
  }
  // Each beat from `from` on, until `done` says so (or 30 s pass): the one it stopped at.
  auto wait_for = [&](size_t from, auto done) -> std::optional<FakeHead::Beat> {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
    for (size_t i = from; SteadyClock::now() < deadline; ++i) {
      beats = head.WaitForBeats(i + 1);
      if (beats.size() <= i) break;
      if (done(beats[i])) return beats[i];
    }
    return std::nullopt;
  };
  const auto events = [](const FakeHead::Beat& b, int64_t n) {
    return b.gpus.size() == 2 && b.gpus[0].health_events >= n && b.gpus[1].health_events >= n;
  };

  gate_->Set(false);
  ASSERT_TRUE(gate_->WaitForHungSample()) << "the monitor was never sampled again";
  auto first = wait_for(beats.size(), [&](const FakeHead::Beat& b) { return events(b, 1); });
  ASSERT_TRUE(first) << "no health event while the GPU query hung";
  for (const auto& g : first->gpus) {
    EXPECT_EQ(g.health_events, 1);
    EXPECT_THAT(g.health_event, ::testing::HasSubstr("the GPU monitor's query has not returned for"));
  }
  // Still hung a timeout later: one more event on each GPU.
  ASSERT_TRUE(wait_for(beats.size(), [&](const FakeHead::Beat& b) { return events(b, 2); }))
      << "no second event while the query went on hanging";

  // The query returns: from the first beat that no longer says it hangs, the count stays.
  gate_->Set(true);
  auto back = wait_for(beats.size(), [](const FakeHead::Beat& b) {
    return b.gpus.size() == 2 && b.gpus[0].health_event.find("has not returned") == std::string::npos;
  });
  ASSERT_TRUE(back) << "the heartbeats kept saying the query hangs after it returned";
  const int64_t counted = back->gpus[0].health_events;
  EXPECT_GE(counted, 2);
  beats = head.WaitForBeats(beats.size() + 10);
  for (size_t i = beats.size() - 10; i < beats.size(); ++i) {
    ASSERT_EQ(beats[i].gpus.size(), 2u);
    EXPECT_EQ(beats[i].gpus[0].health_events, counted) << "heartbeat " << i << ": an event after the query returned";
    EXPECT_EQ(beats[i].gpus[1].health_events, counted) << "heartbeat " << i;
  }
}

// The bodies the head sends the agent's own endpoints (the image cache, exec sessions) are
// agent protocol: a newer head's field is ignored, so an older agent keeps answering it
// during a rolling upgrade; a known field of the wrong type is still refused (400), named.
TEST_F(AgentTimingTest, TheAgentsEndpointsIgnoreANewerHeadsFieldsAndCheckKnownOnes) {
  FakeHead head(Timing(50, 3000, 2000));
  StartAgent(head);
  ASSERT_GE(head.WaitForBeats(1).size(), 1u);  // registered: the executor exists
  const auto url = ParseHttpUrl(agent_->url());
  ASSERT_TRUE(url.has_value());
  httplib::Client client(url->host, url->port);
  auto post = [&](const std::string& path, const json& body) {
    auto r = client.Post(path, body.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string("(no answer)"));
  };

  auto [prune, prune_body] = post(api::routes::kAgentImagesPrune, json{{"unused_for_s", 60}, {"dry_run", true}});
  EXPECT_EQ(prune, 200) << prune_body;
  auto [bad_prune, bad_prune_body] = post(api::routes::kAgentImagesPrune, json{{"unused_for_s", "60"}, {"dry_run", true}});
  EXPECT_EQ(bad_prune, 400);
  EXPECT_NE(bad_prune_body.find("unused_for_s"), std::string::npos) << bad_prune_body;
  auto [remove, remove_body] = post(api::routes::kAgentImagesRemove, json{{"image", "busybox"}, {"force", true}});
  EXPECT_NE(remove, 400) << remove_body;
  auto [bad_remove, bad_remove_body] = post(api::routes::kAgentImagesRemove, json{{"force", true}});
  EXPECT_EQ(bad_remove, 400);
  EXPECT_NE(bad_remove_body.find("image"), std::string::npos) << bad_remove_body;

  // No such task runs here: past the body's decoding, the call fails as not found.
  const std::string exec = std::string(api::routes::kAgentExec) + "?job=1&attempt=0&rank=0";
  auto [start, start_body] = post(exec, json{{"command", {"ls"}}, {"cgroup_weight", 50}});
  EXPECT_EQ(start, 404) << start_body;
  auto [bad_start, bad_start_body] = post(exec, json{{"command", {"ls"}}, {"rows", "many"}, {"cgroup_weight", 50}});
  EXPECT_EQ(bad_start, 400);
  EXPECT_NE(bad_start_body.find("rows"), std::string::npos) << bad_start_body;
}

TEST_F(AgentTimingTest, AWakeUpBringsAHeartbeatWithinALongInterval) {
  FakeHead head(Timing(60'000, 180'000, 120'000));
  StartAgent(head);
  ASSERT_GE(head.WaitForBeats(1).size(), 1u) << "an agent heartbeats right after registering";
  // The interval is a minute; a wake-up (what the head sends when assignments change)
  // brings the next heartbeat long before it.
  HttpClient client(agent_->url(), Millis(5000));
  ASSERT_TRUE(client.Post(api::routes::kAgentWake, json::object()).has_value());
  EXPECT_GE(head.WaitForBeats(2).size(), 2u);
}

// The head leaves out the launch of a task its agent reported (head/core DesiredTasks).
// An agent that gets such a launch for a task it does not have (it ended and was
// forgotten, say) does not start it with no command: its next heartbeat does not report
// the task, and once a reply carries the whole launch the agent starts it.
TEST_F(AgentTimingTest, ALaunchWithoutItsCommandStartsNothingUntilTheWholeLaunchComes) {
  FakeHead head(Timing(50, 3000, 2000));
  api::TaskLaunch held;
  held.job = 5;
  held.rank = 0;
  head.SetTasks({held});
  StartAgent(head);
  auto beats = head.WaitForBeats(6);
  ASSERT_GE(beats.size(), 6u);
  for (const auto& b : beats) EXPECT_TRUE(b.tasks.empty()) << "nothing was started";

  api::TaskLaunch whole = held;
  whole.command = {"/bin/true"};
  head.SetTasks({whole});
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  bool reported = false;
  while (!reported && SteadyClock::now() < deadline) {
    beats = head.WaitForBeats(beats.size() + 1);
    for (const auto& t : beats.back().tasks) reported |= t.job == 5 && t.rank == 0;
  }
  EXPECT_TRUE(reported) << "the whole launch starts the task (the heartbeats report it)";
}

}  // namespace
}  // namespace cohort::agent
