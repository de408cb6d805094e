// TcpStore specifics: rendezvous at scale, connecting before the server exists,
// unreachable stores, shutdown, shared client objects, and a misbehaving peer.
#include <sys/socket.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm/tcp_store.h"
#include "store_test_util.h"

namespace cohort::comm::testing {
namespace {

TcpStoreOptions WithTimeout(Millis t) {
  TcpStoreOptions o;
  o.timeout = t;
  return o;
}

// Every rank connects its own client, publishes rank/<r> and reads every other rank's
// address: the shape of torch's and NCCL's bootstrap. Returns the wall time.
Millis Rendezvous(int world) {
  auto server = TcpStore::Listen(0, WithTimeout(Millis(30'000)));
  EXPECT_TRUE(server.has_value()) << server.error().ToString();
  if (!server) return Millis(0);
  int port = (*server)->port();
  auto start = SteadyClock::now();
  std::vector<std::thread> ranks;
  std::vector<int> ok(world, 0);
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto store = TcpStore::Connect("127.0.0.1", port, WithTimeout(Millis(30'000)));
      if (!store) {
        ADD_FAILURE() << "rank " << r << ": " << store.error().ToString();
        return;
      }
      if (auto s = (*store)->Set(fmt::format("rank/{}", r), fmt::format("10.0.0.{}:{}", r, 29500 + r)); !s) {
        ADD_FAILURE() << s.error().ToString();
        return;
      }
      for (int peer = 0; peer < world; ++peer) {
        auto v = (*store)->Get(fmt::format("rank/{}", peer), Millis(30'000));
        if (!v || *v != fmt::format("10.0.0.{}:{}", peer, 29500 + peer)) {
          ADD_FAILURE() << "rank " << r << " reading rank " << peer << ": "
                        << (v ? *v : v.error().ToString());
          return;
        }
      }
      ok[r] = 1;
    });
  }
  for (auto& t : ranks) t.join();
  auto elapsed = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  for (int r = 0; r < world; ++r) EXPECT_EQ(ok[r], 1) << "rank " << r;
  return elapsed;
}

TEST(TcpStore, Rendezvous32Ranks) {
  Millis t = Rendezvous(32);
  std::printf("[ timing   ] tcp store rendezvous, 32 ranks (connect + set + 32 gets each): %lld ms\n",
              static_cast<long long>(t.count()));
}

TEST(TcpStore, Rendezvous64Ranks) {
  Millis t = Rendezvous(64);
  std::printf("[ timing   ] tcp store rendezvous, 64 ranks: %lld ms\n", static_cast<long long>(t.count()));
}

TEST(TcpStore, ClientStartedBeforeTheServerConnectsOnceItIsUp) {
  ReservedPort reserved;
  ASSERT_GT(reserved.port(), 0);
  std::mutex mu;
  std::condition_variable cv;
  int refused = 0;  // guarded by mu
  TcpStoreOptions options = WithTimeout(Millis(30'000));
  options.on_connect_retry = [&](const Error&) {
    std::lock_guard lock(mu);
    ++refused;
    cv.notify_all();
  };
  Result<std::unique_ptr<TcpStore>> client = MakeError(ErrorCode::kInternal, "not run");
  std::thread rank1([&] { client = TcpStore::Connect("127.0.0.1", reserved.port(), options); });
  {
    // The client has tried and been refused at least once: nothing is listening yet.
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return refused > 0; }));
  }
  reserved.Release();
  auto server = TcpStore::Listen(reserved.port(), WithTimeout(Millis(10'000)));
  rank1.join();
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  ASSERT_TRUE(client.has_value()) << client.error().ToString();
  ASSERT_TRUE((*client)->Set("hello", "from rank 1").has_value());
  EXPECT_EQ((*server)->Get("hello", Millis(5000)).value_or("<error>"), "from rank 1");
}

TEST(TcpStore, UnreachableStoreFailsWithinTheTimeout) {
  ReservedPort reserved;  // bound, never listening: connections are refused
  auto start = SteadyClock::now();
  auto r = TcpStore::Connect("127.0.0.1", reserved.port(), WithTimeout(Millis(500)));
  auto took = SteadyClock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(r.error().message, fmt::format("cannot reach store tcp://127.0.0.1:{}: Connection refused (after 0.5s)",
                                           reserved.port()));
  EXPECT_GE(took, Millis(500));
  EXPECT_LT(took, Millis(3000));
}

TEST(TcpStore, PortInUseIsUnavailable) {
  auto first = TcpStore::Listen(0);
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  auto second = TcpStore::Listen((*first)->port());
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("Address already in use"), std::string::npos) << second.error().message;
}

TEST(TcpStore, OneClientObjectServesManyThreadsWithoutBlockingEachOther) {
  auto server = TcpStore::Listen(0);
  ASSERT_TRUE(server.has_value()) << server.error().ToString();
  auto client = TcpStore::Connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.has_value());
  // A Get parked on the shared object must not hold up the Set that releases it.
  Result<std::string> got = MakeError(ErrorCode::kInternal, "not run");
  std::thread waiter([&] { got = (*client)->Get("gate", Millis(20'000)); });
  // Gives the Get time to park first; the test passes whichever comes first.
  std::this_thread::sleep_for(Millis(100));
  ASSERT_TRUE((*client)->Set("gate", "open").has_value());
  waiter.join();
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ(*got, "open");
}

TEST(TcpStore, DestroyingTheServerReleasesParkedClients) {
  auto server = TcpStore::Listen(0);
  ASSERT_TRUE(server.has_value());
  auto client = TcpStore::Connect("127.0.0.1", (*server)->port(), WithTimeout(Millis(1000)));
  ASSERT_TRUE(client.has_value());
  ASSERT_TRUE((*client)->Set("k", "v").has_value());  // the connection is up and idle in the pool

  Result<std::string> got;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  std::thread waiter([&] {
    auto r = (*client)->Get("never-set", Millis(60'000));
    std::lock_guard lock(mu);
    got = std::move(r);
    done = true;
    cv.notify_all();
  });
  // Gives the GET time to park on the server; if it has not, it fails to reconnect
  // instead, which the assertions below accept too.
  std::this_thread::sleep_for(Millis(200));
  server->reset();  // stops the server thread and closes every connection
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return done; }))
        << "a parked Get outlived the server";
  }
  waiter.join();
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kUnavailable) << got.error().ToString();
  // New calls fail fast too (the reconnect attempts end at the 1 s timeout).
  auto later = (*client)->Get("k", Millis(100));
  ASSERT_FALSE(later.has_value());
  EXPECT_EQ(later.error().code, ErrorCode::kUnavailable);
}

TEST(TcpStore, AGarbageFrameDropsOnlyThatConnection) {
  auto server = TcpStore::Listen(0);
  ASSERT_TRUE(server.has_value());
  auto fd = ConnectOnce("127.0.0.1", (*server)->port(), SteadyClock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(fd.has_value()) << fd.error().ToString();
  std::string garbage = "\xff\xff\xff\xff junk";
  ASSERT_TRUE(SendAll(fd->get(), garbage, SteadyClock::now() + std::chrono::seconds(5)).has_value());
  std::string out;
  auto r = RecvExact(fd->get(), 1, out, SteadyClock::now() + std::chrono::seconds(10));
  ASSERT_FALSE(r.has_value()) << "the server answered a 4 GiB frame";
  EXPECT_EQ(r.error().message, "connection closed by peer");
  // Everyone else is still served.
  auto client = TcpStore::Connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.has_value());
  ASSERT_TRUE((*client)->Set("still", "alive").has_value());
  EXPECT_EQ((*server)->Get("still", Millis(1000)).value_or("<error>"), "alive");
}

}  // namespace
}  // namespace cohort::comm::testing
