// `cohort bench allreduce` end to end: the launcher re-executes the binary through
// `cohort run`, two ranks rendezvous over the tcp store, and rank 0 prints one row per
// size with no wrong elements.
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/subprocess.h"

#ifndef COHORT_BINARY
#error "COHORT_BINARY must name the cohort executable"
#endif

namespace cohort {
namespace {

struct Run {
  ExitStatus status;
  std::string output;
};

Run Bench(const std::vector<std::string>& args) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cohort-bench-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  SpawnOptions o;
  o.argv = {COHORT_BINARY, "bench", "allreduce"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = (dir / "out.txt").string();
  std::filesystem::remove(o.stdout_path);
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.has_value()) << p.error().ToString();
  if (!p) return {};
  auto st = p->WaitFor(std::chrono::seconds(120));
  EXPECT_TRUE(st.has_value()) << "cohort bench did not finish";
  if (!st) {
    p->Signal(SIGKILL, /*group=*/true);
    (void)p->Wait();
    return {};
  }
  std::ifstream in(o.stdout_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::remove_all(dir);
  return {*st, ss.str()};
}

TEST(BenchAllreduceCli, TwoRanksPrintEverySize) {
  auto r = Bench({"-n", "2", "--max-bytes", "64K", "--iters", "2"});
  ASSERT_TRUE(r.status.Success()) << r.status.ToString() << "\n" << r.output;
  // Rows: size count type time algbw busbw [time algbw busbw ratio] #wrong.
  const std::regex row(
      R"(^\s+(\d+)\s+(\d+)\s+float32\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)\s*$)");
  std::set<long> sizes;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    const long size = std::stol(m[1]);
    EXPECT_EQ(std::stol(m[2]), size / 4) << line;
    EXPECT_GT(std::stod(m[3]), 0.0) << line;
    EXPECT_EQ(m[10], "0") << "wrong elements: " << line;
    sizes.insert(size);
  }
  std::set<long> want;
  for (long s = 4; s <= 65536; s *= 2) want.insert(s);
  EXPECT_EQ(sizes, want) << r.output;
  EXPECT_NE(r.output.find("# Avg bus bandwidth"), std::string::npos) << r.output;
}

TEST(BenchAllreduceCli, BadFlagsAreUsageErrors) {
  auto r = Bench({"--max-bytes", "lots"});
  EXPECT_EQ(r.status.Code(), 2) << r.output;
}

TEST(BenchAllreduceCli, NcclWithoutDeviceFailsCleanly) {
  auto r = Bench({"-n", "1", "--backend", "nccl", "--max-bytes", "8", "--iters", "1"});
  // With a GPU this succeeds; without one, every rank reports kUnavailable (exit 3).
  EXPECT_TRUE(r.status.Success() || r.status.Code() == 3) << r.status.ToString() << r.output;
}

}  // namespace
}  // namespace cohort
