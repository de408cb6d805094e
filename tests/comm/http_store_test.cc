// HttpStore against a fake of the head's rendezvous endpoints: the wire details (paths,
// encoding, wait_ms), re-polling, and the errors a task sees when its job has ended.
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "comm/http_store.h"
#include "store_test_util.h"

namespace cohort::comm::testing {
namespace {

TEST(HttpStore, KeysArePercentEncodedInThePath) {
  FakeRendezvousServer fake;
  auto store = HttpStore::Open(fake.BaseUrl() + "/", Millis(5000));  // a trailing '/' is fine
  ASSERT_TRUE(store.has_value()) << store.error().ToString();
  ASSERT_TRUE((*store)->Set("a/b c%~", "v").has_value());
  ASSERT_TRUE((*store)->Add("n/1", 2).has_value());
  EXPECT_EQ(fake.Keys(), (std::set<std::string>{"a/b c%~", "n/1"}));
  auto targets = fake.Targets();
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0], "/v1/rendezvous/live/keys/a%2Fb%20c%25~");
  EXPECT_EQ(targets[1], "/v1/rendezvous/live/add/n%2F1");
}

TEST(HttpStore, GetPollsAgainUntilItsOwnDeadline) {
  FakeRendezvousServer fake;
  auto store = HttpStore::Open(fake.BaseUrl(), Millis(5000));
  ASSERT_TRUE(store.has_value());
  auto got = (*store)->Get("absent", Millis(2500));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(got.error().message, "store: timed out after 2.5s waiting for keys: absent");
  // The server waits at most 1 s per request, so a 2.5 s Get asks at least three times.
  EXPECT_GE(fake.Targets().size(), 3u);
  EXPECT_LE(fake.MaxWaitMs(), 1000);
  for (const auto& t : fake.Targets()) EXPECT_NE(t.find("/keys/absent?wait_ms="), std::string::npos) << t;
}

TEST(HttpStore, AnEndedJobSurfacesTheHeadsMessageAtOnce) {
  FakeRendezvousServer fake;
  auto store = HttpStore::Open(fake.BaseUrl("ended"), Millis(5000));
  ASSERT_TRUE(store.has_value());
  auto start = SteadyClock::now();
  auto got = (*store)->Get("rank/0", Millis(30'000));
  EXPECT_LT(SteadyClock::now() - start, Millis(5000)) << "an ended job must not be waited on";
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(got.error().message,
            fmt::format("rendezvous store http://127.0.0.1:{}: job 7 attempt 0 is not running; its rendezvous "
                        "keys are gone",
                        fake.BaseUrl().substr(17, fake.BaseUrl().find('/', 17) - 17)));
  EXPECT_EQ(got.error().message.find("ended"), std::string::npos) << "the token leaked into the message";
  auto set = (*store)->Set("k", "v");
  ASSERT_FALSE(set.has_value());
  EXPECT_EQ(set.error().code, ErrorCode::kNotFound);
  auto add = (*store)->Add("k", 1);
  ASSERT_FALSE(add.has_value());
  EXPECT_EQ(add.error().code, ErrorCode::kNotFound);
  auto wait = (*store)->Wait({"a", "b"}, Millis(30'000));
  ASSERT_FALSE(wait.has_value());
  EXPECT_EQ(wait.error().code, ErrorCode::kNotFound);
}

TEST(HttpStore, UnreachableHeadIsUnavailableWithinTheTimeout) {
  ReservedPort reserved;
  auto store = HttpStore::Open(fmt::format("http://127.0.0.1:{}/v1/rendezvous/live", reserved.port()), Millis(500));
  ASSERT_TRUE(store.has_value());
  auto start = SteadyClock::now();
  auto set = (*store)->Set("k", "v");
  auto took = SteadyClock::now() - start;
  ASSERT_FALSE(set.has_value());
  EXPECT_EQ(set.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(set.error().message.find(fmt::format("cannot reach rendezvous store http://127.0.0.1:{}", reserved.port())),
            std::string::npos)
      << set.error().message;
  EXPECT_LT(took, Millis(3000));
  auto got = (*store)->Get("k", Millis(300));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kUnavailable);
  auto add = (*store)->Add("k", 1);
  ASSERT_FALSE(add.has_value());
  EXPECT_EQ(add.error().code, ErrorCode::kUnavailable);
}

TEST(HttpStore, Rendezvous32RanksAgainstTheFake) {
  FakeRendezvousServer fake;
  constexpr int kWorld = 32;
  auto start = SteadyClock::now();
  std::vector<std::thread> ranks;
  std::vector<int> ok(kWorld, 0);
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto store = HttpStore::Open(fake.BaseUrl(), Millis(10'000));
      if (!store || !(*store)->Set(fmt::format("rank/{}", r), std::to_string(r))) return;
      for (int peer = 0; peer < kWorld; ++peer) {
        auto v = (*store)->Get(fmt::format("rank/{}", peer), Millis(30'000));
        if (!v || *v != std::to_string(peer)) return;
      }
      ok[r] = 1;
    });
  }
  for (auto& t : ranks) t.join();
  auto ms = std::chrono::duration_cast<Millis>(SteadyClock::now() - start).count();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(ok[r], 1) << "rank " << r;
  std::printf("[ timing   ] http store rendezvous (fake head), 32 ranks: %lld ms\n", static_cast<long long>(ms));
}

TEST(HttpStore, MalformedBaseUrlsAreInvalid) {
  for (const char* url : {"http://", "http:///v1/rendezvous/x", "http://host:notaport/x", "http://h:1/x?token=y",
                          "https://h:1/x"}) {
    auto s = HttpStore::Open(url, Millis(100));
    ASSERT_FALSE(s.has_value()) << url;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << url;
  }
}

}  // namespace
}  // namespace cohort::comm::testing
