// The head's state directory holds the rendezvous secret (in state.db): the directory is
// 0700 and the database files 0600, on a fresh start and after an older head left them
// world-readable.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include <gtest/gtest.h>

#include "head/head.h"

namespace cohort::head {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class StateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-state-dir-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    state_ = dir_ + "/head";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<HeadServer> Start() {
    HeadConfig config;
    config.port = 0;
    config.state_dir = state_;
    config.http_threads = 2;
    config.timing.heartbeat_interval_ms = 1000;
    config.timing.fence_timeout_ms = 300'000;
    config.timing.failure_timeout_ms = 600'000;
    auto h = HeadServer::Start(config);
    EXPECT_TRUE(h.has_value()) << h.error().message;
    return h ? std::move(*h) : nullptr;
  }

  // Every file of the state's database that exists, and the directory and lock.
  void ExpectPrivate() {
    EXPECT_EQ(ModeOf(state_), 0700u);
    EXPECT_EQ(ModeOf(state_ + "/head.lock"), 0600u);
    EXPECT_EQ(ModeOf(state_ + "/state.db"), 0600u);
    for (const char* suffix : {"-wal", "-shm"}) {
      const std::string f = state_ + "/state.db" + suffix;
      if (std::filesystem::exists(f)) {
        EXPECT_EQ(ModeOf(f), 0600u) << f;
      }
    }
  }

  std::string dir_;
  std::string state_;
};

TEST_F(StateDirTest, AFreshStateDirectoryIsPrivate) {
  auto head = Start();
  ASSERT_TRUE(head);
  // The rendezvous secret is stored by now, so the WAL exists while the head runs.
  ASSERT_TRUE(std::filesystem::exists(state_ + "/state.db-wal"));
  ExpectPrivate();
}

TEST_F(StateDirTest, AnOlderHeadsWorldReadableStateIsClosedOnStart) {
  ASSERT_TRUE(Start());  // makes the database, then stops
  ASSERT_EQ(chmod(state_.c_str(), 0755), 0);
  for (const char* f : {"/head.lock", "/state.db", "/state.db-wal", "/state.db-shm"}) {
    if (std::filesystem::exists(state_ + f)) {
      ASSERT_EQ(chmod((state_ + f).c_str(), 0644), 0);
    }
  }
  auto head = Start();
  ASSERT_TRUE(head);
  ExpectPrivate();
}

}  // namespace
}  // namespace cohort::head
