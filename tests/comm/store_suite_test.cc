// One suite for every Store backend (file, tcp, http against a fake head): the contract
// in src/comm/store.h, whatever carries it.
#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "store_test_util.h"

namespace cohort::comm::testing {
namespace {

class StoreSuite : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    backend_ = MakeBackend(GetParam());
    store_ = backend_->NewClient();
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<StoreBackend> backend_;
  std::unique_ptr<Store> store_;
};

std::string RandomBytes(size_t n) {
  std::mt19937 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

TEST_P(StoreSuite, SetGetRoundTripsBinaryValues) {
  auto reader = backend_->NewClient();
  ASSERT_NE(reader, nullptr);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"nul", std::string("a\0b\0\0c", 6)},
      {"all-bytes", RandomBytes(256)},
      {"one-mib", RandomBytes(1 << 20)},
  };
  for (const auto& [key, value] : cases) {
    ASSERT_TRUE(store_->Set(key, value).has_value()) << key;
  }
  for (const auto& [key, value] : cases) {
    auto got = reader->Get(key, Millis(5000));
    ASSERT_TRUE(got.has_value()) << key << ": " << got.error().ToString();
    EXPECT_EQ(got->size(), value.size()) << key;
    EXPECT_TRUE(*got == value) << key;
  }
}

TEST_P(StoreSuite, KeysMayHoldAnyBytes) {
  const std::vector<std::string> keys = {
      "rank/0", "a b%20c+d?e#f&g=h", "..", "/", std::string("nul\0key", 7), "line\nbreak\r",
      "\xc3\xa9t\xc3\xa9", std::string(1000, 'k') + "/tail",
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store_->Set(keys[i], "v" + std::to_string(i)).has_value()) << i;
  }
  auto reader = backend_->NewClient();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = reader->Get(keys[i], Millis(5000));
    ASSERT_TRUE(got.has_value()) << i << ": " << got.error().ToString();
    EXPECT_EQ(*got, "v" + std::to_string(i)) << i;
  }
}

TEST_P(StoreSuite, SetOverwrites) {
  ASSERT_TRUE(store_->Set("k", "first").has_value());
  ASSERT_TRUE(store_->Set("k", "second, longer").has_value());
  ASSERT_TRUE(store_->Set("k", "3").has_value());
  EXPECT_EQ(store_->Get("k", Millis(1000)).value_or("<error>"), "3");
}

TEST_P(StoreSuite, EmptyKeyIsInvalid) {
  auto r = store_->Set("", "v");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->Get("", Millis(10)).error().code, ErrorCode::kInvalidArgument);
}

TEST_P(StoreSuite, GetWaitsForAKeySetLaterByAnotherThread) {
  auto writer = backend_->NewClient();
  ASSERT_NE(writer, nullptr);
  std::thread setter([&] {
    // Gives the Get time to start waiting; the test passes whichever comes first.
    std::this_thread::sleep_for(Millis(200));
    EXPECT_TRUE(writer->Set("late", "finally").has_value());
  });
  auto start = SteadyClock::now();
  auto got = store_->Get("late", Millis(20'000));
  auto waited = SteadyClock::now() - start;
  setter.join();
  ASSERT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ(*got, "finally");
  EXPECT_LT(waited, Millis(10'000));
}

TEST_P(StoreSuite, GetTimesOutNamingTheKey) {
  auto start = SteadyClock::now();
  auto got = store_->Get("missing/key", Millis(300));
  auto waited = SteadyClock::now() - start;
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(got.error().message, "store: timed out after 0.3s waiting for keys: missing/key");
  EXPECT_GE(waited, Millis(300));
  EXPECT_LT(waited, Millis(5300));
}

TEST_P(StoreSuite, WaitReturnsOnceEveryKeyIsSet) {
  auto writer = backend_->NewClient();
  ASSERT_NE(writer, nullptr);
  std::thread setter([&] {
    for (const char* k : {"w/c", "w/a", "w/b"}) EXPECT_TRUE(writer->Set(k, "x").has_value());
  });
  auto r = store_->Wait({"w/a", "w/b", "w/c"}, Millis(20'000));
  setter.join();
  EXPECT_TRUE(r.has_value()) << r.error().ToString();
  EXPECT_TRUE(store_->Wait({}, Millis(0)).has_value());
}

TEST_P(StoreSuite, WaitTimesOutNamingTheMissingKeys) {
  ASSERT_TRUE(store_->Set("w/a", "x").has_value());
  ASSERT_TRUE(store_->Set("w/b", "x").has_value());
  auto r = store_->Wait({"w/a", "w/b", "w/missing"}, Millis(200));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(r.error().message, "store: timed out after 0.2s waiting for keys: w/missing");
}

TEST_P(StoreSuite, AddStartsAtZeroAndReturnsTheSum) {
  EXPECT_EQ(store_->Add("n", 5).value_or(-1), 5);
  EXPECT_EQ(store_->Add("n", -7).value_or(-1), -2);
  EXPECT_EQ(store_->Add("n", 0).value_or(-1), -2);
  EXPECT_EQ(store_->Get("n", Millis(1000)).value_or("<error>"), "-2");
}

TEST_P(StoreSuite, AddIsAtomicUnderEightThreads) {
  constexpr int kThreads = 8, kAdds = 100;
  // Half the threads share store_ (one object from many threads), half own a client.
  std::vector<std::unique_ptr<Store>> own(kThreads);
  for (int t = 1; t < kThreads; t += 2) {
    own[t] = backend_->NewClient();
    ASSERT_NE(own[t], nullptr);
  }
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store& s = own[t] ? *own[t] : *store_;
      for (int i = 0; i < kAdds; ++i) {
        auto r = s.Add("counter", 1);
        if (!r) {
          ADD_FAILURE() << r.error().ToString();
          return;
        }
        seen[t].push_back(*r);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kAdds});
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i + 1)) << "a sum was returned twice";
  EXPECT_EQ(store_->Get("counter", Millis(1000)).value_or("<error>"), std::to_string(kThreads * kAdds));
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreSuite,
                         ::testing::Values(BackendKind::kFile, BackendKind::kTcp, BackendKind::kHttp),
                         [](const auto& info) { return BackendName(info.param); });

}  // namespace
}  // namespace cohort::comm::testing
