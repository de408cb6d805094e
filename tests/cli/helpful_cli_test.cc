// The CLI that helps: "did you mean" for commands and flags, completion scripts and help
// topics generated from the CLI's own definition, queue --format/--sort/fitting, and the
// message an unreachable head gets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/cli.h"
#include "cli/job_spec_file.h"
#include "cli/client.h"
#include "cli/suggest.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t kNow = 1'800'000'000'000;

// The hint for argv as typed (argv[0] included).
std::string HintFor(std::vector<const char*> argv) {
  GlobalOptions global;
  auto app = BuildCliApp(global, [](CommandFn) {});
  return DidYouMean(*app, static_cast<int>(argv.size()), argv.data());
}

TEST(ClosestNamesTest, TyposSwapsAndPrefixes) {
  const std::vector<std::string> names = {"hold", "history", "help", "queue", "release", "show"};
  EXPECT_THAT(ClosestNames("hlod", names), ElementsAre("hold"));  // a swap is one edit
  EXPECT_THAT(ClosestNames("qeueu", names), ElementsAre("queue"));
  EXPECT_THAT(ClosestNames("hist", names), ElementsAre("history"));  // a prefix
  EXPECT_THAT(ClosestNames("xyzzy", names), IsEmpty());
  EXPECT_THAT(ClosestNames("hold", names), IsEmpty());  // the name itself is no suggestion
}

TEST(DidYouMeanTest, MisspeltCommandSuggestsTheRightOne) {
  EXPECT_EQ(HintFor({"cohort", "hlod", "12"}), "unknown command 'hlod'; did you mean: cohort hold 12");
  EXPECT_THAT(HintFor({"cohort", "--json", "qeueu"}), HasSubstr("did you mean: cohort --json queue"));
  EXPECT_THAT(HintFor({"cohort", "token", "craete", "--user", "bob"}), HasSubstr("cohort token create --user bob"));
  // Nothing close: the word is still named (CLI11 said "A subcommand is required").
  EXPECT_EQ(HintFor({"cohort", "frobnicate"}), "unknown command 'frobnicate' (cohort --help lists them)");
  EXPECT_EQ(HintFor({"cohort", "token", "frobnicate"}),
            "unknown command 'frobnicate' of cohort token (cohort token --help lists them)");
}

TEST(DidYouMeanTest, MisspeltFlagSuggestsTheRightOne) {
  EXPECT_THAT(HintFor({"cohort", "queue", "--stat", "RUNNING"}),
              HasSubstr("unknown flag '--stat' of cohort queue; did you mean: cohort queue --state RUNNING"));
  // "=value" stays with the corrected flag; the root's flags count under a subcommand.
  EXPECT_THAT(HintFor({"cohort", "queue", "--haed=http://h:1"}), HasSubstr("cohort queue --head=http://h:1"));
  // A known flag's value is not taken for a command.
  EXPECT_EQ(HintFor({"cohort", "--head", "hlod", "queue", "--limit", "3"}), "");
}

// Every one-letter flag is one edit from every other: `cohort history -k 3` got "did you
// mean: cohort history -h 3 (or -u) (or -s)", -h being --help, which takes no value.
TEST(DidYouMeanTest, AnUnknownOneLetterFlagGuessesNoOtherLetter) {
  EXPECT_EQ(HintFor({"cohort", "history", "-k", "3"}),
            "unknown flag '-k' of cohort history (cohort history --help lists its flags)");
  EXPECT_EQ(HintFor({"cohort", "-j", "queue"}), "unknown flag '-j' (cohort --help lists its flags)");
  EXPECT_EQ(HintFor({"cohort", "token", "create", "-q"}),
            "unknown flag '-q' of cohort token create (cohort token create --help lists its flags)");
  // --help is never the guess for a misspelt flag that takes a value.
  EXPECT_THAT(HintFor({"cohort", "queue", "--hep", "3"}), Not(HasSubstr("--help")));
}

// A negative number where a count goes (`cohort serve scale web -1`) is no unknown flag.
TEST(DidYouMeanTest, ANegativeNumberIsCalledANumber) {
  for (const char* n : {"-1", "-25", "-0.5"}) {
    EXPECT_EQ(HintFor({"cohort", "serve", "scale", "web", n}),
              std::string("'") + n +
                  "' is not a flag of cohort serve scale, and no argument of cohort serve scale may "
                  "be negative (cohort serve scale --help lists what it takes)");
  }
  // A value of a flag that takes one is the flag's to judge.
  EXPECT_EQ(HintFor({"cohort", "logs", "--tail", "-5", "12"}), "");
}

TEST(DidYouMeanTest, RunCliPrintsTheHintAndExits2) {
  std::vector<const char*> argv = {"cohort", "qeueu"};
  testing::internal::CaptureStderr();
  int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(err, "cohort: error: unknown command 'qeueu'; did you mean: cohort queue\n");
}

TEST(DurationFlagsTest, WatchAndIntervalTakeTheOneDurationSyntax) {
  for (std::vector<const char*> argv : {std::vector<const char*>{"cohort", "queue", "--watch", "1x"},
                                        std::vector<const char*>{"cohort", "queue", "--watch", "50ms"},
                                        std::vector<const char*>{"cohort", "top", "--interval", "1d"}}) {
    testing::internal::CaptureStderr();
    int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 2) << argv[2];
    EXPECT_THAT(err, HasSubstr(argv[2])) << err;
  }
}

// A negative count names the flag and what it takes, not CLI11's range up to the largest
// double ("not in range 0.000000 to 17976931348623157081...").
TEST(LogsFlagsTest, ANegativeCountSaysWhatTheFlagTakes) {
  for (const char* flag : {"--tail", "--tail-bytes", "--rank", "--attempt"}) {
    std::vector<const char*> argv = {"cohort", "logs", "12", flag, "-1"};
    testing::internal::CaptureStderr();
    int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 2) << flag;
    EXPECT_THAT(err, HasSubstr(std::string(flag) + ": must be 0 or more, got -1")) << err;
    EXPECT_THAT(err, Not(HasSubstr("179769"))) << err;
  }
}

// `cohort queue --help` and the others say the same default head as `cohort --help` and as
// the URL they resolve: $COHORT_HEAD, the client config, then https (not http) on 8470.
TEST(HeadFlagTest, EveryCommandDescribesTheDefaultItUses) {
  GlobalOptions global;
  auto app = BuildCliApp(global, [](CommandFn) {});
  int seen = 0;
  std::function<void(CLI::App*)> visit = [&](CLI::App* a) {
    for (const CLI::Option* opt : a->get_options()) {
      const auto& names = opt->get_lnames();
      if (std::find(names.begin(), names.end(), "head") == names.end()) continue;
      if (a->get_name() == "agent") continue;  // an agent's own head, required
      ++seen;
      EXPECT_THAT(opt->get_description(), HasSubstr("client config")) << a->get_name();
      EXPECT_THAT(opt->get_description(), HasSubstr("https://127.0.0.1:8470")) << a->get_name();
    }
    for (CLI::App* sub : a->get_subcommands([](CLI::App*) { return true; })) visit(sub);
  };
  visit(app.get());
  EXPECT_GT(seen, 20);
}

TEST(CompletionTest, ScriptsNameEveryCommandAliasAndFlag) {
  GlobalOptions global;
  auto app = BuildCliApp(global, [](CommandFn) {});
  for (const char* shell : {"bash", "zsh"}) {
    auto script = CompletionScript(*app, shell);
    ASSERT_TRUE(script.has_value()) << shell;
    // Every top-level command is offered after `cohort`.
    EXPECT_THAT(*script, HasSubstr("\"\") echo \"" + Join(SubcommandNames(*app), " ", "") + "\""));
    EXPECT_THAT(*script, HasSubstr("\"queue\") echo \""));
    EXPECT_THAT(*script, HasSubstr("--sort"));
    EXPECT_THAT(*script, HasSubstr("\"squeue\") echo \""));  // the alias completes like queue
    EXPECT_THAT(*script, HasSubstr("\"token\") echo \"create ls revoke\""));  // token's own subcommands
  }
  EXPECT_THAT(*CompletionScript(*app, "bash"), HasSubstr("complete -o default -F _cohort cohort"));
  EXPECT_THAT(*CompletionScript(*app, "zsh"), HasSubstr("#compdef cohort"));
  auto fish = CompletionScript(*app, "fish");
  ASSERT_FALSE(fish.has_value());
  EXPECT_THAT(fish.error().message, HasSubstr("SHELL"));
}

TEST(CompletionTest, BashScriptCompletesInARealShell) {
  if (system("command -v bash >/dev/null 2>&1") != 0) GTEST_SKIP() << "no bash";
  GlobalOptions global;
  auto app = BuildCliApp(global, [](CommandFn) {});
  auto script = CompletionScript(*app, "bash");
  ASSERT_TRUE(script.has_value());
  char path[] = "/tmp/cohort-completion-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, script->data(), script->size()), static_cast<ssize_t>(script->size()));
  close(fd);
  auto complete = [&](const std::string& words, int cword) {
    std::string cmd = "bash -c 'source " + std::string(path) + "; COMP_WORDS=(" + words + "); COMP_CWORD=" +
                      std::to_string(cword) + "; _cohort; echo \"${COMPREPLY[*]}\"'";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    if (p) pclose(p);
    return out;
  };
  EXPECT_THAT(complete("cohort hi", 1), HasSubstr("history"));
  EXPECT_THAT(complete("cohort queue --so", 2), HasSubstr("--sort"));
  EXPECT_THAT(complete("cohort token cr", 2), HasSubstr("create"));
  EXPECT_THAT(complete("cohort token cr", 2), Not(HasSubstr("history")));
  unlink(path);
}

// zsh runs the script's completion function as its completion system would, with the
// system's builtins replaced by functions that print what they are given: compadd's
// candidates (zsh filters them by the word's prefix), _files for file completion.
TEST(CompletionTest, ZshScriptCompletesInARealShell) {
  if (system("command -v zsh >/dev/null 2>&1") != 0) GTEST_SKIP() << "no zsh (scripts/install-deps.sh installs it)";
  GlobalOptions global;
  auto app = BuildCliApp(global, [](CommandFn) {});
  auto script = CompletionScript(*app, "zsh");
  ASSERT_TRUE(script.has_value());
  char path[] = "/tmp/cohort-zsh-completion-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, script->data(), script->size()), static_cast<ssize_t>(script->size()));
  close(fd);
  auto complete = [&](const std::string& words, int current) {
    std::string cmd = "zsh -f -c 'compdef() { :; }; compadd() { [[ $1 == -- ]] && shift; print -l -- \"$@\"; }; "
                      "_files() { print _files; }; source " +
                      std::string(path) + "; words=(" + words + "); CURRENT=" + std::to_string(current) +
                      "; _cohort' | tr \"\\n\" \" \"";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    if (p) pclose(p);
    return " " + out;
  };
  EXPECT_THAT(complete("cohort hi", 2), HasSubstr(" history "));
  EXPECT_THAT(complete("cohort queue --so", 3), HasSubstr(" --sort "));
  EXPECT_THAT(complete("cohort token cr", 3), HasSubstr(" create "));
  EXPECT_THAT(complete("cohort token cr", 3), Not(HasSubstr(" history ")));
  EXPECT_EQ(complete("cohort submit -- py", 4), " _files ") << "after -- the command's words are files";
  unlink(path);
}

// `cohort help spec`'s example is a spec that loads, and it names every field a spec may
// have (the decoder's, api/codecs.cc): array, sweep, container and the rest were missing.
TEST(HelpTopicTest, TheSpecExampleLoadsAndNamesEveryField) {
  std::string text = HelpTopicText("spec");
  const std::string example = text.substr(text.find("\n\n") + 2);
  char path[] = "/tmp/cohort-help-spec-XXXXXX.yaml";
  int fd = mkstemps(path, 5);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, example.data(), example.size()), static_cast<ssize_t>(example.size()));
  close(fd);
  auto spec = LoadJobSpecFile(path);
  unlink(path);
  ASSERT_TRUE(spec.has_value()) << spec.error().message << "\n" << example;
  for (const char* field :
       {"name", "command", "nodes", "min_nodes", "tasks_per_node", "gpus_per_node", "gpus", "gpus_per_task",
        "gpu_type", "gpu_memory", "gpu_memory_enforce", "topology", "cpus_per_task", "priority", "placement", "max_restarts", "time_limit_s",
        "progress_timeout_s", "checkpoint_signal", "checkpoint_before_limit_s", "env", "workdir", "output", "error",
        "open_mode", "nodelist",
        "exclude", "constraint",
        "mem_per_node_mb", "team", "tensor_group_size", "container", "array", "dependency",
        "kill_on_invalid_dep", "sweep", "kind"}) {
    EXPECT_THAT(example, HasSubstr(std::string(field) + ": ")) << field;
  }
}

TEST(HelpTopicTest, TopicsExplainAndUnknownOnesSuggest) {
  ASSERT_NE(HelpTopicText("durations"), nullptr);
  EXPECT_THAT(HelpTopicText("durations"), HasSubstr("1d12h"));
  EXPECT_THAT(HelpTopicText("states"), HasSubstr("TIMEOUT"));
  EXPECT_THAT(HelpTopicText("spec"), HasSubstr("constraint: a100&ib"));
  EXPECT_THAT(HelpTopicText("exit-codes"), HasSubstr("3  the head could not be reached"));
  EXPECT_EQ(HelpTopicText("nonsense"), nullptr);

  std::vector<const char*> argv = {"cohort", "help", "duratoins"};
  testing::internal::CaptureStderr();
  int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("did you mean durations?"));

  argv = {"cohort", "help", "queue"};
  testing::internal::CaptureStdout();
  rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("--format"));
  // The usage line is the command to type, as `cohort queue --help` prints it.
  EXPECT_THAT(out, HasSubstr("Usage: cohort queue [OPTIONS]"));

  argv = {"cohort", "help", "serve", "scale"};
  testing::internal::CaptureStdout();
  rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("Usage: cohort serve scale [OPTIONS] NAME N"));
}

// A port on loopback that nothing listens on: bound, then closed.
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

TEST(UnreachableHeadTest, SaysWhatFailedWhereTheUrlCameFromAndWhatToDo) {
  const std::string url = "http://127.0.0.1:" + std::to_string(ClosedPort());
  std::vector<const char*> argv = {"cohort", "--head", url.c_str(), "queue"};
  testing::internal::CaptureStderr();
  int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 3);
  EXPECT_THAT(err, HasSubstr("cannot reach " + url));
  EXPECT_THAT(err, HasSubstr("connection refused"));
  EXPECT_THAT(err, HasSubstr("came from --head"));
  EXPECT_THAT(err, HasSubstr("cohort up"));
  EXPECT_THAT(err, HasSubstr("COHORT_HEAD"));
}

api::Job QueueJob(int64_t id, std::string name, int priority) {
  api::Job j;
  j.id = id;
  j.spec.name = std::move(name);
  j.spec.user = "alice";
  j.spec.command = {"python3", "train.py"};
  j.spec.priority = priority;
  j.reason = "waiting for 4 nodes with 8 free GPUs and a long explanation of why";
  return j;
}

// `cohort queue -j 12,13_2` (squeue -j): a job, every element of an array, one element.
TEST(QueueJobsFlagTest, MatchesJobsArraysAndElements) {
  auto refs = ParseJobRefs({"12", "13_2"});
  ASSERT_TRUE(refs.has_value()) << refs.error().message;
  EXPECT_TRUE(JobMatchesRefs(json{{"id", 12}}, *refs));
  EXPECT_FALSE(JobMatchesRefs(json{{"id", 11}}, *refs));
  EXPECT_TRUE(JobMatchesRefs(json{{"id", 40}, {"array_job_id", 12}, {"array_task_id", 5}}, *refs));
  EXPECT_TRUE(JobMatchesRefs(json{{"id", 41}, {"array_job_id", 13}, {"array_task_id", 2}}, *refs));
  EXPECT_FALSE(JobMatchesRefs(json{{"id", 42}, {"array_job_id", 13}, {"array_task_id", 3}}, *refs));
  EXPECT_FALSE(JobMatchesRefs(json{{"id", 13}}, *refs)) << "13_2 names one element, not the array";
  auto bad = ParseJobRefs({"12", "x"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("--jobs"));
  // queue and history (sacct) take it; a bad id is bad input (exit 2) before the head is asked.
  for (const char* command : {"queue", "history"}) {
    std::vector<const char*> argv = {"cohort", "--head", "http://127.0.0.1:1", command, "-j", "12,x"};
    testing::internal::CaptureStderr();
    int rc = RunCli(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 2) << command << ": " << err;
    EXPECT_THAT(err, HasSubstr("--jobs")) << err;
  }
}

// `cohort drain node[1-2],gpu-a node-7` as `scontrol update NodeName=node[1-2] ...` takes it.
TEST(DrainNodesTest, HostListsExpandToNodeNames) {
  auto nodes = ExpandNodeArgs({"node-[1-2],gpu-a", "node-7", "node-1"});
  ASSERT_TRUE(nodes.has_value()) << nodes.error().message;
  EXPECT_THAT(*nodes, ElementsAre("node-1", "node-2", "gpu-a", "node-7"));
  auto bad = ExpandNodeArgs({"node[3-1]"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(ExitCodeFor(bad.error()), 2);
  EXPECT_THAT(bad.error().message, HasSubstr("NODE"));
}

TEST(QueueViewTest, AnArrayCollapsesItsUnstartedIndices) {
  api::Job array = QueueJob(12, "sweep", 0);
  array.spec.array = "0-999%16";
  array.array_left = "5-999";
  api::Job element = QueueJob(13, "sweep", 0);
  element.array_job_id = 12;
  element.array_task_id = 4;
  api::Job started = array;  // every index made into an element: shown by its elements only
  started.id = 20;
  started.array_left = "";
  auto view = ParseQueueView("id,name", "", 0);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(RenderQueue({array, element, started}, kNow, *view),
            "JOBID          NAME\n"
            "12_[5-999%16]  sweep\n"
            "12_4           sweep\n");
}

TEST(QueueViewTest, FormatSortAndFittingTheTerminal) {
  auto view = ParseQueueView("id,priority,name", "-priority,id", 0);
  ASSERT_TRUE(view.has_value()) << view.error().message;
  std::vector<api::Job> jobs = {QueueJob(1, "a", 0), QueueJob(2, "b", 5), QueueJob(3, "c", 5)};
  EXPECT_EQ(RenderQueue(jobs, kNow, *view),
            "JOBID  PRIORITY  NAME\n"
            "2      5         b\n"
            "3      5         c\n"
            "1      0         a\n");

  // Fitting: every line within the width, the widest column cut first.
  jobs[0].spec.name = "a-very-long-job-name-that-goes-on";
  auto narrow = ParseQueueView("", "", 60);
  ASSERT_TRUE(narrow.has_value());
  std::string table = RenderQueue(jobs, kNow, *narrow);
  size_t start = 0;
  while (start < table.size()) {
    size_t end = table.find('\n', start);
    EXPECT_LE(DisplayWidth(table.substr(start, end - start)), 60u) << table;
    start = end + 1;
  }
  EXPECT_THAT(table, HasSubstr("JOBID"));
  EXPECT_THAT(table, HasSubstr("PENDING"));  // a state is never cut
  EXPECT_THAT(table, Not(HasSubstr("ATTEMPT")));  // dropped first
  EXPECT_THAT(table, HasSubstr("NODELIST"));
  EXPECT_THAT(table, HasSubstr("…"));
  // Wide enough: nothing is dropped or cut.
  EXPECT_EQ(RenderQueue(jobs, kNow, *ParseQueueView("", "", 200)), RenderQueue(jobs, kNow));

  // PROGRESS shows by default only when some running job reports progress.
  EXPECT_THAT(RenderQueue(jobs, kNow, *ParseQueueView("", "", 0)), Not(HasSubstr("PROGRESS")));
  QueueView with_progress = *ParseQueueView("id,progress", "", 0);
  with_progress.progress[2] = "45% 2.1/s ETA 3m12s";
  EXPECT_EQ(RenderQueue(jobs, kNow, with_progress),
            "JOBID  PROGRESS\n"
            "1      -\n"
            "2      45% 2.1/s ETA 3m12s\n"
            "3      -\n");
  QueueView defaults = *ParseQueueView("", "", 0);
  defaults.progress[2] = "45%";
  EXPECT_THAT(RenderQueue(jobs, kNow, defaults), HasSubstr("PROGRESS"));

  auto bad_col = ParseQueueView("id,nmae", "", 0);
  ASSERT_FALSE(bad_col.has_value());
  EXPECT_THAT(bad_col.error().message, HasSubstr("--format"));
  EXPECT_THAT(bad_col.error().message, HasSubstr("nmae"));
  auto bad_sort = ParseQueueView("", "-prio", 0);
  ASSERT_FALSE(bad_sort.has_value());
  EXPECT_THAT(bad_sort.error().message, HasSubstr("--sort"));
  EXPECT_EQ(ExitCodeFor(bad_sort.error()), 2);
}

}  // namespace
}  // namespace cohort::cli

namespace cohort::cli {
namespace {

TEST(TailLineStartTest, FindsTheLastNLinesOrAsksForMore) {
  const std::string log = "one\ntwo\nthree\n";
  EXPECT_EQ(TailLineStart(log, 0, 1), 8);   // "three\n"
  EXPECT_EQ(TailLineStart(log, 0, 2), 4);   // "two\nthree\n"
  EXPECT_EQ(TailLineStart(log, 0, 3), 0);
  EXPECT_EQ(TailLineStart(log, 0, 10), 0);  // fewer lines than asked: all of them
  EXPECT_EQ(TailLineStart(log, 0, 0), static_cast<int64_t>(log.size()));
  EXPECT_EQ(TailLineStart("a\nno newline yet", 100, 1), 102);  // a partial last line counts
  // A window that starts mid-log and holds too few lines asks for a larger one.
  EXPECT_EQ(TailLineStart("x\ny\n", 500, 5), -1);
  EXPECT_EQ(TailLineStart("x\ny\n", 500, 1), 502);
}

}  // namespace
}  // namespace cohort::cli
