// Submit's pure parts: time limits, --env, merging flags over a spec file, and the
// command line itself (through --dry-run, which prints the spec and sends nothing).
#include <unistd.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/job_env.h"

namespace cohort::cli {
namespace {

using ::testing::HasSubstr;

TEST(TimeLimitTest, ParsesEveryForm) {
  const std::vector<std::pair<std::string, int64_t>> ok = {
      {"0", 0},
      {"unlimited", 0},
      {"UNLIMITED", 0},
      {"3600", 3600},
      {" 42 ", 42},
      {"90s", 90},
      {"15m", 900},
      {"2h", 7200},
      {"1d", 86400},
      {"05:30", 330},         // MM:SS
      {"90:00", 5400},        // minutes may exceed 59 when they lead
      {"01:30:00", 5400},     // HH:MM:SS
      {"100:00:00", 360000},  // hours may exceed 23 without days
      {"1-00", 86400},        // D-HH
      {"1-02:03", 93780},     // D-HH:MM
      {"1-02:03:04", 93784},  // D-HH:MM:SS
      {"366-00:00:00", 366 * 86400},
      {"1h30m", 5400},        // the one duration syntax: compound units
      {"1d12h", 129600},
  };
  for (const auto& [text, seconds] : ok) {
    auto v = ParseTimeLimit(text);
    ASSERT_TRUE(v.has_value()) << text << ": " << v.error().message;
    EXPECT_EQ(*v, seconds) << text;
  }
}

TEST(TimeLimitTest, RejectsMalformedLimits) {
  for (std::string text : {"", "abc", "-5", "1.5", "1:2:3:4", "1:60", "1:00:60", "1-24:00", "1-2:60",
                           "5x", "s", "1--2", ":30", "30:", "30m1h", "1500ms", "9999999999999d"}) {
    auto v = ParseTimeLimit(text);
    ASSERT_FALSE(v.has_value()) << "'" << text << "' parsed as " << *v;
    EXPECT_EQ(v.error().code, ErrorCode::kInvalidArgument);
    EXPECT_THAT(v.error().message, HasSubstr("--time-limit")) << text;
  }
  auto long_one = ParseTimeLimit("367-00:00:00");
  ASSERT_FALSE(long_one.has_value());
  EXPECT_THAT(long_one.error().message, HasSubstr("longer than the maximum of 366 days"));
}

TEST(TimeLimitTest, FormatsForDisplayAndRoundTrips) {
  EXPECT_EQ(FormatTimeLimit(0), "unlimited");
  EXPECT_EQ(FormatTimeLimit(59), "00:00:59");
  EXPECT_EQ(FormatTimeLimit(5400), "01:30:00");
  EXPECT_EQ(FormatTimeLimit(93784), "1-02:03:04");
  for (int64_t s : {1, 61, 3599, 86399, 86400, 93784, 31622400}) {
    EXPECT_EQ(*ParseTimeLimit(FormatTimeLimit(s)), s);
  }
}

TEST(EnvAssignmentTest, ParsesKeyValueAndPassThrough) {
  std::map<std::string, std::string> here = {{"HOME", "/home/a"}};
  EXPECT_EQ(*ParseEnvAssignment("A=1", here), (std::pair<std::string, std::string>{"A", "1"}));
  EXPECT_EQ(*ParseEnvAssignment("A=", here), (std::pair<std::string, std::string>{"A", ""}));
  EXPECT_EQ(*ParseEnvAssignment("A=x=y", here), (std::pair<std::string, std::string>{"A", "x=y"}));
  EXPECT_EQ(*ParseEnvAssignment("HOME", here), (std::pair<std::string, std::string>{"HOME", "/home/a"}));
  auto unset = ParseEnvAssignment("NOPE", here);
  ASSERT_FALSE(unset.has_value());
  EXPECT_THAT(unset.error().message, HasSubstr("--env NOPE: not set"));
  auto no_key = ParseEnvAssignment("=1", here);
  ASSERT_FALSE(no_key.has_value());
  EXPECT_THAT(no_key.error().message, HasSubstr("expected KEY=VALUE"));
}

SubmitDefaults Defaults() {
  SubmitDefaults d;
  d.workdir = "/home/alice/proj";
  d.user = "alice";
  d.environment = {{"TOKEN", "s3cret"}};
  return d;
}

TEST(MergeSubmitFlagsTest, FlagsOverrideTheFile) {
  json file = json::parse(R"({"name": "from-file", "command": ["python", "train.py"], "nodes": 4,
      "gpus_per_node": 8, "env": {"A": "file", "B": "file"}, "user": "bob", "workdir": "/data",
      "priority": 5})");
  SubmitFlags f;
  f.nodes = 2;
  f.name = "from-flag";
  f.time_limit = "1:00:00";
  f.env = {"B=flag", "C=new", "TOKEN"};
  auto merged = MergeSubmitFlags(file, f, Defaults());
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  EXPECT_EQ((*merged)["nodes"], 2);
  EXPECT_EQ((*merged)["name"], "from-flag");
  EXPECT_EQ((*merged)["time_limit_s"], 3600);
  EXPECT_EQ((*merged)["gpus_per_node"], 8);  // untouched
  EXPECT_EQ((*merged)["priority"], 5);
  EXPECT_EQ((*merged)["command"], json::parse(R"(["python", "train.py"])"));
  EXPECT_EQ((*merged)["env"], json::parse(R"({"A": "file", "B": "flag", "C": "new", "TOKEN": "s3cret"})"));
  // The file's user and workdir win over the defaults.
  EXPECT_EQ((*merged)["user"], "bob");
  EXPECT_EQ((*merged)["workdir"], "/data");
  auto spec = api::JobSpecFromJson(*merged);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->nodes, 2);
}

// --gpus-per-task h100:0.5 (Slurm's [type:]number) asks for half of an H100, replacing
// the file's GPU type and count.
TEST(MergeSubmitFlagsTest, ATypedFractionReplacesTheFilesGpus) {
  json file = json::parse(R"({"command": ["python", "train.py"], "gpus": "a100:2"})");
  SubmitFlags f;
  f.gpus_per_task = "h100:0.5";
  auto merged = MergeSubmitFlags(file, f, Defaults());
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  auto spec = api::JobSpecFromJson(*merged);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->gpu_type, "h100");
  EXPECT_EQ(spec->gpu_share, 2);
  EXPECT_EQ(spec->gpus_per_node, 0);
}

TEST(MergeSubmitFlagsTest, CommandOnlyGetsDefaults) {
  SubmitFlags f;
  f.command = {"hostname"};
  f.gpus_per_node = 4;
  f.tasks_per_node = 4;
  f.placement = "spread";
  f.priority = -3;
  f.max_restarts = 2;
  f.cpus_per_task = 2;
  auto merged = MergeSubmitFlags(json::object(), f, Defaults());
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(*merged, json::parse(R"({"command": ["hostname"], "gpus_per_node": 4, "tasks_per_node": 4,
      "placement": "spread", "priority": -3, "max_restarts": 2, "cpus_per_task": 2,
      "user": "alice", "workdir": "/home/alice/proj"})"));
}

TEST(MergeSubmitFlagsTest, CommandAfterDashDashReplacesTheFiles) {
  SubmitFlags f;
  f.command = {"echo", "hi"};
  auto merged = MergeSubmitFlags(json::parse(R"({"command": ["python"]})"), f, Defaults());
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ((*merged)["command"], json::parse(R"(["echo", "hi"])"));
}

TEST(MergeSubmitFlagsTest, RelativeWorkdirIsMadeAbsolute) {
  SubmitFlags f;
  f.workdir = "../data/./run1/";
  auto merged = MergeSubmitFlags(json::object(), f, Defaults());
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ((*merged)["workdir"], "/home/alice/data/run1");
  f.workdir = "/abs";
  EXPECT_EQ((*MergeSubmitFlags(json::object(), f, Defaults()))["workdir"], "/abs");
}

TEST(MergeSubmitFlagsTest, ContainerFlagSetsTheImageAndKeepsTheFilesRuntime) {
  SubmitFlags f;
  f.command = {"true"};
  f.container = "localhost/trainer:2";
  auto merged = MergeSubmitFlags(json::parse(R"({"container": {"image": "old:1", "runtime": "docker"}})"), f, Defaults());
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  EXPECT_EQ((*merged)["container"], json::parse(R"({"image": "localhost/trainer:2", "runtime": "docker"})"));
  auto spec = api::JobSpecFromJson(*merged);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->container.image, "localhost/trainer:2");
  EXPECT_EQ(spec->container.runtime, "docker");
  auto flag_only = MergeSubmitFlags(json::object(), f, Defaults());
  ASSERT_TRUE(flag_only.has_value());
  EXPECT_EQ((*flag_only)["container"], json::parse(R"({"image": "localhost/trainer:2"})"));
}

TEST(MergeSubmitFlagsTest, ArrayAndDependencyFlagsReachTheSpec) {
  SubmitFlags f;
  f.command = {"true"};
  f.array = "0-99:2%4";
  f.dependency = "afterok:12:13_2,singleton";
  f.kill_on_invalid_dep = true;
  auto merged = MergeSubmitFlags(json::object(), f, Defaults());
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  auto spec = api::JobSpecFromJson(*merged);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->array, "0-98:2%4");
  EXPECT_EQ(spec->dependency, "afterok:12:13_2,singleton");
  EXPECT_TRUE(spec->kill_on_invalid_dep);
  for (auto [array, dep, want] : {std::tuple{"0-", "", "no last index"}, {"%0", "", "throttle"},
                                  {"1", "afterok", "names no job"}, {"1", "afterok:x", "is not a job id"},
                                  {"1", "after:1?afterok:2", "'?'"}, {"1", "singleton:3", "takes no job ids"}}) {
    SubmitFlags g = f;
    g.array = array;
    g.dependency = dep;
    auto m = MergeSubmitFlags(json::object(), g, Defaults());
    ASSERT_TRUE(m.has_value());
    if (std::string(dep).empty()) m->erase("dependency");
    auto bad = api::JobSpecFromJson(*m);
    ASSERT_FALSE(bad.has_value()) << array << " " << dep;
    EXPECT_NE(bad.error().message.find(want), std::string::npos) << bad.error().message;
  }
}

// Slurm's --signal=[B:]SIG[@TIME]: the checkpoint signal and how long before the time limit.
TEST(MergeSubmitFlagsTest, SignalFlagSetsTheSignalAndTheTimeBeforeTheLimit) {
  for (auto [text, sig, before] : {std::tuple{"USR1@120", "USR1", 120}, {"B:SIGUSR2@2m", "USR2", 120},
                                   {"10", "USR1", 60}, {"term@5", "TERM", 5}, {"15@90s", "TERM", 90}}) {
    SubmitFlags f;
    f.command = {"true"};
    f.time_limit = "1h";
    f.signal = text;
    auto merged = MergeSubmitFlags(json::object(), f, Defaults());
    ASSERT_TRUE(merged.has_value()) << text << ": " << merged.error().message;
    auto spec = api::JobSpecFromJson(*merged);
    ASSERT_TRUE(spec.has_value()) << spec.error().message;
    EXPECT_EQ(spec->checkpoint_signal, sig) << text;
    EXPECT_EQ(spec->checkpoint_before_limit_s, before) << text;
  }
  for (auto [text, want] : {std::pair{"R:USR1@60", "'R:' option is not supported"}, {"KILL@60", "'KILL' is not a signal"},
                            {"9", "'9' is not a signal"}, {"USR1@soon", "'soon' is not a time"},
                            {"USR1@0", "'0' is not a time"}, {"@60", "no signal named"}}) {
    SubmitFlags f;
    f.command = {"true"};
    f.signal = text;
    auto bad = MergeSubmitFlags(json::object(), f, Defaults());
    ASSERT_FALSE(bad.has_value()) << text;
    EXPECT_THAT(bad.error().message, HasSubstr(want)) << text;
    EXPECT_THAT(bad.error().message, HasSubstr("--signal: ")) << text;
  }
  SubmitFlags both;
  both.command = {"true"};
  both.signal = "USR1@60";
  both.checkpoint_signal = "USR2";
  auto clash = MergeSubmitFlags(json::object(), both, Defaults());
  ASSERT_FALSE(clash.has_value());
  EXPECT_THAT(clash.error().message, HasSubstr("name different signals"));
}

TEST(MergeSubmitFlagsTest, BadFlagValuesFail) {
  SubmitFlags f;
  f.time_limit = "soon";
  auto bad_time = MergeSubmitFlags(json::object(), f, Defaults());
  ASSERT_FALSE(bad_time.has_value());
  EXPECT_THAT(bad_time.error().message, HasSubstr("--time-limit: 'soon'"));

  SubmitFlags g;
  g.env = {"X=1"};
  auto bad_env = MergeSubmitFlags(json::parse(R"({"env": [1]})"), g, Defaults());
  ASSERT_FALSE(bad_env.has_value());
  EXPECT_EQ(bad_env.error().field, "env");

  auto not_object = MergeSubmitFlags(json::array(), SubmitFlags{}, Defaults());
  EXPECT_FALSE(not_object.has_value());
}

TEST(FinalStateLineTest, SaysHowTheJobEnded) {
  api::Job job;
  job.id = 12;
  job.state = api::JobState::kSucceeded;
  job.start_ms = 1000;
  job.end_ms = 4200;
  job.exit_code = 0;
  EXPECT_EQ(FinalStateLine(job), "Job 12 SUCCEEDED after 3.2s");
  job.state = api::JobState::kFailed;
  job.exit_code = 3;
  job.reason = "rank 1 exited with code 3";
  EXPECT_EQ(FinalStateLine(job), "Job 12 FAILED after 3.2s (exit code 3): rank 1 exited with code 3");
  api::Job never;
  never.id = 7;
  never.state = api::JobState::kCancelled;
  never.end_ms = 5;
  never.reason = "cancelled by request";
  EXPECT_EQ(FinalStateLine(never), "Job 7 CANCELLED: cancelled by request");
}

// --begin's forms (Slurm's sbatch --begin), in a fixed time zone: the test sets TZ and
// puts it back.
class BeginTimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* tz = std::getenv("TZ")) saved_ = tz;
    setenv("TZ", "America/New_York", 1);  // UTC-5 in December: local is not UTC here
    tzset();
  }
  void TearDown() override {
    if (saved_) {
      setenv("TZ", saved_->c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  std::optional<std::string> saved_;
};

// 2026-12-01T14:30:00Z: 09:30 in New York.
constexpr int64_t kBeginNow = 1'796'135'400'000;
constexpr int64_t kHour = 3'600'000;

TEST_F(BeginTimeTest, SlurmsFormsInLocalTime) {
  if (ParseBeginTime("12:00", "--begin", kBeginNow).value() != kBeginNow + 2 * kHour + 30 * 60'000) {
    GTEST_SKIP() << "no America/New_York zone on this machine (tzdata)";
  }
  const std::vector<std::pair<std::string, int64_t>> ok = {
      {"now", kBeginNow},
      {"now+90", kBeginNow + 90'000},
      {"now+10minutes", kBeginNow + 600'000},
      {"now+1hour", kBeginNow + kHour},
      {"NOW+2days", kBeginNow + 48 * kHour},
      {"now+1week", kBeginNow + 168 * kHour},
      {"now+1h30m", kBeginNow + 90 * 60'000},
      {"16:00", kBeginNow + 6 * kHour + 30 * 60'000},     // later today
      {"09:00", kBeginNow + 23 * kHour + 30 * 60'000},    // passed: tomorrow
      {"09:30:30", kBeginNow + 30'000},
      {"midnight", kBeginNow + 14 * kHour + 30 * 60'000},  // 2026-12-02 00:00 local
      {"noon", kBeginNow + 2 * kHour + 30 * 60'000},
      {"teatime", kBeginNow + 6 * kHour + 30 * 60'000},
      {"tomorrow", kBeginNow + 14 * kHour + 30 * 60'000},
      {"2026-12-24", kBeginNow + 22 * 24 * kHour + 14 * kHour + 30 * 60'000},
      {"2026-12-01T18:00", kBeginNow + 8 * kHour + 30 * 60'000},
      {"2026-12-01 18:00:15", kBeginNow + 8 * kHour + 30 * 60'000 + 15'000},
      {"2026-12-01T18:00:00Z", kBeginNow + 3 * kHour + 30 * 60'000},  // a zone given: not local
      {"2026-11-01T00:00", kBeginNow - 30 * 24 * kHour - 10 * kHour - 30 * 60'000},  // past, and EDT: kept
  };
  for (const auto& [text, want] : ok) {
    auto got = ParseBeginTime(text, "--begin", kBeginNow);
    ASSERT_TRUE(got.has_value()) << text << ": " << got.error().message;
    EXPECT_EQ(*got, want) << text << ": off by " << (*got - want) / 1000 << " s";
  }
  for (const char* bad : {"", "later", "now+", "now-1h", "now+1fortnight", "25:00", "12:60", "2026-13-01",
                          "2026-02-30", "2026-12-01T18", "10000-01-01", "16:00pm"}) {
    auto got = ParseBeginTime(bad, "--begin", kBeginNow);
    ASSERT_FALSE(got.has_value()) << bad << " gave " << *got;
    EXPECT_EQ(got.error().field, "--begin") << bad;
    EXPECT_THAT(got.error().message, HasSubstr("is not a time")) << bad;
  }
}

TEST(MergeSubmitFlagsTest, BeginBecomesItsTimeAndABadOneNamesTheFlag) {
  SubmitFlags f;
  f.command = {"true"};
  f.begin = "now+1h";
  SubmitDefaults d = Defaults();
  d.now_ms = kBeginNow;
  auto merged = MergeSubmitFlags(json::object(), f, d);
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  EXPECT_EQ((*merged)["begin_ms"], kBeginNow + kHour);
  auto spec = api::JobSpecFromJson(*merged);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->begin_ms, kBeginNow + kHour);
  f.begin = "soonish";
  auto bad = MergeSubmitFlags(json::object(), f, d);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("--begin: 'soonish' is not a time"));
}

// ---- the command line, end to end without a head (--dry-run) ----

struct CliRun {
  int rc;
  std::string out;
  std::string err;
};

CliRun RunCommand(std::vector<std::string> args) {
  args.insert(args.begin(), "cohort");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int rc = RunCli(static_cast<int>(args.size()), argv.data());
  std::fflush(stdout);
  std::fflush(stderr);
  CliRun r{rc, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
  return r;
}

// `program` as submit resolves it with this process's PATH.
std::string Resolved(const std::string& program) {
  const char* path = std::getenv("PATH");
  auto r = ResolveProgram(program, path ? path : "", std::filesystem::current_path().string());
  return r ? *r : "(" + r.error().message + ")";
}

class SubmitCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cohort_submit_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Nothing here may reach a head; an unroutable one makes any attempt fail loudly.
    setenv("COHORT_HEAD", "http://127.0.0.1:1", 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

// sbatch --wrap: the line runs under /bin/sh -c; with a command after -- too, or empty, it
// is refused (exit 2, nothing sent).
TEST_F(SubmitCommandTest, WrapRunsTheLineWithAShell) {
  auto r = RunCommand({"submit", "--dry-run", "--wrap", "python3 train.py > out.txt && echo done"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["command"], (json{"/bin/sh", "-c", "python3 train.py > out.txt && echo done"}));
  auto both = RunCommand({"submit", "--dry-run", "--wrap", "true", "--", "false"});
  EXPECT_EQ(both.rc, 2);
  EXPECT_THAT(both.err, HasSubstr("--wrap and a command after --: give one of them"));
  auto empty = RunCommand({"submit", "--dry-run", "--wrap", ""});
  EXPECT_EQ(empty.rc, 2);
  EXPECT_THAT(empty.err, HasSubstr("--wrap: give the command line to run"));
}

// sbatch's -o/-e/--open-mode: the patterns go into the spec as typed (the agent expands
// them per task), and a bad one fails here, naming the flag and the pattern.
TEST_F(SubmitCommandTest, OutputAndErrorFiles) {
  auto r = RunCommand({"submit", "--dry-run", "-o", "logs/%x-%j.out", "-e", "logs/%x-%j.err", "--open-mode",
                       "append", "--", "true"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json spec = json::parse(r.out);
  EXPECT_EQ(spec["output"], "logs/%x-%j.out");
  EXPECT_EQ(spec["error"], "logs/%x-%j.err");
  EXPECT_EQ(spec["open_mode"], "append");
  auto plain = RunCommand({"submit", "--dry-run", "--", "true"});
  ASSERT_EQ(plain.rc, 0) << plain.err;
  EXPECT_FALSE(json::parse(plain.out).contains("output"));

  const std::pair<std::vector<std::string>, std::string> kBad[] = {
      {{"-o", "out-%q.txt"}, "--output: pattern 'out-%q.txt' has an unknown field '%q' (known: %j %A %a %x %u %N %n "
                             "%t %%)"},
      {{"--error=err-%"}, "--error: pattern 'err-%' ends in a lone '%'"},
      {{"-o", ""}, "--output: is empty: give a file path, or leave it out"},
      {{"-o", "logs/"}, "--output: 'logs/' names a directory; give a file in it (e.g. 'logs/slurm-%j.out')"},
      {{"--open-mode", "sometimes"}, "--open-mode: must be 'append' or 'truncate', got 'sometimes'"},
  };
  for (const auto& [flags, want] : kBad) {
    std::vector<std::string> args = {"submit", "--dry-run"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true"});
    auto bad = RunCommand(args);
    EXPECT_EQ(bad.rc, 2) << flags[0];
    EXPECT_THAT(bad.err, HasSubstr(want)) << flags[0];
  }
  // A path that is a directory here (the working directory is the nodes' too) is refused
  // before the job would fail on a node.
  std::filesystem::create_directory(dir_ / "logs");
  auto dir = RunCommand({"submit", "--dry-run", "-D", dir_.string(), "-e", "logs", "--", "true"});
  EXPECT_EQ(dir.rc, 2);
  EXPECT_THAT(dir.err, HasSubstr("--error: 'logs' is a directory (" + (dir_ / "logs").string() +
                                 "); give a file in it, e.g. 'logs/slurm-%j.out'"));
  auto file = RunCommand({"submit", "--dry-run", "-D", dir_.string(), "-e", "logs/e.txt", "--", "true"});
  EXPECT_EQ(file.rc, 0) << file.err;
}

TEST_F(SubmitCommandTest, CommandAfterDashDash) {
  auto r = RunCommand({"submit", "--dry-run", "-N", "2", "-n", "4", "-G", "8", "-J", "ddp", "-t", "2h",
                       "--export", "NONE", "--env", "A=1", "--env", "B=2", "--", "sh", "train.py", "--lr", "3e-4",
                       "-v"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json spec = json::parse(r.out);
  // The program as resolved here (cli/job_env.h): an absolute path.
  EXPECT_EQ(spec["command"], (json{Resolved("sh"), "train.py", "--lr", "3e-4", "-v"}));
  EXPECT_EQ(spec["nodes"], 2);
  EXPECT_EQ(spec["tasks_per_node"], 4);
  EXPECT_EQ(spec["gpus_per_node"], 8);
  EXPECT_EQ(spec["name"], "ddp");
  EXPECT_EQ(spec["time_limit_s"], 7200);
  EXPECT_EQ(spec["env"], json::parse(R"({"A": "1", "B": "2"})"));
  EXPECT_EQ(spec["workdir"], std::filesystem::current_path().string());
}

TEST_F(SubmitCommandTest, FileThenFlagsThenCommand) {
  std::string path = Write("job.yaml", "name: f\ncommand: [sh, a.py]\nnodes: 4\npriority: 3\n");
  auto r = RunCommand({"submit", path, "--dry-run", "-N", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json spec = json::parse(r.out);
  EXPECT_EQ(spec["nodes"], 2);
  EXPECT_EQ(spec["priority"], 3);
  EXPECT_EQ(spec["command"], (json{Resolved("sh"), "a.py"}));

  auto r2 = RunCommand({"submit", path, "--dry-run", "--", "echo", "x"});
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_EQ(json::parse(r2.out)["command"], (json{Resolved("echo"), "x"}));
  EXPECT_EQ(json::parse(r2.out)["nodes"], 4);
}

// The team a job counts against, from the command line as sbatch's -A/--account (the
// spec's `team:`); a file's team gives way to the flag. There was no flag at all.
TEST_F(SubmitCommandTest, TeamFlagSetsTheSpecsTeam) {
  for (const char* flag : {"-A", "--team", "--account"}) {
    auto r = RunCommand({"submit", "--dry-run", flag, "vision", "--", "true"});
    ASSERT_EQ(r.rc, 0) << flag << ": " << r.err;
    EXPECT_EQ(json::parse(r.out)["team"], "vision") << flag;
  }
  std::string path = Write("job.yaml", "command: [sh, a.py]\nteam: ml\n");
  auto r = RunCommand({"submit", path, "--dry-run", "-A", "vision"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["team"], "vision");
}

TEST_F(SubmitCommandTest, SubcommandAcceptsGlobalFlags) {
  auto r = RunCommand({"submit", "--dry-run", "--json", "--head", "http://127.0.0.1:2", "--", "true"});
  ASSERT_EQ(r.rc, 0) << r.err;
}

// What a Slurm user types first: sbatch's names for cohort's flags work, and sbatch's flags
// cohort lacks say what to use instead (not CLI11's "Could not convert: --priority = gpu"
// for -p, nor "did you mean -h?" for -o).
TEST_F(SubmitCommandTest, SbatchFlagsWorkOrSayWhatToUseInstead) {
  auto same = RunCommand({"submit", "--dry-run", "--job-name", "prep", "--ntasks-per-node", "2", "--chdir", "/tmp",
                          "--export", "NONE", "--", "true"});
  ASSERT_EQ(same.rc, 0) << same.err;
  json spec = json::parse(same.out);
  EXPECT_EQ(spec["name"], "prep");
  EXPECT_EQ(spec["tasks_per_node"], 2);
  EXPECT_EQ(spec["workdir"], "/tmp");
  auto short_d = RunCommand({"submit", "--dry-run", "-D", "/tmp", "--", "true"});
  ASSERT_EQ(short_d.rc, 0) << short_d.err;
  EXPECT_EQ(json::parse(short_d.out)["workdir"], "/tmp");

  auto partition = RunCommand({"submit", "-p", "gpu", "--", "true"});
  EXPECT_EQ(partition.rc, 2);
  EXPECT_THAT(partition.err, HasSubstr("'gpu' is not a priority (a whole number, -1000..1000); cohort has no "
                                       "partitions (Slurm's -p)"));
  EXPECT_EQ(RunCommand({"submit", "--dry-run", "-p", "-5", "--", "true"}).rc, 0);
  const std::pair<std::vector<std::string>, std::string> kCases[] = {
      {{"--gres=gpu:h100:4"}, "unknown option '--gres': ask for GPUs with -G/--gpus [TYPE:]COUNT per node"},
      {{"--partition", "gpu"}, "unknown option '--partition': cohort has no partitions"},
      {{"--ntasks", "8"}, "unknown option '--ntasks': cohort counts tasks per node: -N NODES -n TASKS_PER_NODE"},
      {{"--requeue"}, "unknown option '--requeue': a failed gang or one on a lost node is restarted with "
                      "--max-restarts N"},
      {{"--exclusive"}, "unknown option '--exclusive': cohort has no --exclusive"},
      {{"-Q"}, "unknown option '-Q' (see cohort submit --help"},
  };
  for (const auto& [flags, want] : kCases) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true"});
    auto r = RunCommand(args);
    EXPECT_EQ(r.rc, 2) << flags[0];
    EXPECT_THAT(r.err, HasSubstr(want)) << flags[0];
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("did you mean -h"))) << flags[0];
  }
  auto alloc = RunCommand({"alloc", "--gres=gpu:2"});
  EXPECT_EQ(alloc.rc, 2);
  EXPECT_THAT(alloc.err, HasSubstr("unknown option '--gres': ask for GPUs with -G/--gpus"));
}

// `cohort submit job.sh`, as sbatch takes it, with an sbatch script: how to submit it
// (cohort batch), not "must be a mapping of spec fields, got string".
TEST_F(SubmitCommandTest, AnSbatchScriptWhereASpecGoesSaysHowToSubmitIt) {
  std::string script = Write("job.sh", "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gres=gpu:4\nsrun python train.py\n");
  auto sbatch = RunCommand({"submit", script});
  EXPECT_EQ(sbatch.rc, 2);
  EXPECT_THAT(sbatch.err, HasSubstr(script + " is a script, not a job spec (YAML or JSON): submit it as a batch script "
                                    "with cohort batch " + script + " (sbatch: reads its #SBATCH lines; it runs once, "
                                    "on the first node, its steps with cohort run), or run it as every task with "
                                    "cohort submit [flags] -- " + script));
  std::string plain = Write("run.sh", "#!/bin/sh\necho hi\n");
  auto no_directives = RunCommand({"submit", plain});
  EXPECT_EQ(no_directives.rc, 2);
  EXPECT_THAT(no_directives.err, HasSubstr("with cohort batch " + plain + " (sbatch: it runs once"));
}

// The submitting shell's umask goes with the job (as sbatch's SLURM_UMASK); a spec file's
// own umask wins.
TEST_F(SubmitCommandTest, TheShellsUmaskGoesWithTheJob) {
  const mode_t before = umask(027);
  auto r = RunCommand({"submit", "--dry-run", "--", "true"});
  const std::string file = Write("job.yaml", "command: [\"true\"]\numask: \"0002\"\n");
  auto from_file = RunCommand({"submit", "--dry-run", file});
  umask(before);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["umask"], "0027");
  ASSERT_EQ(from_file.rc, 0) << from_file.err;
  EXPECT_EQ(json::parse(from_file.out)["umask"], "0002");
}

// cohort batch (sbatch): the #SBATCH lines down to the first command are its flags, split
// as a shell splits them, a later line over an earlier one and the command line over all;
// the script's text and its arguments go with the job, and its output to slurm-%j.out.
TEST_F(SubmitCommandTest, ABatchScriptsDirectivesAreItsFlagsAndTheCommandLineWins) {
  const std::string text =
      "#!/bin/bash\n"
      "#SBATCH -J train -N 2\n"
      "#SBATCH --ntasks-per-node=4 -G 4   # four GPUs per node\n"
      "\n"
      "#SBATCH --time 2:00:00\n"
      "#SBATCH --time=1:00:00\n"
      "#SBATCH --env 'GREETING=hello world' --env QUOTED=\"a \\\"b\\\"\"\n"
      "## SBATCH --partition=gpu\n"
      "##SBATCH --partition=gpu\n"
      "# a comment\n"
      "echo $GREETING\n"
      "#SBATCH -c 8\n";
  const std::string script = Write("job.sh", text);
  auto r = RunCommand({"batch", "--dry-run", "-N", "3", script, "a", "b c", "-N", "9"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json spec = json::parse(r.out);
  EXPECT_EQ(spec["kind"], "allocation");
  EXPECT_EQ(spec["script"], text);
  EXPECT_EQ(spec["command"], (json{"a", "b c", "-N", "9"}));  // after the script: its arguments
  EXPECT_EQ(spec["nodes"], 3);
  EXPECT_EQ(spec["tasks_per_node"], 4);
  EXPECT_EQ(spec["gpus_per_node"], 4);
  EXPECT_EQ(spec["time_limit_s"], 3600);
  EXPECT_EQ(spec["name"], "train");
  EXPECT_EQ(spec["env"]["GREETING"], "hello world");
  EXPECT_EQ(spec["env"]["QUOTED"], "a \"b\"");
  EXPECT_EQ(spec.value("cpus_per_task", 1), 1) << "a directive after the first command is not read";
  EXPECT_EQ(spec["output"], "slurm-%j.out");
  EXPECT_EQ(spec["workdir"], std::filesystem::current_path().string());

  // No -J: the script's file name; an array's default output names array and index; -o wins.
  const std::string arr = Write("sweep run.sh", "#!/bin/sh\n#SBATCH --array=0-3%2\necho $SLURM_ARRAY_TASK_ID\n");
  r = RunCommand({"batch", "--dry-run", arr});
  ASSERT_EQ(r.rc, 0) << r.err;
  spec = json::parse(r.out);
  EXPECT_EQ(spec["name"], "sweep_run.sh");
  EXPECT_EQ(spec["array"], "0-3%2");
  EXPECT_EQ(spec["output"], "slurm-%A_%a.out");
  r = RunCommand({"batch", "--dry-run", "-o", "logs-%j.txt", arr});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output"], "logs-%j.txt");

  // sbatch's -n is tasks in all, over the job's final nodes; --gres=gpu is -G.
  const std::string tasks = Write("tasks.sh", "#!/bin/sh\n#SBATCH -N 2 -n 8 --gres=gpu:a100:4\ntrue\n");
  r = RunCommand({"batch", "--dry-run", tasks});
  ASSERT_EQ(r.rc, 0) << r.err;
  spec = json::parse(r.out);
  EXPECT_EQ(spec["nodes"], 2);
  EXPECT_EQ(spec["tasks_per_node"], 4);
  EXPECT_EQ(spec["gpus_per_node"], 4);
  EXPECT_EQ(spec["gpu_type"], "a100");
  r = RunCommand({"batch", "--dry-run", "-N", "4", tasks});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["tasks_per_node"], 2) << "8 tasks over the command line's 4 nodes";
  r = RunCommand({"batch", "--dry-run", "-n", "2", "--ntasks-per-node", "1", tasks});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["tasks_per_node"], 1);

  // --wrap makes the script, as sbatch writes it.
  r = RunCommand({"batch", "--dry-run", "--wrap", "echo hi"});
  ASSERT_EQ(r.rc, 0) << r.err;
  spec = json::parse(r.out);
  EXPECT_EQ(spec["script"], "#!/bin/sh\necho hi\n");
  EXPECT_EQ(spec["name"], "wrap");
}

// A bad directive names its file, line and text; what is no script says so; nothing is sent.
TEST_F(SubmitCommandTest, ABadBatchScriptNamesItsLine) {
  const std::pair<std::string, std::string> kCases[] = {
      {"#!/bin/sh\n#SBATCH -N 2\n#SBATCH --partition=gpu\ntrue\n",
       ":3: #SBATCH --partition=gpu: unknown option '--partition': cohort has no partitions"},
      {"#!/bin/sh\n#SBATCH -t 5x\n", ":2: #SBATCH -t 5x: --time-limit: '5x' is not a time limit"},
      {"#!/bin/sh\n#SBATCH -J 'unclosed\n", "line 2: #SBATCH -J 'unclosed: the quote ' is not closed"},
      {"#!/bin/sh\n#SBATCH -N 2 extra\n", ":2: #SBATCH -N 2 extra: 'extra' is not a flag"},
      {"#!/bin/sh\n#SBATCH --wrap 'true'\n", ":2: #SBATCH --wrap 'true': --wrap: the script itself is what runs"},
      {"#!/bin/sh\n#SBATCH --nodez 2\n", "unknown option '--nodez': did you mean --nodes?"},
      {"#!/bin/sh\n#SBATCH --max-restarts 2\n", "'s #SBATCH lines: max_restarts: an allocation is never restarted"},
      {"echo no interpreter\n", ": does not look like a batch script: its first line must start with #!"},
      {"#!/bin/sh\n#SBATCH -N 2 -n 7\n", "--ntasks 7 cannot be spread evenly over 2 nodes"},
      {"#!/bin/sh\n#SBATCH -N 2 -n 8 --ntasks-per-node 3\n", "--ntasks 8 and --ntasks-per-node 3 on 2 node(s) disagree"},
      {"#!/bin/sh\n#SBATCH --gres=nvme:1\n", ":2: #SBATCH --gres=nvme:1: --gres=nvme:1: cohort schedules GPUs only"},
      {"#!/bin/sh\n#SBATCH --gres=gpu:2 -G 2\n", "--gres and -G/--gpus both ask for GPUs: give one"},
      {"#!/bin/sh\r\necho hi\r\n", "has DOS line breaks (CR LF, first on line 1)"},
  };
  int n = 0;
  for (const auto& [text, want] : kCases) {
    const std::string script = Write("bad" + std::to_string(n++) + ".sh", text);
    auto r = RunCommand({"batch", "--dry-run", script});
    EXPECT_EQ(r.rc, 2) << text;
    EXPECT_THAT(r.err, HasSubstr(want)) << text;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  auto missing = RunCommand({"batch", "--dry-run", (dir_ / "nope.sh").string()});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot read the batch script '" + (dir_ / "nope.sh").string() +
                                     "': No such file or directory"));
  auto flag = RunCommand({"batch", "--dry-run", "--qos=high", (dir_ / "bad0.sh").string()});
  EXPECT_EQ(flag.rc, 2);
  EXPECT_THAT(flag.err, HasSubstr("unknown option '--qos': cohort has no QOS"));
}

TEST_F(SubmitCommandTest, BadInputExitsTwoBeforeAnyNetworkCall) {
  auto nothing = RunCommand({"submit"});
  EXPECT_EQ(nothing.rc, 2);
  EXPECT_THAT(nothing.err, HasSubstr("nothing to run"));

  auto zero = RunCommand({"submit", "-N", "0", "--", "true"});
  EXPECT_EQ(zero.rc, 2);
  EXPECT_THAT(zero.err, HasSubstr("cohort: error: --nodes: must be between 1 and 4096, got 0"));

  std::string path = Write("job.yaml", "command: [a]\nnodes: 0\n");
  auto file = RunCommand({"submit", path});
  EXPECT_EQ(file.rc, 2);
  EXPECT_THAT(file.err, HasSubstr(path + ": nodes: must be between 1 and 4096, got 0"));

  auto missing = RunCommand({"submit", "hostname"});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_THAT(missing.err, HasSubstr("hostname: cannot open"));
  EXPECT_THAT(missing.err, HasSubstr("cohort submit -- hostname"));

  auto stray = RunCommand({"submit", path, "extra"});
  EXPECT_EQ(stray.rc, 2);
  EXPECT_THAT(stray.err, HasSubstr("unexpected argument(s) 'extra'"));

  auto unknown = RunCommand({"submit", "--bogus", "--", "true"});
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown option '--bogus'"));

  auto bad_time = RunCommand({"submit", "-t", "later", "--", "true"});
  EXPECT_EQ(bad_time.rc, 2);
  EXPECT_THAT(bad_time.err, HasSubstr("--time-limit: 'later'"));

  auto no_limit = RunCommand({"submit", "--signal", "USR1@60", "--", "true"});
  EXPECT_EQ(no_limit.rc, 2);
  EXPECT_THAT(no_limit.err, HasSubstr("--signal: 60 s before the time limit, but time_limit_s is 0 (unlimited)"));

  auto reserved = RunCommand({"submit", "--env", "RANK=1", "--", "true"});
  EXPECT_EQ(reserved.rc, 2);
  EXPECT_THAT(reserved.err, HasSubstr("--env RANK: is set by Cohort"));

  auto split = RunCommand({"submit", "-G", "3", "-n", "2", "--", "true"});
  EXPECT_EQ(split.rc, 2);
  EXPECT_THAT(split.err, HasSubstr("--gpus-per-node: 3 GPUs cannot be split evenly"));

  // A command written as one string gets the loader's hint how to write it, in submit too.
  std::string as_string = Write("string.yaml", "command: python3 train.py\n");
  auto one_string = RunCommand({"submit", as_string});
  EXPECT_EQ(one_string.rc, 2);
  EXPECT_THAT(one_string.err, HasSubstr(as_string + ": command: must be an array of strings, got string"));
  EXPECT_THAT(one_string.err, HasSubstr("as a list, e.g. [python, train.py]"));
}

TEST_F(SubmitCommandTest, ExportSendsTheEnvironmentAndAMissingProgramIsAnErrorAtSubmit) {
  setenv("COHORT_TEST_ONLY_SECRET_TOKEN_FREE", "x", 1);
  setenv("LD_PRELOAD", "", 1);
  auto all = RunCommand({"submit", "--dry-run", "--", "true"});
  ASSERT_EQ(all.rc, 0) << all.err;
  json env = json::parse(all.out)["env"];
  EXPECT_EQ(env["PATH"], std::getenv("PATH"));
  EXPECT_FALSE(env.contains("LD_PRELOAD"));
  EXPECT_FALSE(env.contains("COHORT_HEAD"));  // the job gets its own
  EXPECT_FALSE(env.contains("HOME"));         // the agent sets the job's user's
  unsetenv("LD_PRELOAD");
  unsetenv("COHORT_TEST_ONLY_SECRET_TOKEN_FREE");

  auto only = RunCommand({"submit", "--dry-run", "--export", "PATH,X=1", "--", "true"});
  ASSERT_EQ(only.rc, 0) << only.err;
  EXPECT_EQ(json::parse(only.out)["env"], (json{{"PATH", std::getenv("PATH")}, {"X", "1"}}));

  auto bad = RunCommand({"submit", "--dry-run", "--export", "NONE,X", "--", "true"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--export"));

  auto missing = RunCommand({"submit", "--", "no-such-program-anywhere", "x"});
  EXPECT_EQ(missing.rc, 2);  // not 3: nothing reached for the head
  EXPECT_THAT(missing.err, HasSubstr("'no-such-program-anywhere' is not found in PATH on the submitting side"));
  auto relative = RunCommand({"submit", "--workdir", dir_.string(), "--", "./train.sh"});
  EXPECT_EQ(relative.rc, 2);
  EXPECT_THAT(relative.err, HasSubstr((dir_ / "train.sh").string() + ") does not exist"));
}

TEST_F(SubmitCommandTest, UnreachableHeadExitsThree) {
  auto r = RunCommand({"submit", "--", "true"});
  EXPECT_EQ(r.rc, 3);
  EXPECT_THAT(r.err, HasSubstr("cannot reach"));
  auto q = RunCommand({"queue", "--head", "http://127.0.0.1:1"});
  EXPECT_EQ(q.rc, 3);
  auto bad_id = RunCommand({"show", "abc"});
  EXPECT_EQ(bad_id.rc, 2);
  EXPECT_THAT(bad_id.err, HasSubstr("'abc' is not a job id"));
}

}  // namespace
}  // namespace cohort::cli
