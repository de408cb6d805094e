// kill -9 durability: a child process creates jobs in a loop and reports each id through
// a pipe the moment CreateJob returns (the point where the head would acknowledge the
// submission). The parent SIGKILLs it mid-stream, reopens the file and requires every
// reported job to be there, intact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>

#include "store/state_store.h"
#include "store_test_util.h"

namespace cohort::store {
namespace {

using testing::SmallJob;
using testing::TempDir;

// What the child sends per job: the id CreateJob returned and the loop counter that is
// also in the job's name. id < 0 means CreateJob (or the open) failed.
struct Ack {
  int64_t id;
  int64_t seq;
};
static_assert(sizeof(Ack) <= PIPE_BUF, "pipe writes of one Ack must be atomic");

std::string NameFor(int64_t seq) { return "k" + std::to_string(seq); }

// The child: only simple code, then _exit (never returns into gtest).
[[noreturn]] void ChildLoop(const std::string& path, int fd) {
  auto store = OpenSqliteStateStore(path);
  if (!store) {
    Ack fail{-1, 0};
    (void)!write(fd, &fail, sizeof fail);
    _exit(2);
  }
  for (int64_t seq = 0;; ++seq) {
    api::Job job = SmallJob(NameFor(seq));
    job.spec.env["SEQ"] = std::to_string(seq);
    auto created = (*store)->CreateJob(job);
    Ack ack{created ? created->id : -1, seq};
    if (write(fd, &ack, sizeof ack) != sizeof ack || !created) _exit(3);
  }
}

// Reads whole Acks until `want` have arrived (want < 0: until EOF) or the deadline.
// Returns false on a deadline or a read error.
bool ReadAcks(int fd, std::vector<Ack>& acks, long want, std::chrono::steady_clock::time_point deadline) {
  std::string buf;
  while (want < 0 || acks.size() < size_t(want)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    Ack a;
    ssize_t n = read(fd, &a, sizeof a);
    if (n == 0) return want < 0;  // EOF
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof a) return false;  // writes of one Ack are atomic, so reads are whole
    acks.push_back(a);
  }
  return true;
}

TEST(SqliteKillTest, EveryAcknowledgedJobSurvivesKill9) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0) << strerror(errno);

  pid_t pid = fork();
  ASSERT_GE(pid, 0) << strerror(errno);
  if (pid == 0) {
    close(fds[0]);
    ChildLoop(path, fds[1]);
  }
  close(fds[1]);

  std::vector<Ack> acks;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool got = ReadAcks(fds[0], acks, 50, deadline);
  // Kill mid-stream: the child is inside its create loop, no clean close.
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // Acks already in the pipe were sent after CreateJob returned: they count too.
  ReadAcks(fds[0], acks, -1, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  close(fds[0]);

  ASSERT_TRUE(got) << "the child reported only " << acks.size() << " jobs before the deadline";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child ended on its own (status " << status << "); it must be killed mid-stream";
  for (const Ack& a : acks) ASSERT_GT(a.id, 0) << "the child's CreateJob failed at seq " << a.seq;

  auto store = OpenSqliteStateStore(path);
  ASSERT_TRUE(store) << store.error().ToString();
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs) << jobs.error().ToString();
  std::map<api::JobId, api::Job> by_id;
  for (auto& j : *jobs) by_id[j.id] = std::move(j);
  for (const Ack& a : acks) {
    auto it = by_id.find(a.id);
    ASSERT_TRUE(it != by_id.end()) << "acknowledged job " << a.id << " (seq " << a.seq << ") was lost";
    EXPECT_EQ(it->second.spec.name, NameFor(a.seq)) << "job " << a.id;
    EXPECT_EQ(it->second.spec.command, std::vector<std::string>{"true"}) << "job " << a.id;
    EXPECT_EQ(it->second.spec.env.at("SEQ"), std::to_string(a.seq)) << "job " << a.id;
  }
  // The reopened store goes on past every id it handed out.
  auto next = (*store)->CreateJob(SmallJob());
  ASSERT_TRUE(next) << next.error().ToString();
  EXPECT_GT(next->id, acks.back().id);
  EXPECT_GT(next->id, by_id.rbegin()->first);
  std::printf("[          ] child acknowledged %zu jobs before SIGKILL; %zu rows found after\n",
              acks.size(), by_id.size());
}

}  // namespace
}  // namespace cohort::store
