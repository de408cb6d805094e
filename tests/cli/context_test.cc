// Contexts (cli/context.h): save, use, ls, rm against a config directory of the test's
// own ($XDG_CONFIG_HOME), and --context choosing the head for one command.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/context.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

struct Ran {
  int rc;
  std::string out, err;
};

Ran Cohort(std::vector<std::string> args) {
  args.insert(args.begin(), "cohort");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int rc = RunCli(static_cast<int>(args.size()), argv.data());
  std::fflush(stdout);
  return {rc, testing::internal::GetCapturedStdout(), testing::internal::GetCapturedStderr()};
}

class ContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-context-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    if (const char* x = std::getenv("XDG_CONFIG_HOME")) saved_xdg_ = x;
    setenv("XDG_CONFIG_HOME", dir_.c_str(), 1);
    unsetenv("COHORT_CONTEXT");
    unsetenv("COHORT_HEAD");
    config_ = ClientConfigPath();
    ASSERT_EQ(config_, dir_ + "/cohort/config");
  }
  void TearDown() override {
    if (saved_xdg_) {
      setenv("XDG_CONFIG_HOME", saved_xdg_->c_str(), 1);
    } else {
      unsetenv("XDG_CONFIG_HOME");
    }
    std::filesystem::remove_all(dir_);
  }
  void Login(const std::string& head, const std::string& token) {
    ASSERT_TRUE(WriteClientConfig(config_, ClientConfig{head, token, ""}).has_value());
  }

  std::string dir_, config_;
  std::optional<std::string> saved_xdg_;
};

TEST_F(ContextTest, SaveUseListRemove) {
  Login("https://work:8470", "cohort_work");
  ASSERT_TRUE(SaveContext(config_, "work").has_value());
  Login("https://lab:8470", "cohort_lab");
  ASSERT_TRUE(SaveContext(config_, "lab").has_value());

  auto list = ListContexts(config_);
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].first, "lab");
  EXPECT_EQ((*list)[1].second.head, "https://work:8470");

  auto ls = Cohort({"context", "ls"});
  ASSERT_EQ(ls.rc, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("*        lab   https://lab:8470"));
  auto used = Cohort({"context", "use", "work"});
  ASSERT_EQ(used.rc, 0) << used.err;
  EXPECT_EQ((*ReadClientConfig(config_))->token, "cohort_work");
  auto json_ls = Cohort({"--json", "context", "ls"});
  EXPECT_THAT(json_ls.out, HasSubstr(R"("current": true)"));

  auto wrong = Cohort({"context", "use", "wrok"});
  EXPECT_EQ(wrong.rc, 1);
  EXPECT_THAT(wrong.err, HasSubstr("no context 'wrok'; did you mean work?"));
  EXPECT_FALSE(CheckContextName("../etc").has_value());
  EXPECT_EQ(Cohort({"context", "save", "a/b"}).rc, 2);

  ASSERT_EQ(Cohort({"context", "rm", "lab"}).rc, 0);
  EXPECT_EQ(ListContexts(config_)->size(), 1u);
}

int ClosedPort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

TEST_F(ContextTest, ContextFlagPicksTheHeadForOneCommand) {
  const std::string far = "http://127.0.0.1:" + std::to_string(ClosedPort());
  Login(far, "cohort_far");
  ASSERT_TRUE(SaveContext(config_, "far").has_value());
  Login("http://127.0.0.1:1", "cohort_near");

  auto q = Cohort({"--context", "far", "queue"});
  EXPECT_EQ(q.rc, 3);
  EXPECT_THAT(q.err, HasSubstr("cannot reach " + far));
  EXPECT_THAT(q.err, HasSubstr("came from the client config (" + ContextPath(config_, "far") + ")"));
  setenv("COHORT_CONTEXT", "far", 1);
  EXPECT_THAT(Cohort({"queue"}).err, HasSubstr("cannot reach " + far));
  unsetenv("COHORT_CONTEXT");
  EXPECT_THAT(Cohort({"queue"}).err, HasSubstr("cannot reach http://127.0.0.1:1"));  // the current is unchanged

  auto missing = Cohort({"--context", "nowhere", "queue"});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_THAT(missing.err, HasSubstr("no context 'nowhere'"));
}

}  // namespace
}  // namespace cohort::cli
