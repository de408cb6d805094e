// Private files and directories: created private, existing ones closed, shared (sticky)
// directories and symbolic links refused.
#include "common/file_modes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st{};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class FileModesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-file-modes-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(FileModesTest, MakePrivateDirCreatesAndCloses) {
  const std::string fresh = dir_ + "/a/b";
  ASSERT_TRUE(MakePrivateDir(fresh).has_value());
  EXPECT_EQ(ModeOf(fresh), 0700u);
  const std::string old = dir_ + "/old";
  ASSERT_EQ(mkdir(old.c_str(), 0755), 0);
  ASSERT_EQ(chmod(old.c_str(), 0755), 0);  // whatever the umask
  ASSERT_TRUE(MakePrivateDir(old).has_value());
  EXPECT_EQ(ModeOf(old), 0700u);
}

TEST_F(FileModesTest, MakePrivateDirRefusesASharedDirectory) {
  const std::string shared = dir_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  auto r = MakePrivateDir(shared);
  ASSERT_FALSE(r.has_value());
  EXPECT_THAT(r.error().message, ::testing::HasSubstr("sticky"));
  EXPECT_EQ(ModeOf(shared), 01777u);
}

TEST_F(FileModesTest, PrivateFilesAreCreatedOrClosedButNeverThroughALink) {
  const std::string db = dir_ + "/state.db";
  ASSERT_TRUE(MakePrivateFile(db).has_value());
  EXPECT_EQ(ModeOf(db), 0600u);
  const std::string wal = dir_ + "/state.db-wal";
  std::ofstream(wal) << "x";
  ASSERT_EQ(chmod(wal.c_str(), 0644), 0);
  ASSERT_TRUE(RestrictFileIfPresent(wal).has_value());
  EXPECT_EQ(ModeOf(wal), 0600u);
  EXPECT_TRUE(RestrictFileIfPresent(dir_ + "/absent").has_value());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/absent"));

  const std::string target = dir_ + "/target";
  std::ofstream(target) << "y";
  ASSERT_EQ(chmod(target.c_str(), 0644), 0);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(MakePrivateFile(link).has_value());
  EXPECT_FALSE(RestrictFileIfPresent(link).has_value());
  EXPECT_EQ(ModeOf(target), 0644u);
}

}  // namespace
}  // namespace cohort
