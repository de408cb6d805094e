#include "cli/job_spec_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class SpecFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cohort_cli_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to dir/name and returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Loads a spec whose `extra` YAML lines follow a valid command; returns the error.
  Error YamlError(const std::string& extra) {
    std::string path = Write("job.yaml", "command: [python, train.py]\n" + extra);
    auto spec = LoadJobSpecFile(path);
    EXPECT_FALSE(spec.has_value()) << extra;
    return spec ? Error{} : spec.error();
  }

  fs::path dir_;
};

TEST_F(SpecFileTest, LoadsEveryFieldFromYaml) {
  std::string path = Write("job.yaml", R"(# a training job
name: llama-ft
user: alice
command: [python, train.py, --epochs, 10, --lr, 3e-4, --fast, true]
env:
  OMP_NUM_THREADS: 4
  WANDB_MODE: "offline"
  DEBUG: true
workdir: /home/alice/ft
nodes: 2
tasks_per_node: 4
gpus_per_node: 8
cpus_per_task: 6
priority: -5
placement: spread
max_restarts: 3
time_limit_s: 7200
)");
  auto spec = LoadJobSpecFile(path);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->name, "llama-ft");
  EXPECT_EQ(spec->user, "alice");
  EXPECT_EQ(spec->command, (std::vector<std::string>{"python", "train.py", "--epochs", "10", "--lr", "3e-4",
                                                     "--fast", "true"}));
  EXPECT_EQ(spec->env.at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(spec->env.at("WANDB_MODE"), "offline");
  EXPECT_EQ(spec->env.at("DEBUG"), "true");
  EXPECT_EQ(spec->workdir, "/home/alice/ft");
  EXPECT_EQ(spec->nodes, 2);
  EXPECT_EQ(spec->tasks_per_node, 4);
  EXPECT_EQ(spec->gpus_per_node, 8);
  EXPECT_EQ(spec->cpus_per_task, 6);
  EXPECT_EQ(spec->priority, -5);
  EXPECT_EQ(spec->placement, api::Placement::kSpread);
  EXPECT_EQ(spec->max_restarts, 3);
  EXPECT_EQ(spec->time_limit_s, 7200);
}

TEST_F(SpecFileTest, BlockSequencesAndDefaults) {
  std::string path = Write("job.yml", "command:\n  - /usr/bin/env\n  - 'x: y'\n");
  auto spec = LoadJobSpecFile(path);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->command, (std::vector<std::string>{"/usr/bin/env", "x: y"}));
  EXPECT_EQ(spec->name, "env");  // default: basename of command[0]
  EXPECT_EQ(spec->nodes, 1);
  EXPECT_EQ(spec->user, "anonymous");
}

TEST_F(SpecFileTest, LoadsJson) {
  std::string path = Write("job.json", R"({"name": "j", "command": ["echo", "hi"], "nodes": 3,
    "gpus_per_node": 2, "env": {"A": "1"}})");
  auto spec = LoadJobSpecFile(path);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->nodes, 3);
  EXPECT_EQ(spec->gpus_per_node, 2);
  EXPECT_EQ(spec->env.at("A"), "1");
}

TEST_F(SpecFileTest, UnknownExtensionTriesJsonThenYaml) {
  auto json_spec = LoadJobSpecFile(Write("spec.txt", R"({"command": ["true"], "nodes": 2})"));
  ASSERT_TRUE(json_spec.has_value()) << json_spec.error().message;
  EXPECT_EQ(json_spec->nodes, 2);
  auto yaml_spec = LoadJobSpecFile(Write("spec", "command: [\"true\"]\nnodes: 4\n"));
  ASSERT_TRUE(yaml_spec.has_value()) << yaml_spec.error().message;
  EXPECT_EQ(yaml_spec->nodes, 4);
  // Broken JSON-looking text reports the JSON error.
  auto bad = LoadJobSpecFile(Write("spec.cfg", "{\"command\": [\"true\"],,}"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("invalid JSON"));
}

TEST_F(SpecFileTest, JsonFilesAreNotCoerced) {
  auto spec = LoadJobSpecFile(Write("job.json", R"({"command": ["sleep", 1]})"));
  ASSERT_FALSE(spec.has_value());
  EXPECT_THAT(spec.error().message, StartsWith(dir_.string()));
  EXPECT_THAT(spec.error().message, HasSubstr("job.json: command[1]: must be a string, got integer"));
}

TEST_F(SpecFileTest, EachBadFieldNamesTheFileAndTheField) {
  struct Case {
    std::string yaml;
    std::string field;
    std::string message;  // after "<path>: "
  };
  const std::vector<Case> cases = {
      {"nodes: 0\n", "nodes", "nodes: must be between 1 and 4096, got 0"},
      {"nodes: \"4\"\n", "nodes", "nodes: must be an integer, got string \"4\""},
      {"nodes: 1.5\n", "nodes", "nodes: must be an integer, got number 1.5"},
      {"tasks_per_node: 0\n", "tasks_per_node", "tasks_per_node: must be between 1 and 1024, got 0"},
      {"gpus_per_node: -1\n", "gpus_per_node", "gpus_per_node: must be between 0 and 1024, got -1"},
      {"cpus_per_task: many\n", "cpus_per_task", "cpus_per_task: must be an integer, got string \"many\""},
      {"priority: 5000\n", "priority", "priority: must be between -1000 and 1000, got 5000"},
      {"placement: diagonal\n", "placement", "placement: must be 'pack' or 'spread', got 'diagonal'"},
      {"max_restarts: -1\n", "max_restarts", "max_restarts: must be between 0 and 1000, got -1"},
      {"time_limit_s: -5\n", "time_limit_s", "time_limit_s: must be between 0 and 31622400, got -5"},
      {"workdir: relative/dir\n", "workdir", "workdir: must be an absolute path, got 'relative/dir'"},
      {"name: \"bad name!\"\n", "name", "name: must be 1-128 characters"},
      {"user: \"a b\"\n", "user", "user: must be 1-64 characters"},
      {"env: {RANK: \"3\"}\n", "env.RANK", "env.RANK: is set by Cohort"},
      {"env: {1X: a}\n", "env.1X", "env.1X: is not a valid environment variable name"},
      {"env: [A, B]\n", "env", "env: must be an object of strings, got array"},
      {"gpus_per_node: 3\ntasks_per_node: 2\n", "gpus_per_node",
       "gpus_per_node: 3 GPUs cannot be split evenly among 2 tasks per node"},
  };
  for (const auto& c : cases) {
    Error e = YamlError(c.yaml);
    EXPECT_EQ(e.code, ErrorCode::kInvalidArgument) << c.yaml;
    EXPECT_EQ(e.field, c.field) << c.yaml;
    EXPECT_THAT(e.message, StartsWith((dir_ / "job.yaml").string() + ": " + c.message)) << c.yaml;
  }
}

TEST_F(SpecFileTest, CommandErrors) {
  auto missing = LoadJobSpecFile(Write("a.yaml", "nodes: 2\n"));
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.error().message, HasSubstr("a.yaml: command: is required"));

  auto empty = LoadJobSpecFile(Write("b.yaml", "command: []\n"));
  ASSERT_FALSE(empty.has_value());
  EXPECT_THAT(empty.error().message, HasSubstr("b.yaml: command: must name a program"));

  auto as_string = LoadJobSpecFile(Write("c.yaml", "command: python train.py\n"));
  ASSERT_FALSE(as_string.has_value());
  EXPECT_THAT(as_string.error().message, HasSubstr("c.yaml: command: must be an array of strings, got string"));
  EXPECT_THAT(as_string.error().message, HasSubstr("as a list"));
}

// `cohort submit chat.yaml` with a service file said only "command: is required".
TEST_F(SpecFileTest, AServiceFileSaysToDeployIt) {
  auto svc = LoadJobSpecFile(Write("chat.yaml", "kind: service\nname: chat\nmodel: /models/tiny\nreplicas: 2\n"));
  ASSERT_FALSE(svc.has_value());
  EXPECT_THAT(svc.error().message, HasSubstr("chat.yaml: command: is required"));
  EXPECT_THAT(svc.error().message, HasSubstr("deploy it with `cohort serve deploy FILE`"));
  auto job = LoadJobSpecFile(Write("job.yaml", "nodes: 2\n"));
  ASSERT_FALSE(job.has_value());
  EXPECT_THAT(job.error().message, ::testing::Not(HasSubstr("serve deploy")));
}

TEST_F(SpecFileTest, UnknownFieldSuggestsTheNearestName) {
  Error e = YamlError("gpu_per_node: 4\n");  // `gpus: 4` is a GPU request (issue 18)
  EXPECT_EQ(e.field, "gpu_per_node");
  EXPECT_THAT(e.message,
              HasSubstr("job.yaml: gpu_per_node: unknown field 'gpu_per_node' (did you mean 'gpus_per_node'?)"));
  Error e2 = YamlError("node: 2\n");
  EXPECT_THAT(e2.message, HasSubstr("unknown field 'node' (did you mean 'nodes'?)"));
  Error e3 = YamlError("zzzzzz: 2\n");
  EXPECT_THAT(e3.message, HasSubstr("unknown field 'zzzzzz'"));
  EXPECT_THAT(e3.message, ::testing::Not(HasSubstr("did you mean")));
}

TEST_F(SpecFileTest, YamlSyntaxErrorGivesLineAndColumn) {
  std::string path = Write("job.yaml", "name: x\ncommand: [python, train.py\nnodes: 2\n");
  auto spec = LoadJobSpecFile(path);
  ASSERT_FALSE(spec.has_value());
  EXPECT_EQ(spec.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(spec.error().message, StartsWith(path + ":"));
  EXPECT_THAT(spec.error().message, HasSubstr("invalid YAML"));
  EXPECT_THAT(spec.error().message, ::testing::ContainsRegex(R"(job\.yaml:[0-9]+:[0-9]+: )"));

  auto tab = LoadJobSpecFile(Write("tab.yaml", "command: [a]\nenv:\n  A: 1\n B: 2\n"));
  ASSERT_FALSE(tab.has_value());
  EXPECT_THAT(tab.error().message, HasSubstr("tab.yaml:4:"));
}

TEST_F(SpecFileTest, JsonSyntaxErrorGivesLineAndColumn) {
  std::string path = Write("job.json", "{\n  \"command\": [\"a\"],\n  \"nodes\": 2,,\n}\n");
  auto spec = LoadJobSpecFile(path);
  ASSERT_FALSE(spec.has_value());
  EXPECT_THAT(spec.error().message, StartsWith(path + ":3:"));
  EXPECT_THAT(spec.error().message, HasSubstr("invalid JSON"));
}

TEST_F(SpecFileTest, MissingEmptyAndMisshapenFiles) {
  std::string missing = (dir_ / "nope.yaml").string();
  auto m = LoadJobSpecFile(missing);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(m.error().message, missing + ": cannot open: No such file or directory");

  auto d = LoadJobSpecFile(dir_.string());
  ASSERT_FALSE(d.has_value());
  EXPECT_THAT(d.error().message, HasSubstr("is a directory"));

  auto empty = LoadJobSpecFile(Write("empty.yaml", "# nothing here\n"));
  ASSERT_FALSE(empty.has_value());
  EXPECT_THAT(empty.error().message, HasSubstr("empty.yaml: is empty"));

  auto list = LoadJobSpecFile(Write("list.yaml", "- a\n- b\n"));
  ASSERT_FALSE(list.has_value());
  EXPECT_THAT(list.error().message, HasSubstr("list.yaml: must be a mapping"));

  auto dup = LoadJobSpecFile(Write("dup.yaml", "command: [a]\nnodes: 1\nnodes: 2\n"));
  ASSERT_FALSE(dup.has_value());
  EXPECT_THAT(dup.error().message, HasSubstr("dup.yaml:3:1: duplicate key 'nodes'"));

  auto two = LoadJobSpecFile(Write("two.yaml", "command: [a]\n---\ncommand: [b]\n"));
  ASSERT_FALSE(two.has_value());
  EXPECT_THAT(two.error().message, HasSubstr("2 YAML documents"));
}

TEST(YamlToJsonTest, ScalarsFollowTheCoreSchema) {
  auto j = YamlToJson(R"(
int: 42
neg: -7
plus: +3
hex: 0x1F
oct: 0o17
float: 2.5
exp: 1e3
t: true
f: False
n1: ~
n2: null
n3:
quoted_int: "42"
single_quoted: 'true'
yes_is_a_string: yes
word: hello world
version: 1.2.3
literal: |
  line one
  line two
tagged: !!str 12
big: 99999999999999999999
seq: [1, "1", a]
map: {a: 1}
)", "t.yaml");
  ASSERT_TRUE(j.has_value()) << j.error().message;
  EXPECT_EQ((*j)["int"], 42);
  EXPECT_TRUE((*j)["int"].is_number_integer());
  EXPECT_EQ((*j)["neg"], -7);
  EXPECT_EQ((*j)["plus"], 3);
  EXPECT_EQ((*j)["hex"], 31);
  EXPECT_EQ((*j)["oct"], 15);
  EXPECT_EQ((*j)["float"], 2.5);
  EXPECT_EQ((*j)["exp"], 1000.0);
  EXPECT_EQ((*j)["t"], true);
  EXPECT_EQ((*j)["f"], false);
  EXPECT_TRUE((*j)["n1"].is_null());
  EXPECT_TRUE((*j)["n2"].is_null());
  EXPECT_TRUE((*j)["n3"].is_null());
  EXPECT_EQ((*j)["quoted_int"], "42");
  EXPECT_EQ((*j)["single_quoted"], "true");
  EXPECT_EQ((*j)["yes_is_a_string"], "yes");
  EXPECT_EQ((*j)["word"], "hello world");
  EXPECT_EQ((*j)["version"], "1.2.3");
  EXPECT_EQ((*j)["literal"], "line one\nline two\n");
  EXPECT_EQ((*j)["tagged"], "12");
  EXPECT_TRUE((*j)["big"].is_number());
  EXPECT_EQ((*j)["seq"], json::parse(R"([1, "1", "a"])"));
  EXPECT_EQ((*j)["map"], json::parse(R"({"a": 1})"));
}

TEST(YamlToJsonTest, StringFieldsKeepTheirText) {
  auto j = YamlToJson("command: [run, 10, 1.50, true, 'x']\nenv: {A: 4}\nnodes: 4\n", "t.yaml",
                      SpecStringFields());
  ASSERT_TRUE(j.has_value()) << j.error().message;
  EXPECT_EQ((*j)["command"], json::parse(R"(["run", "10", "1.50", "true", "x"])"));
  EXPECT_EQ((*j)["env"]["A"], "4");
  EXPECT_EQ((*j)["nodes"], 4);  // other fields keep their types
}

TEST(YamlToJsonTest, EmptyDocumentIsNull) {
  auto j = YamlToJson("", "t.yaml");
  ASSERT_TRUE(j.has_value());
  EXPECT_TRUE(j->is_null());
}

}  // namespace
}  // namespace cohort::cli
