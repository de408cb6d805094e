// RendezvousStore's bounds: one attempt's keys take at most kMaxBytesPerAttempt of the
// head's memory, and a counter that would overflow 64 bits is an error, not a wrap.
#include "head/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::head {
namespace {

using ::testing::HasSubstr;

TEST(RendezvousStoreBounds, AnAttemptsKeysStayWithinItsBudget) {
  RendezvousStore store(NewRendezvousSecret());
  RendezvousScope scope{12, 0};
  const std::string value(1 << 20, 'v');
  size_t stored = 0;
  Result<void> r;
  while ((r = store.Set(scope, "k" + std::to_string(stored), value))) ++stored;
  EXPECT_EQ(stored, RendezvousStore::kMaxBytesPerAttempt / (1 << 20) - 1);
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_THAT(r.error().message, HasSubstr("the rendezvous store of job 12 attempt 0 would hold 64 MiB"));
  // Overwriting a key, another attempt and a dropped job's room are not affected.
  EXPECT_TRUE(store.Set(scope, "k0", "small").has_value());
  EXPECT_TRUE(store.Set(scope, "k1", value).has_value());
  EXPECT_TRUE(store.Set({12, 1}, "k0", value).has_value());
  store.DropJob(12);
  EXPECT_EQ(store.KeyCount(), 0u);
  EXPECT_TRUE(store.Set(scope, "k0", value).has_value());
}

TEST(RendezvousStoreBounds, CountersDoNotOverflow) {
  RendezvousStore store(NewRendezvousSecret());
  RendezvousScope scope{3, 0};
  ASSERT_TRUE(store.Set(scope, "n", std::to_string(INT64_MAX - 1)).has_value());
  EXPECT_EQ(*store.Add(scope, "n", 1), INT64_MAX);
  auto over = store.Add(scope, "n", 1);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(over.error().field, "delta");
  EXPECT_THAT(over.error().message, HasSubstr("overflows a 64-bit integer"));
  EXPECT_EQ(*store.Add(scope, "n", -5), INT64_MAX - 5);
  EXPECT_EQ(*store.Add(scope, "fresh", -7), -7);
}

TEST(RendezvousStoreTokens, AKeptTokenIsTheOneTheSecretMakes) {
  const std::string secret = NewRendezvousSecret();
  RendezvousStore store(secret);
  const std::string first = store.Token(7, 2);
  EXPECT_EQ(store.Token(7, 2), first) << "kept";
  EXPECT_EQ(RendezvousStore(secret).Token(7, 2), first) << "what a fresh store (a restarted head) makes";
  EXPECT_NE(store.Token(7, 3), first);
  store.DropJob(7);
  EXPECT_EQ(store.Token(7, 2), first) << "made again after the job's tokens are dropped";
  auto scope = store.Verify(first);
  ASSERT_TRUE(scope.has_value());
  EXPECT_EQ(scope->job, 7);
  EXPECT_EQ(scope->attempt, 2);
  EXPECT_FALSE(RendezvousStore(NewRendezvousSecret()).Verify(first).has_value());
}

TEST(RendezvousStoreTokens, AJobTokenNamesItsAttemptAndIsNeitherTheRendezvousTokenNorMadeFromIt) {
  const std::string secret = NewRendezvousSecret();
  RendezvousStore store(secret);
  const std::string job = store.JobToken(7, 2);
  ASSERT_EQ(job.rfind(RendezvousStore::kJobTokenPrefix, 0), 0u) << job;
  EXPECT_EQ(RendezvousStore(secret).JobToken(7, 2), job) << "a restarted head makes the same";
  auto scope = store.VerifyJobToken(job);
  ASSERT_TRUE(scope.has_value()) << scope.error().message;
  EXPECT_EQ(*scope, (RendezvousScope{7, 2}));
  // Different MACs: the rendezvous URL's token (which goes into paths, and so into logs
  // and the audit trail redacted) cannot serve as the job's bearer token, nor the reverse.
  const std::string rendezvous = store.Token(7, 2);
  const std::string job_mac = job.substr(job.rfind('-') + 1);
  EXPECT_NE(rendezvous.substr(rendezvous.rfind('-') + 1), job_mac);
  EXPECT_FALSE(store.VerifyJobToken(std::string(RendezvousStore::kJobTokenPrefix) + rendezvous).has_value());
  EXPECT_FALSE(store.Verify(job.substr(RendezvousStore::kJobTokenPrefix.size())).has_value());
  // Another job's id or attempt with this MAC, a changed MAC, another head's secret, junk.
  for (const std::string& forged :
       {std::string(RendezvousStore::kJobTokenPrefix) + "8-2-" + job_mac,
        std::string(RendezvousStore::kJobTokenPrefix) + "7-3-" + job_mac, job.substr(0, job.size() - 1) + "x",
        RendezvousStore(NewRendezvousSecret()).JobToken(7, 2), std::string("cohortjob_"), std::string("cohortjob_7-2"),
        std::string("cohortjob_-1-2-") + job_mac, job.substr(RendezvousStore::kJobTokenPrefix.size())}) {
    auto bad = store.VerifyJobToken(forged);
    ASSERT_FALSE(bad.has_value()) << forged;
    EXPECT_EQ(bad.error().code, ErrorCode::kUnauthenticated) << forged;
  }
}

}  // namespace
}  // namespace cohort::head
