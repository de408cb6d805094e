// TokenBook: tokens are kept only as salted hashes, authenticate until revoked or expired,
// reload from what was persisted; node credentials name their node and cannot be forged.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "head/auth.h"

namespace cohort::head {
namespace {

class TokenBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    book_ = Open(std::nullopt);
    ASSERT_TRUE(book_);
  }

  std::unique_ptr<TokenBook> Open(const std::optional<std::string>& stored) {
    auto b = TokenBook::Open(stored, "0123456789abcdef0123456789abcdef", [this](const std::string& k, const std::string& v) -> Result<void> {
      if (fail_writes_) return MakeError(ErrorCode::kUnavailable, "disk gone");
      meta_[k] = v;
      return {};
    });
    return b ? std::move(*b) : nullptr;
  }

  std::map<std::string, std::string> meta_;
  bool fail_writes_ = false;
  std::unique_ptr<TokenBook> book_;
};

TEST_F(TokenBookTest, ATokenAuthenticatesAsItsUserAndRoleAndIsStoredOnlyAsAHash) {
  auto made = book_->Create("alice", Role::kUser, 0, "root", "laptop", 1000);
  ASSERT_TRUE(made.has_value()) << made.error().message;
  EXPECT_TRUE(made->token.starts_with("cohort_" + made->info.id + "_"));
  auto c = book_->Authenticate(made->token, 2000);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->kind, Caller::Kind::kToken);
  EXPECT_EQ(c->user, "alice");
  EXPECT_EQ(c->role, Role::kUser);
  EXPECT_EQ(c->token_id, made->info.id);
  const std::string secret = made->token.substr(made->token.rfind('_') + 1);
  ASSERT_EQ(secret.size(), 64u);
  ASSERT_TRUE(meta_.contains(kTokensMeta));
  EXPECT_EQ(meta_[kTokensMeta].find(secret), std::string::npos) << "the secret itself must never be stored";
  EXPECT_NE(meta_[kTokensMeta].find("\"hash\""), std::string::npos);
}

TEST_F(TokenBookTest, WrongSecretsUnknownIdsAndGarbageAreUnauthenticated) {
  auto made = book_->Create("alice", Role::kAdmin, 0, "root", "", 1000);
  ASSERT_TRUE(made.has_value());
  std::string wrong = made->token;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (const std::string& bad : {wrong, std::string("cohort_000000000000_") + std::string(64, 'a'), std::string("x"),
                                 std::string(""), made->token + "0", std::string("cohortnode_00_node-a")}) {
    auto c = book_->Authenticate(bad, 2000);
    ASSERT_FALSE(c.has_value()) << bad;
    EXPECT_EQ(c.error().code, ErrorCode::kUnauthenticated) << bad;
    EXPECT_EQ(c.error().message.find(made->token.substr(20)), std::string::npos) << "never echo a secret";
  }
}

TEST_F(TokenBookTest, RevokedAndExpiredTokensStopWorking) {
  auto a = book_->Create("alice", Role::kUser, 0, "root", "", 1000);
  auto b = book_->Create("bob", Role::kViewer, 5000, "root", "", 1000);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(book_->Authenticate(a->token, 2000).has_value());
  auto revoked = book_->Revoke(a->info.id, 3000);
  ASSERT_TRUE(revoked.has_value());
  EXPECT_EQ(revoked->revoked_ms, 3000);
  auto after = book_->Authenticate(a->token, 3001);
  ASSERT_FALSE(after.has_value());
  EXPECT_NE(after.error().message.find("revoked"), std::string::npos) << after.error().message;
  EXPECT_TRUE(book_->Authenticate(b->token, 4999).has_value());
  auto late = book_->Authenticate(b->token, 5000);
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().message.find("expired"), std::string::npos) << late.error().message;
  EXPECT_EQ(book_->Revoke("ffffffffffff", 1).error().code, ErrorCode::kNotFound);
}

TEST_F(TokenBookTest, ABookReloadsFromWhatItPersisted) {
  auto a = book_->Create("alice", Role::kAdmin, 0, "root", "ops", 1000);
  auto b = book_->Create("bob", Role::kUser, 0, "alice", "", 1000);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(book_->Revoke(b->info.id, 2000).has_value());
  auto again = Open(meta_[kTokensMeta]);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->List().size(), 2u);
  auto c = again->Authenticate(a->token, 3000);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->role, Role::kAdmin);
  EXPECT_FALSE(again->Authenticate(b->token, 3000).has_value());
}

TEST_F(TokenBookTest, BadInputIsRefusedAndAFailedWriteChangesNothing) {
  EXPECT_EQ(book_->Create("", Role::kUser, 0, "r", "", 1).error().field, "user");
  EXPECT_EQ(book_->Create("a b", Role::kUser, 0, "r", "", 1).error().field, "user");
  EXPECT_EQ(book_->Create("al", Role::kUser, 5, "r", "", 10).error().field, "expires");
  EXPECT_EQ(book_->Create("al", Role::kUser, 0, "r", std::string(300, 'x'), 1).error().field, "description");
  EXPECT_EQ(ParseRole("root").error().field, "role");
  fail_writes_ = true;
  auto made = book_->Create("alice", Role::kUser, 0, "root", "", 1000);
  ASSERT_FALSE(made.has_value());
  EXPECT_TRUE(book_->Empty());
  EXPECT_FALSE(Open(std::string("{\"not\": \"a list\"}")));
}

TEST_F(TokenBookTest, NodeCredentialsNameTheirNodeAndCannotBeForged) {
  const std::string cred = book_->NodeCredential("gpu-1");
  auto c = book_->Authenticate(cred, 1);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  EXPECT_EQ(c->kind, Caller::Kind::kNode);
  EXPECT_EQ(c->node, "gpu-1");
  // Another node's name on this MAC, or this name under another head's secret.
  std::string other = cred.substr(0, cred.rfind('_') + 1) + "gpu-2";
  EXPECT_FALSE(book_->Authenticate(other, 1).has_value());
  auto elsewhere = TokenBook::Open(std::nullopt, "another head's secret, 32 bytes!", [](auto&, auto&) { return Result<void>{}; });
  ASSERT_TRUE(elsewhere.has_value());
  EXPECT_FALSE(book_->Authenticate((*elsewhere)->NodeCredential("gpu-1"), 1).has_value());
}

TEST(AuthorizeTest, EachAccessLetsInExactlyItsCallers) {
  Caller anon;
  Caller viewer{Caller::Kind::kToken, "v", Role::kViewer, "id1", ""};
  Caller user{Caller::Kind::kToken, "u", Role::kUser, "id2", ""};
  Caller admin{Caller::Kind::kToken, "a", Role::kAdmin, "id3", ""};
  Caller agent{Caller::Kind::kToken, "agents", Role::kAgent, "id4", ""};
  Caller node{Caller::Kind::kNode, "", Role::kViewer, "", "n1"};
  Caller insecure = [] {
    Caller c;
    c.kind = Caller::Kind::kInsecure;
    return c;
  }();
  Caller job{Caller::Kind::kJob, "u", Role::kViewer, "", "", 42, 0};
  struct Row {
    Access access;
    std::vector<const Caller*> allowed;
  };
  const std::vector<Row> rows = {
      {Access::kPublic, {&anon, &viewer, &user, &admin, &agent, &node, &insecure, &job}},
      {Access::kTask, {&anon, &viewer, &user, &admin, &agent, &node, &insecure, &job}},
      {Access::kViewer, {&viewer, &user, &admin, &insecure}},
      {Access::kUser, {&user, &admin, &insecure}},
      {Access::kAdmin, {&admin, &insecure}},
      {Access::kAgentJoin, {&admin, &agent, &insecure}},
      {Access::kNode, {&node, &insecure}},
  };
  for (const auto& row : rows) {
    for (const Caller* c : {&anon, &viewer, &user, &admin, &agent, &node, &insecure, &job}) {
      const bool want = std::find(row.allowed.begin(), row.allowed.end(), c) != row.allowed.end();
      auto got = Authorize(row.access, *c);
      EXPECT_EQ(got.has_value(), want) << AccessName(row.access) << " for " << c->Describe();
      if (!got) {
        EXPECT_EQ(got.error().code, c == &anon ? ErrorCode::kUnauthenticated : ErrorCode::kPermissionDenied);
      }
      // A route a job's token may read: the same, and the job's token as well (the router
      // then checks the path names its job).
      auto scoped = Authorize(row.access, *c, JobScope::kOwnJob);
      EXPECT_EQ(scoped.has_value(), want || c == &job) << AccessName(row.access) << " (own job) for " << c->Describe();
    }
  }
  EXPECT_TRUE(job.MayActOn(42, "someone"));
  EXPECT_FALSE(job.MayActOn(43, "u")) << "a job's token acts for its job, not for its owner's other jobs";
  EXPECT_TRUE(user.MayActOn(43, "u"));
  EXPECT_FALSE(user.MayActOn(43, "v"));
  EXPECT_EQ(job.Describe(), "job 42 (u)");
}

TEST(AuthorizeTest, BearerOfReadsTheSchemeCaseInsensitively) {
  EXPECT_EQ(BearerOf("Bearer abc"), "abc");
  EXPECT_EQ(BearerOf("bearer  abc "), "abc");
  EXPECT_EQ(BearerOf("Basic abc"), "");
  EXPECT_EQ(BearerOf("Bearer"), "");
}

// `cohort node rm`: the removed name's credentials stop working, the name gets new ones,
// other nodes keep theirs, and a reopened book remembers.
TEST_F(TokenBookTest, RetiredNodeCredentialsStopWorkingAndTheNameGetsNewOnes) {
  const std::string old = book_->NodeCredential("n1");
  const std::string other = book_->NodeCredential("n2");
  ASSERT_TRUE(book_->Authenticate(old, 1));
  ASSERT_TRUE(book_->Authenticate(old, 1)) << "again, from the head's memory of it";
  std::string forged = old;
  const size_t digit = std::string("cohortnode_").size();
  ASSERT_LT(digit, forged.size());
  forged[digit] = forged[digit] == '0' ? '1' : '0';
  EXPECT_FALSE(book_->Authenticate(forged, 1)) << "a remembered credential is compared, not trusted by name";
  ASSERT_TRUE(book_->RetireNodeCredentials("n1"));
  auto refused = book_->Authenticate(old, 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kUnauthenticated);
  EXPECT_NE(refused.error().message.find("retired when the node was removed"), std::string::npos)
      << refused.error().message;
  const std::string fresh = book_->NodeCredential("n1");
  EXPECT_NE(fresh, old);
  auto c = book_->Authenticate(fresh, 1);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->node, "n1");
  EXPECT_TRUE(book_->Authenticate(other, 1)) << "other nodes keep theirs";

  // Removed again: both earlier generations are refused.
  ASSERT_TRUE(book_->RetireNodeCredentials("n1"));
  EXPECT_FALSE(book_->Authenticate(fresh, 1));
  EXPECT_FALSE(book_->Authenticate(old, 1));
  const std::string third = book_->NodeCredential("n1");

  auto reopened = TokenBook::Open(std::nullopt, "0123456789abcdef0123456789abcdef",
                                  [](const std::string&, const std::string&) -> Result<void> { return {}; },
                                  meta_.at(kNodeGenerationsMeta));
  ASSERT_TRUE(reopened) << reopened.error().message;
  EXPECT_EQ((*reopened)->NodeCredential("n1"), third);
  EXPECT_FALSE((*reopened)->Authenticate(old, 1));
  EXPECT_TRUE((*reopened)->Authenticate(other, 1));

  // A failed write retires nothing.
  fail_writes_ = true;
  EXPECT_FALSE(book_->RetireNodeCredentials("n1"));
  EXPECT_TRUE(book_->Authenticate(third, 1));
  EXPECT_FALSE(book_->RetireNodeCredentials("n9"));
  EXPECT_TRUE(book_->Authenticate(book_->NodeCredential("n9"), 1));
  for (const char* bad : {"[]", "{\"n1\": 0}", "{\"n1\": \"2\"}", "nope"}) {
    EXPECT_FALSE(TokenBook::Open(std::nullopt, "0123456789abcdef0123456789abcdef",
                                 [](const std::string&, const std::string&) -> Result<void> { return {}; },
                                 std::string(bad)))
        << bad;
  }
}

}  // namespace
}  // namespace cohort::head
