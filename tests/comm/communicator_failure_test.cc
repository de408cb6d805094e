// Failure behaviour of every available backend: absent, destroyed and killed ranks fail
// their peers within the timeout with messages naming the operation, its sequence number
// and the missing rank; mismatched calls are caught on every side; bad options and an
// unreachable store give clear errors. Also measures the consistency check's cost.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <latch>
#include <optional>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/communicator_descriptor.h"
#include "comm/store.h"
#include "comm_test_util.h"

namespace cohort::comm {
namespace {

using commtest::LocalOptions;
using commtest::MemStore;
using commtest::RunRanks;
using ::testing::HasSubstr;

double SecondsSince(SteadyTime start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

class CommFailure : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& backend() const { return GetParam(); }
};

// Creates `world` communicators on threads (they rendezvous concurrently) and returns them.
std::vector<std::unique_ptr<Communicator>> CreateAll(const std::string& backend, int world,
                                                     Millis timeout, bool check = true) {
  auto store = std::make_shared<MemStore>();
  std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      CommOptions o = LocalOptions(backend, r, world, store, timeout);
      o.check_consistency = check;
      auto c = CreateCommunicator(o);
      if (c) comms[r] = std::move(*c);
      else ADD_FAILURE() << c.error().ToString();
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// A world where the ranks in `absent` stay alive but skip the second call; the others
// make it and must fail with the timeout. Returns each present rank's error and time.
struct AbsentOutcome {
  std::vector<Error> errors;
  std::vector<double> took;
  std::vector<std::optional<Error>> after;  // the next call's error (broken communicator)
};
enum class SecondCall { kAllReduce, kRecvFromNext };

AbsentOutcome RunWithAbsentRanks(const std::string& backend, int world, std::set<int> absent,
                                 bool check, SecondCall call) {
  const Millis timeout(2000);
  AbsentOutcome out{std::vector<Error>(world), std::vector<double>(world, 0),
                    std::vector<std::optional<Error>>(world)};
  auto comms = CreateAll(backend, world, timeout, check);
  for (auto& c : comms) {
    if (!c) return out;
  }
  std::latch done(world - static_cast<int>(absent.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> x(1024, 1.0f);
      auto ok = comms[r]->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
      EXPECT_TRUE(ok.has_value()) << ok.error().ToString();
      if (absent.contains(r)) {  // alive, but never makes the second call
        done.wait();
        return;
      }
      const auto start = SteadyClock::now();
      auto res = call == SecondCall::kAllReduce
                     ? comms[r]->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32,
                                           ReduceOp::kSum)
                     : comms[r]->Recv(x.data(), 16, DataType::kFloat32, (r + 1) % world, 5);
      out.took[r] = SecondsSince(start);
      done.count_down();
      EXPECT_FALSE(res.has_value()) << "rank " << r;
      if (res) return;
      out.errors[r] = res.error();
      auto again = comms[r]->AllReduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum);
      if (!again) out.after[r] = again.error();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_P(CommFailure, AbsentRanksTimeOutNamingThem) {
  // Four worlds at once (each waits out the same 2 s timeout).
  AbsentOutcome one, two, unchecked, p2p;
  {
    std::jthread a([&] { one = RunWithAbsentRanks(backend(), 3, {2}, true, SecondCall::kAllReduce); });
    std::jthread b([&] { two = RunWithAbsentRanks(backend(), 4, {1, 3}, true, SecondCall::kAllReduce); });
    std::jthread c([&] { unchecked = RunWithAbsentRanks(backend(), 3, {2}, false, SecondCall::kAllReduce); });
    std::jthread d([&] { p2p = RunWithAbsentRanks(backend(), 2, {1}, true, SecondCall::kRecvFromNext); });
  }
  auto expect_timeout = [](const AbsentOutcome& o, int r, const std::string& text) {
    SCOPED_TRACE(fmt::format("rank {}: {}", r, o.errors[r].ToString()));
    EXPECT_EQ(o.errors[r].code, ErrorCode::kDeadlineExceeded);
    EXPECT_THAT(o.errors[r].message, HasSubstr(text));
    EXPECT_GE(o.took[r], 1.9);
    EXPECT_LT(o.took[r], 4.0);
    // The communicator is broken from now on, and says why.
    ASSERT_TRUE(o.after[r].has_value());
    EXPECT_EQ(o.after[r]->code, ErrorCode::kFailedPrecondition);
    EXPECT_THAT(o.after[r]->message, HasSubstr(o.errors[r].message));
  };
  for (int r : {0, 1}) {
    expect_timeout(one, r, "allreduce #2 (float32, 1024 elements) timed out after 2.0s waiting for rank 2");
  }
  for (int r : {0, 2}) {
    expect_timeout(two, r, "allreduce #2 (float32, 1024 elements) timed out after 2.0s waiting for ranks 1 and 3");
  }
  // Without the descriptor exchange the backend cannot tell who is missing, but still
  // fails within the timeout instead of hanging.
  for (int r : {0, 1}) expect_timeout(unchecked, r, "allreduce #2 (float32, 1024 elements) timed out after 2.0s");
  expect_timeout(p2p, 0, "recv from rank 1 (tag 5, float32, 16 elements) timed out after 2.0s waiting for rank 1");
  std::cout << "    " << two.errors[0].ToString() << "\n    " << unchecked.errors[0].ToString()
            << "\n    " << p2p.errors[0].ToString() << "\n";
}

// Rank 2 of `world` destroys its communicator after one collective; the others' next
// allreduce must fail well before the timeout (5 s).
std::vector<std::pair<Error, double>> RunWithDestroyedRank(const std::string& backend, int world,
                                                           bool check) {
  std::vector<std::pair<Error, double>> out(static_cast<size_t>(world));
  auto comms = CreateAll(backend, world, Millis(5000), check);
  for (auto& c : comms) {
    if (!c) return out;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int32_t> x(100000, r);
      auto ok = comms[r]->AllReduce(x.data(), x.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
      EXPECT_TRUE(ok.has_value()) << ok.error().ToString();
      if (r == 2) {
        comms[r].reset();  // its sockets close
        return;
      }
      const auto start = SteadyClock::now();
      auto res = comms[r]->AllReduce(x.data(), x.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
      out[r].second = SecondsSince(start);
      EXPECT_FALSE(res.has_value()) << "rank " << r;
      if (!res) out[r].first = res.error();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_P(CommFailure, DestroyedRankFailsPeersFast) {
  std::vector<std::pair<Error, double>> checked, unchecked;
  {
    std::jthread a([&] { checked = RunWithDestroyedRank(backend(), 3, true); });
    // Without the exchange only rank 2's neighbours see it go; they close their own
    // connections on failure, so the rest of the ring fails fast too.
    std::jthread b([&] { unchecked = RunWithDestroyedRank(backend(), 5, false); });
  }
  for (const auto* outcome : {&checked, &unchecked}) {
    for (size_t r = 0; r < outcome->size(); ++r) {
      if (r == 2) continue;
      const auto& [error, took] = (*outcome)[r];
      SCOPED_TRACE(fmt::format("world {} rank {}: {}", outcome->size(), r, error.ToString()));
      EXPECT_EQ(error.code, ErrorCode::kUnavailable);
      EXPECT_THAT(error.message, HasSubstr("allreduce #2 (int32, 100000 elements)"));
      if (outcome == &checked) {
        EXPECT_THAT(error.message, HasSubstr("lost connection to rank 2"));
      }
      // Failing from the lost connection (kUnavailable above) rather than from the 5 s
      // timeout is the behaviour under test; the bound only says it came before the
      // timeout, not how fast (a loaded CI machine once took over 2 s).
      EXPECT_LT(took, 5.0);
    }
  }
}

// A temp dir for a file:// store shared with a child process.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "comm_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class ChildDeath { kExitsMidRun, kKilledByParent };

// Rank 1 of a world-2 group runs in a forked child process that dies mid-run; rank 0
// (this process) must fail within the timeout.
void RunKilledChild(const std::string& backend, ChildDeath death, bool check) {
  TempDir dir;
  const std::string url = "file://" + dir.path();
  const Millis timeout(3000);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // child: rank 1; only _exit() from here
    auto store = OpenStore(url, false, timeout);
    if (!store) _exit(2);
    CommOptions o = LocalOptions(backend, 1, 2, std::shared_ptr<Store>(std::move(*store)), timeout);
    o.check_consistency = check;
    auto comm = CreateCommunicator(o);
    if (!comm) _exit(3);
    std::vector<float> x(4096, 1.0f);
    for (int i = 0; i < (death == ChildDeath::kExitsMidRun ? 2 : 1000); ++i) {
      if (!(*comm)->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum)) {
        _exit(4);
      }
    }
    _exit(0);  // dies with its connections open: the kernel closes them
  }
  auto store = OpenStore(url, false, timeout);
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  CommOptions o = LocalOptions(backend, 0, 2, std::shared_ptr<Store>(std::move(*store)), timeout);
  o.check_consistency = check;
  auto comm = CreateCommunicator(o);
  ASSERT_TRUE(comm.has_value()) << comm.error().ToString();
  std::vector<float> x(4096, 1.0f);
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK((*comm)->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
  }
  if (death == ChildDeath::kKilledByParent) {
    // The child is already in (or about to enter) its third allreduce.
    ASSERT_EQ(kill(pid, SIGKILL), 0);
  }
  const auto start = SteadyClock::now();
  auto res = (*comm)->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
  const double took = SecondsSince(start);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (death == ChildDeath::kExitsMidRun) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  } else {
    EXPECT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  }
  ASSERT_FALSE(res.has_value()) << "allreduce with a dead peer succeeded";
  SCOPED_TRACE(res.error().ToString());
  EXPECT_TRUE(res.error().code == ErrorCode::kUnavailable ||
              res.error().code == ErrorCode::kDeadlineExceeded);
  EXPECT_THAT(res.error().message, HasSubstr("allreduce #3"));
  if (check) {
    EXPECT_THAT(res.error().message, HasSubstr("rank 1"));
  }
  EXPECT_LT(took, 3.5);
  std::cout << "    dead peer (" << (check ? "check on" : "check off") << "): " << took << "s: "
            << res.error().ToString() << "\n";
}

TEST_P(CommFailure, ChildProcessExitsMidRun) { RunKilledChild(backend(), ChildDeath::kExitsMidRun, true); }
TEST_P(CommFailure, ChildProcessExitsMidRunWithoutCheck) {
  RunKilledChild(backend(), ChildDeath::kExitsMidRun, false);
}
TEST_P(CommFailure, ChildProcessKilled) { RunKilledChild(backend(), ChildDeath::kKilledByParent, true); }

TEST_P(CommFailure, MismatchedCountsFailOnEveryRank) {
  std::vector<Error> errors(3);
  RunRanks(backend(), 3, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(2048, 1.0f);
    const size_t count = r == 2 ? 2048 : 1024;
    auto res = comm.AllReduce(x.data(), x.data(), count, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_FALSE(res.has_value());
    errors[r] = res.error();
    // Nothing moved and every rank agrees: the communicator is still usable.
    std::vector<float> y(10, 1.0f);
    ASSERT_OK(comm.AllReduce(y.data(), y.data(), y.size(), DataType::kFloat32, ReduceOp::kSum));
    EXPECT_EQ(y[0], 3.0f);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r].code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(errors[r].message,
              "collective mismatch at #1: rank 0 called allreduce(float32, 1024, sum), rank 2 "
              "called allreduce(float32, 2048, sum)");
  }
}

TEST_P(CommFailure, MismatchedKindsRootsAndLayoutsFail) {
  RunRanks(backend(), 2, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(8, 1.0f), y(8);
    // Different collectives.
    auto a = r == 0 ? comm.AllReduce(x.data(), x.data(), 8, DataType::kFloat32, ReduceOp::kSum)
                    : comm.Broadcast(x.data(), 8, DataType::kFloat32, 0);
    ASSERT_FALSE(a.has_value());
    EXPECT_THAT(a.error().message, HasSubstr("collective mismatch at #1: rank 0 called allreduce"));
    EXPECT_THAT(a.error().message, HasSubstr("rank 1 called broadcast(float32, 8, root 0)"));
    // Different roots.
    auto b = comm.Broadcast(x.data(), 8, DataType::kFloat32, r);
    ASSERT_FALSE(b.has_value());
    EXPECT_THAT(b.error().message, HasSubstr("mismatch at #2"));
    // Different dtypes.
    auto c = comm.AllReduce(x.data(), x.data(), 4, r == 0 ? DataType::kFloat32 : DataType::kInt32,
                            ReduceOp::kSum);
    ASSERT_FALSE(c.has_value());
    EXPECT_THAT(c.error().message, HasSubstr("int32"));
    // Different reduce-scatter layouts with the same total.
    std::vector<size_t> counts = r == 0 ? std::vector<size_t>{4, 4} : std::vector<size_t>{3, 5};
    auto d = comm.ReduceScatter(x.data(), y.data(), counts, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_FALSE(d.has_value());
    EXPECT_THAT(d.error().message, HasSubstr("mismatch at #4"));
    // Different reduce ops.
    auto e = comm.AllReduce(x.data(), x.data(), 8, DataType::kFloat32,
                            r == 0 ? ReduceOp::kSum : ReduceOp::kMax);
    ASSERT_FALSE(e.has_value());
    EXPECT_THAT(e.error().message, HasSubstr("allreduce(float32, 8, max)"));
    ASSERT_OK(comm.Barrier());
  });
}

TEST_P(CommFailure, BadOptions) {
  auto store = std::make_shared<MemStore>();
  auto expect_invalid = [](CommOptions o, const std::string& text) {
    auto c = CreateCommunicator(o);
    ASSERT_FALSE(c.has_value()) << text;
    EXPECT_EQ(c.error().code, ErrorCode::kInvalidArgument) << c.error().ToString();
    EXPECT_THAT(c.error().message, HasSubstr(text));
  };
  CommOptions o = LocalOptions(backend(), 0, 2, store);
  o.backend = "mpi";
  expect_invalid(o, "unknown backend 'mpi' (available: gloo");
  o = LocalOptions(backend(), 0, 0, store);
  expect_invalid(o, "world_size");
  o = LocalOptions(backend(), 3, 3, store);
  expect_invalid(o, "rank");
  o = LocalOptions(backend(), -1, 3, store);
  expect_invalid(o, "rank");
  o = LocalOptions(backend(), 0, 2, nullptr);
  expect_invalid(o, "store");
  o = LocalOptions(backend(), 0, 2, store, Millis(0));
  expect_invalid(o, "timeout");
}

namespace {
void OnSigpipe(int) {}
sighandler_t SigpipeAction() {
  struct sigaction current {};
  sigaction(SIGPIPE, nullptr, &current);
  return current.sa_handler;
}
}  // namespace

// Gloo writes with writev, so a peer killed mid-collective used to raise SIGPIPE and kill
// this rank (2 of 150 runs of ChildProcessKilled/gloo). Creating a gloo communicator must
// leave SIGPIPE ignored, but never replace a handler the program installed.
TEST(CommOptionsTest, GlooIgnoresSigpipeUnlessTheProgramHandlesIt) {
  auto create_one_rank = [] {
    auto comm = CreateCommunicator(LocalOptions("gloo", 0, 1, std::make_shared<MemStore>()));
    ASSERT_TRUE(comm.has_value()) << comm.error().ToString();
  };
  signal(SIGPIPE, SIG_DFL);
  create_one_rank();
  EXPECT_EQ(SigpipeAction(), SIG_IGN);
  signal(SIGPIPE, OnSigpipe);
  create_one_rank();
  EXPECT_EQ(SigpipeAction(), &OnSigpipe);
  signal(SIGPIPE, SIG_DFL);
}

TEST(CommOptionsTest, NcclUnavailableWithoutBuildOrDevice) {
  const auto available = AvailableBackends();
  if (std::find(available.begin(), available.end(), "nccl") != available.end()) {
    GTEST_SKIP() << "nccl is usable here";
  }
  CommOptions o;
  o.backend = "nccl";
  auto c = CreateCommunicator(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kUnavailable);
  // Built without CUDA/NCCL, or built with them on a machine without a usable GPU.
  EXPECT_THAT(c.error().message, ::testing::AnyOf(HasSubstr("nccl backend is not built"),
                                                  ::testing::StartsWith("no CUDA device: ")));
}

TEST_P(CommFailure, RanksDisagreeingOnWorldSizeFail) {
  auto store = std::make_shared<MemStore>();
  std::vector<Result<std::unique_ptr<Communicator>>> results(2);
  {
    std::jthread a([&] { results[0] = CreateCommunicator(LocalOptions(backend(), 0, 2, store, Millis(3000))); });
    std::jthread b([&] { results[1] = CreateCommunicator(LocalOptions(backend(), 1, 3, store, Millis(3000))); });
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].has_value()) << "rank " << r;
    EXPECT_EQ(results[r].error().code, ErrorCode::kInvalidArgument) << results[r].error().ToString();
    EXPECT_THAT(results[r].error().message, HasSubstr("same world_size"));
  }
  EXPECT_THAT(results[0].error().message,
              HasSubstr("rank 1 was created with world_size 3 and this rank with 2"));
}

TEST_P(CommFailure, DuplicateRankIsRejected) {
  auto store = std::make_shared<MemStore>();
  auto first = std::make_shared<Result<std::unique_ptr<Communicator>>>();
  std::jthread waiting([&] { *first = CreateCommunicator(LocalOptions(backend(), 0, 2, store, Millis(500))); });
  // The same rank again: whichever of the two claims it second is rejected at once (the
  // other waits out its timeout for a rank 1 that never comes).
  auto second = CreateCommunicator(LocalOptions(backend(), 0, 2, store, Millis(500)));
  waiting.join();
  ASSERT_FALSE(second.has_value());
  ASSERT_FALSE(first->has_value());
  const Error& rejected =
      second.error().code == ErrorCode::kInvalidArgument ? second.error() : first->error();
  EXPECT_EQ(rejected.code, ErrorCode::kInvalidArgument) << rejected.ToString();
  EXPECT_THAT(rejected.message, HasSubstr("rank 0 was claimed 2 times"));
}

TEST_P(CommFailure, BindAddressByInterfaceOrFailClearly) {
  if (backend() == "shm") GTEST_SKIP() << "iface_host is gloo's TCP address; shm binds none";
  // An interface name works like an address.
  RunRanks(backend(), 2, [](Communicator& comm) {
    int64_t x = comm.rank() + 1;
    ASSERT_OK(comm.AllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(x, 3);
  }, [](CommOptions& o) { o.iface_host = "lo"; });
  // A name that does not resolve (Debian's Gloo would crash on it) or an address that
  // is not ours: kUnavailable naming it.
  for (const char* host : {"no-such-host.invalid", "192.0.2.1"}) {
    CommOptions o = LocalOptions(backend(), 0, 1, nullptr);
    o.iface_host = host;
    auto c = CreateCommunicator(o);
    ASSERT_FALSE(c.has_value()) << host;
    EXPECT_EQ(c.error().code, ErrorCode::kUnavailable) << c.error().ToString();
    EXPECT_THAT(c.error().message, HasSubstr(host));
  }
}

// Strays: something that is not a peer connects to every pair's listening port as the
// port is published, before any peer can (a client that outlived its server and keeps
// retrying a port the kernel has since given to the pair: a scraper, a heartbeat). Gloo's
// transport takes the first connection to arrive for the peer's, so the real peer is
// refused; the rendezvous (gloo_mesh.h) must notice, connect again and give a working
// group, not fail or hang. The strays send an HTTP request and stay connected.
class StrayStore final : public Store {
 public:
  StrayStore(std::shared_ptr<Store> inner, int world) : inner_(std::move(inner)), world_(world) {}
  ~StrayStore() override {
    for (int fd : strays_) ::close(fd);
  }
  Result<void> Set(const std::string& key, const std::string& value) override {
    // A rank's pair addresses: one Gloo tcp::Address (sockaddr_storage, then a sequence
    // number) per other rank. Only each rank's first publication gets strays.
    constexpr size_t kAddress = sizeof(sockaddr_storage) + sizeof(ssize_t);
    if (value.size() == kAddress * static_cast<size_t>(world_ - 1)) {
      std::lock_guard lock(mu_);
      if (published_.size() < static_cast<size_t>(world_) && published_.insert(key).second) {
        for (size_t at = 0; at < value.size(); at += kAddress) {
          sockaddr_storage ss{};
          std::memcpy(&ss, value.data() + at, sizeof ss);
          const int fd = ::socket(ss.ss_family, SOCK_STREAM, 0);
          if (fd < 0) continue;
          const socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
          if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0) {
            const char request[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
            (void)!::write(fd, request, sizeof request - 1);
            ++connected_;
          }
          strays_.push_back(fd);
        }
      }
    }
    return inner_->Set(key, value);
  }
  Result<std::string> Get(const std::string& key, Millis timeout) override { return inner_->Get(key, timeout); }
  Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) override {
    return inner_->Wait(keys, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return inner_->Add(key, delta); }
  int connected() {
    std::lock_guard lock(mu_);
    return connected_;
  }

 private:
  std::shared_ptr<Store> inner_;
  const int world_;
  std::mutex mu_;
  std::set<std::string> published_;  // guarded by mu_
  std::vector<int> strays_;          // guarded by mu_
  int connected_ = 0;                // guarded by mu_
};

TEST(GlooRendezvousTest, StrayConnectionsToThePairsPortsAreSurvived) {
  const int world = 4;
  auto store = std::make_shared<StrayStore>(std::make_shared<MemStore>(), world);
  std::atomic<int> worked{0};
  RunRanks("gloo", world, [&](Communicator& comm) {
    int64_t x = comm.rank() + 1;
    ASSERT_OK(comm.AllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum));
    EXPECT_EQ(x, 10);
    ASSERT_OK(comm.Barrier());
    ++worked;
  }, [&](CommOptions& o) { o.store = store; });
  EXPECT_EQ(worked.load(), world);
  // Every listening pair got a stray: world x (world - 1) ports.
  EXPECT_EQ(store->connected(), world * (world - 1));
}

TEST_P(CommFailure, UnreachableStoreFailsRendezvous) {
  CommOptions o = LocalOptions(backend(), 0, 2, std::make_shared<commtest::BlackHoleStore>(), Millis(300));
  const auto start = SteadyClock::now();
  auto c = CreateCommunicator(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kDeadlineExceeded) << c.error().ToString();
  EXPECT_THAT(c.error().message, HasSubstr("rendezvous"));
  // The key it waited for: rank 1's addresses (gloo: in the first connection attempt). Rank
  // 0 of shm reads nothing from the store (it creates the segment): it names the rank that
  // never attached.
  const std::string waited = backend() == "gloo"  ? "test/world/mesh0/1"
                             : backend() == "shm" ? "waiting for rank 1"
                                                  : "test/world/1";
  EXPECT_THAT(c.error().message, HasSubstr(waited));
  EXPECT_LT(SecondsSince(start), 2.0);
}

TEST_P(CommFailure, AbsentPeerAtRendezvousTimesOut) {
  CommOptions o = LocalOptions(backend(), 1, 2, std::make_shared<MemStore>(), Millis(300));
  auto c = CreateCommunicator(o);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kDeadlineExceeded) << c.error().ToString();
}

TEST_P(CommFailure, WorldOfOneNeedsNoStore) {
  CommOptions o;
  o.backend = backend();
  o.iface_host = "127.0.0.1";
  auto c = CreateCommunicator(o);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  std::vector<int64_t> x{1, 2, 3}, y(3);
  ASSERT_OK((*c)->AllReduce(x.data(), y.data(), 3, DataType::kInt64, ReduceOp::kAvg));
  EXPECT_EQ(y, x);
  ASSERT_OK((*c)->Barrier());
  const int self[] = {0};
  auto g = (*c)->Split(self);
  ASSERT_TRUE(g.has_value()) << g.error().ToString();
  EXPECT_EQ((*g)->size(), 1);
}

TEST_P(CommFailure, BadCallsAreRejectedLocally) {
  RunRanks(backend(), 2, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(4);
    auto code = [](const Result<void>& res) { return res ? std::optional<ErrorCode>() : res.error().code; };
    EXPECT_EQ(code(comm.Send(x.data(), 4, DataType::kFloat32, r, 0)), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code(comm.Send(x.data(), 4, DataType::kFloat32, 5, 0)), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code(comm.Recv(x.data(), 4, DataType::kFloat32, 1 - r, -1)), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code(comm.Broadcast(x.data(), 4, DataType::kFloat32, 2)), ErrorCode::kInvalidArgument);
    EXPECT_EQ(code(comm.AllReduce(nullptr, x.data(), 4, DataType::kFloat32, ReduceOp::kSum)),
              ErrorCode::kInvalidArgument);
    const size_t three[] = {1, 1, 1};
    EXPECT_EQ(code(comm.AllGather(x.data(), x.data(), three, DataType::kFloat32)),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(code(comm.ReduceScatter(x.data(), x.data(), three, DataType::kFloat32, ReduceOp::kSum)),
              ErrorCode::kInvalidArgument);
    const int unsorted[] = {1, 0};
    const int without_me[] = {1 - r};
    const int out_of_range[] = {0, 1, 2};
    for (auto ranks : {std::span<const int>(unsorted), std::span<const int>(without_me),
                       std::span<const int>(out_of_range), std::span<const int>()}) {
      auto g = comm.Split(ranks);
      ASSERT_FALSE(g.has_value());
      EXPECT_EQ(g.error().code, ErrorCode::kInvalidArgument) << g.error().ToString();
    }
    // None of that consumed a sequence number: the ranks are still in step.
    ASSERT_OK(comm.AllReduce(x.data(), x.data(), 4, DataType::kFloat32, ReduceOp::kSum));
  });
}

// A measurement, not a test (disabled; run with --gtest_also_run_disabled_tests
// --gtest_filter='*ConsistencyCheckCost*'): the median time per allreduce with and
// without the descriptor exchange, one process per rank over a file:// store.
TEST_P(CommFailure, DISABLED_ConsistencyCheckCost) {
  for (int world : {2, 4}) {
    for (size_t count : {size_t{1}, size_t{65536}}) {
      for (bool check : {false, true}) {
        TempDir dir;
        int pipe_fds[2];
        ASSERT_EQ(pipe(pipe_fds), 0);
        std::vector<pid_t> kids;
        for (int r = 0; r < world; ++r) {
          const pid_t pid = fork();
          ASSERT_GE(pid, 0);
          if (pid != 0) {
            kids.push_back(pid);
            continue;
          }
          auto store = OpenStore("file://" + dir.path(), false, Millis(10000));
          if (!store) _exit(2);
          CommOptions o = LocalOptions(backend(), r, world, std::shared_ptr<Store>(std::move(*store)));
          o.check_consistency = check;
          auto comm = CreateCommunicator(o);
          if (!comm) _exit(3);
          std::vector<float> x(count, 1.0f);
          std::vector<double> us;
          for (int i = 0; i < 220; ++i) {
            const auto start = SteadyClock::now();
            if (!(*comm)->AllReduce(x.data(), x.data(), count, DataType::kFloat32, ReduceOp::kMax)) _exit(4);
            if (i >= 20) us.push_back(SecondsSince(start) * 1e6);  // 20 warm-up rounds
          }
          std::sort(us.begin(), us.end());
          const double median = us[us.size() / 2];
          if (r == 0 && write(pipe_fds[1], &median, sizeof(median)) != sizeof(median)) _exit(5);
          _exit(0);
        }
        close(pipe_fds[1]);
        double median = -1;
        EXPECT_EQ(read(pipe_fds[0], &median, sizeof(median)), static_cast<ssize_t>(sizeof(median)));
        close(pipe_fds[0]);
        for (pid_t k : kids) {
          int status = 0;
          waitpid(k, &status, 0);
          EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
        }
        std::cout << fmt::format("    world {} allreduce of {} floats, check {}: median {:.0f}us\n",
                                 world, count, check ? "on " : "off", median);
      }
    }
  }
}

// Host-memory backends: these tests pass host buffers and put several ranks in one
// process (NCCL needs device memory and a GPU per rank; its failure behaviour is tested
// in nccl_test.cc).
std::vector<std::string> HostBackends() {
  auto b = AvailableBackends();
  std::erase(b, "nccl");
  return b;
}

INSTANTIATE_TEST_SUITE_P(Backends, CommFailure, ::testing::ValuesIn(HostBackends()),
                         [](const auto& info) { return info.param; });

TEST(CollectiveDescriptorTest, DescribesCalls) {
  auto d = DescribeAllReduce(1048576, DataType::kFloat32, ReduceOp::kSum);
  d.seq = 17;
  EXPECT_EQ(DescribeOp(d), "allreduce #17 (float32, 1048576 elements)");
  EXPECT_EQ(DescribeCall(d), "allreduce(float32, 1048576, sum)");
  EXPECT_EQ(DescribeCall(d, true), "allreduce #17(float32, 1048576, sum)");
  auto b = DescribeBroadcast(8, DataType::kInt32, 2);
  b.seq = 3;
  EXPECT_EQ(DescribeOp(b), "broadcast #3 (int32, 8 elements, root 2)");
  auto bar = DescribeBarrier();
  bar.seq = 4;
  EXPECT_EQ(DescribeOp(bar), "barrier #4");
  const size_t c1[] = {1, 2}, c2[] = {2, 1};
  EXPECT_NE(DescribeReduceScatter(c1, DataType::kFloat32, ReduceOp::kSum),
            DescribeReduceScatter(c2, DataType::kFloat32, ReduceOp::kSum));
  EXPECT_EQ(DescribeAllGather(c1, DataType::kFloat16), DescribeAllGather(c1, DataType::kFloat16));
}

TEST(CollectiveDescriptorTest, ChecksAgreement) {
  std::vector<CollectiveDescriptor> all(3, DescribeAllReduce(4, DataType::kFloat32, ReduceOp::kSum));
  for (auto& d : all) d.seq = 5;
  EXPECT_TRUE(CheckDescriptors(all).has_value());
  all[1].seq = 4;
  auto r = CheckDescriptors(all, std::vector<std::string>{"rank 0", "rank 1 (world rank 3)", "rank 2"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message,
            "collective mismatch at #5: rank 0 called allreduce #5(float32, 4, sum), rank 1 (world "
            "rank 3) called allreduce #4(float32, 4, sum)");
  EXPECT_EQ(JoinRankNames(std::vector<std::string>{"rank 2", "rank 3", "rank 5"}), "ranks 2, 3 and 5");
}

}  // namespace
}  // namespace cohort::comm
