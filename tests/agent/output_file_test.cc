// Output files emptied once per attempt (agent/output_file.h): by the first task that
// opens them, marked in a user attribute or, without those, in a sidecar file.
#include "agent/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace cohort::agent {
namespace {

using agent_testing::ReadFile;
using agent_testing::TempDir;
using ::testing::HasSubstr;

std::string Xattr(const std::string& path) {
  char buf[256];
  const ssize_t n = getxattr(path.c_str(), kTruncatedXattr, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

// Opens `path` and empties it for `attempt`, as a task's copier does, then writes `line`.
std::string OpenAndWrite(const std::string& path, const std::string& attempt, const std::string& line,
                         bool use_xattr = true) {
  const int fd = OpenOutputFile(path);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return "open failed";
  std::string note = TruncateOncePerAttempt(fd, path, attempt, use_xattr);
  EXPECT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  close(fd);
  return note;
}

// Every task of the attempt asks; the first empties the file, the later ones keep the
// lines of the first. Another attempt's marker (another job's, another head's) empties
// it again.
TEST(OutputFile, TheFirstOpenerOfAnAttemptEmptiesTheFileAndTheOthersKeepItsLines) {
  TempDir tmp;
  const std::string out = tmp.Sub("shared.out");
  std::ofstream(out) << "stale\n";
  EXPECT_EQ(OpenAndWrite(out, "h:12:0", "rank-1\n"), "");
  EXPECT_EQ(OpenAndWrite(out, "h:12:0", "rank-0\n"), "");
  EXPECT_EQ(ReadFile(out), "rank-1\nrank-0\n");
  EXPECT_EQ(Xattr(out), "h:12:0");
  EXPECT_FALSE(std::filesystem::exists(TruncationSidecarPath(out)));
  EXPECT_EQ(OpenAndWrite(out, "h:13:0", "next job\n"), "");
  EXPECT_EQ(ReadFile(out), "next job\n");
  EXPECT_EQ(Xattr(out), "h:13:0");
}

// Without user attributes (NFSv3, tmpfs before Linux 6.6) the marker is a sidecar file.
TEST(OutputFile, WithoutUserAttributesASidecarMarksTheAttempt) {
  TempDir tmp;
  std::filesystem::create_directory(tmp.Sub("logs"));
  const std::string out = tmp.Sub("logs/shared.out");
  std::ofstream(out) << "stale\n";
  EXPECT_EQ(OpenAndWrite(out, "h:12:0", "rank-1\n", false), "");
  EXPECT_EQ(OpenAndWrite(out, "h:12:0", "rank-0\n", false), "");
  EXPECT_EQ(ReadFile(out), "rank-1\nrank-0\n");
  EXPECT_EQ(TruncationSidecarPath(out), tmp.Sub("logs/.shared.out.cohort-truncated"));
  EXPECT_EQ(ReadFile(TruncationSidecarPath(out)), "h:12:0");
  EXPECT_EQ(OpenAndWrite(out, "h:13:0", "next job\n", false), "");
  EXPECT_EQ(ReadFile(out), "next job\n");
  EXPECT_EQ(ReadFile(TruncationSidecarPath(out)), "h:13:0");
  EXPECT_EQ(TruncationSidecarPath("a.out"), ".a.out.cohort-truncated");
}

// No marker can be kept: the file keeps its lines (never cut), and the log says why.
TEST(OutputFile, AFileThatCannotBeMarkedIsKeptNotEmptied) {
  TempDir tmp;
  const std::string out = tmp.Sub("o.txt");
  std::ofstream(out) << "old\n";
  std::filesystem::create_directory(TruncationSidecarPath(out));  // cannot be opened as a file
  const std::string note = OpenAndWrite(out, "h:12:0", "new\n", false);
  EXPECT_THAT(note, HasSubstr("output file '" + out + "' is kept as it was, not emptied"));
  EXPECT_THAT(note, HasSubstr(TruncationSidecarPath(out)));
  EXPECT_EQ(ReadFile(out), "old\nnew\n");
}

// A lock someone else keeps (here the test's own, on another open of the file) delays the
// task's start by the bound only: the file is then emptied without it, and the log says so.
TEST(OutputFile, ALockHeldElsewhereDoesNotKeepTheTaskFromStarting) {
  TempDir tmp;
  const std::string out = tmp.Sub("o.txt");
  std::ofstream(out) << "stale\n";
  const int holder = open(out.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(flock(holder, LOCK_EX), 0);
  const int fd = OpenOutputFile(out);
  ASSERT_GE(fd, 0);
  const std::string note = TruncateOncePerAttempt(fd, out, "h:12:0", true, std::chrono::milliseconds(20));
  EXPECT_THAT(note, HasSubstr("cannot lock output file '" + out + "' (another process has held it for 20 ms)"));
  EXPECT_EQ(ReadFile(out), "");
  EXPECT_EQ(Xattr(out), "h:12:0");
  close(fd);
  close(holder);
}

// A FIFO, a terminal or /dev/null is written as it is, never marked.
TEST(OutputFile, OnlyARegularFileIsEmptied) {
  const int fd = OpenOutputFile("/dev/null");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(TruncateOncePerAttempt(fd, "/dev/null", "h:12:0"), "");
  close(fd);
  TempDir tmp;
  const std::string fifo = tmp.Sub("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int rd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0);
  const int wr = OpenOutputFile(fifo);
  ASSERT_GE(wr, 0);
  EXPECT_EQ(TruncateOncePerAttempt(wr, fifo, "h:12:0"), "");
  close(wr);
  close(rd);
  EXPECT_FALSE(std::filesystem::exists(TruncationSidecarPath(fifo)));
}

// A symbolic link as the file's name is followed when the job's account (here the test's)
// or root owns it, relative targets from the link's directory and dangling ones created,
// as a shell's `>>` would; one that another user planted is refused, naming why, and the
// file it names is left alone.
TEST(OutputFile, OnlyTheAccountsOwnOrRootsSymbolicLinksAreFollowed) {
  TempDir tmp;
  std::filesystem::create_directory(tmp.Sub("logs"));
  const std::string precious = tmp.Sub("precious");
  std::ofstream(precious) << "keep\n";
  ASSERT_EQ(symlink("../target.out", tmp.Sub("logs/own.out").c_str()), 0);  // dangling, relative
  const int own = OpenOutputFile(tmp.Sub("logs/own.out"));
  ASSERT_GE(own, 0) << strerror(errno);
  ASSERT_EQ(write(own, "x\n", 2), 2);
  close(own);
  EXPECT_EQ(ReadFile(tmp.Sub("target.out")), "x\n");

  const std::string planted = tmp.Sub("logs/planted.out");
  ASSERT_EQ(symlink(precious.c_str(), planted.c_str()), 0);
  const uid_t other = geteuid() == 0 ? 4242 : 0;
  if (lchown(planted.c_str(), other, static_cast<gid_t>(-1)) != 0) {
    GTEST_SKIP() << "cannot give a link to another user here (not root)";
  }
  EXPECT_EQ(OpenOutputFile(planted), -1);
  EXPECT_EQ(errno, kForeignLinkErr);
  EXPECT_THAT(OutputOpenError(errno), HasSubstr("symbolic link that another user owns"));
  // Also at the end of a chain that starts with the account's own link.
  ASSERT_EQ(symlink("planted.out", tmp.Sub("logs/chain.out").c_str()), 0);
  EXPECT_EQ(OpenOutputFile(tmp.Sub("logs/chain.out")), -1);
  EXPECT_EQ(errno, kForeignLinkErr);
  EXPECT_EQ(ReadFile(precious), "keep\n");
  EXPECT_EQ(OutputOpenError(ENOENT), "No such file or directory");
}

}  // namespace
}  // namespace cohort::agent
