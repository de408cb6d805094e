// JobSpec validation: every bad field gets its own error that names it.
#include <gtest/gtest.h>

#include "api/types.h"

namespace cohort::api {
namespace {

json Valid() { return json{{"command", {"python3", "train.py"}}}; }

TEST(JobSpec, DefaultsAreFilledIn) {
  auto s = JobSpecFromJson(Valid());
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->name, "python3");
  EXPECT_EQ(s->user, "anonymous");
  EXPECT_EQ(s->nodes, 1);
  EXPECT_EQ(s->tasks_per_node, 1);
  EXPECT_EQ(s->gpus_per_node, 0);
  EXPECT_EQ(s->cpus_per_task, 1);
  EXPECT_EQ(s->placement, Placement::kPack);
  EXPECT_EQ(s->world_size(), 1);
}

TEST(JobSpec, RoundTripsThroughJson) {
  json j = {{"command", {"/bin/echo", "a b"}}, {"name", "n1"}, {"user", "alice"}, {"env", {{"X", "1"}}},
            {"workdir", "/tmp"}, {"nodes", 2}, {"tasks_per_node", 4}, {"gpus_per_node", 8},
            {"cpus_per_task", 3}, {"priority", -5}, {"placement", "spread"}, {"max_restarts", 2},
            {"time_limit_s", 3600}, {"progress_timeout_s", 120}, {"min_nodes", 1},
            {"checkpoint_signal", "USR1"}, {"checkpoint_before_limit_s", 120}, {"team", "ml"},
            {"container", {{"image", "registry.example.com:5000/team/trainer:1.2@sha256:"
                                     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
                           {"runtime", "docker"}}}};
  auto s = JobSpecFromJson(j);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->gpus_per_task(), 2);
  auto again = JobSpecFromJson(ToJson(*s));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(ToJson(*again), ToJson(*s));
  EXPECT_EQ(ToJson(*s), j);
}

struct BadCase {
  const char* patch;  // merged into a valid spec
  const char* field;
  const char* text;
};

class JobSpecBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(JobSpecBad, NamesTheField) {
  json j = Valid();
  j.merge_patch(json::parse(GetParam().patch));
  auto s = JobSpecFromJson(j);
  ASSERT_FALSE(s.has_value()) << GetParam().patch;
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().field, GetParam().field) << s.error().message;
  EXPECT_NE(s.error().message.find(GetParam().text), std::string::npos) << s.error().message;
  EXPECT_EQ(s.error().message.rfind(GetParam().field, 0), 0u) << "message must start with the field: " << s.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, JobSpecBad,
    ::testing::Values(
        BadCase{R"({"command": null, "cmd": ["x"]})", "command", "is required"},
        BadCase{R"({"command": []})", "command", "must name a program"},
        BadCase{R"({"command": [""]})", "command[0]", "empty"},
        BadCase{R"({"command": ["a", 3]})", "command[1]", "must be a string"},
        BadCase{R"({"nodes": 0})", "nodes", "between 1 and 4096, got 0"},
        BadCase{R"({"nodes": -2})", "nodes", "got -2"},
        BadCase{R"({"nodes": 1.5})", "nodes", "must be an integer"},
        BadCase{R"({"nodes": 99999999999999999999})", "nodes", "must be"},
        BadCase{R"({"tasks_per_node": 0})", "tasks_per_node", "between 1 and 1024"},
        BadCase{R"({"gpus_per_node": -1})", "gpus_per_node", "between 0 and 1024, got -1"},
        BadCase{R"({"gpus_per_node": 100000})", "gpus_per_node", "got 100000"},
        BadCase{R"({"gpus_per_node": 3, "tasks_per_node": 2})", "gpus_per_node", "split evenly"},
        BadCase{R"({"cpus_per_task": -1})", "cpus_per_task", "between 0"},
        BadCase{R"({"priority": 1001})", "priority", "between -1000 and 1000"},
        BadCase{R"({"min_nodes": -1})", "min_nodes", "min_nodes"},
        BadCase{R"({"checkpoint_signal": "STOP"})", "checkpoint_signal", "USR1, USR2, HUP, INT, TERM"},
        BadCase{R"({"checkpoint_before_limit_s": 60, "time_limit_s": 0})", "checkpoint_before_limit_s",
                "time_limit_s is 0 (unlimited)"},
        BadCase{R"({"checkpoint_before_limit_s": "2m"})", "checkpoint_before_limit_s", "write 120"},
        BadCase{R"({"checkpoint_before_limit_s": -1})", "checkpoint_before_limit_s", "between 0"},
        BadCase{R"({"placement": "best"})", "placement", "'pack' or 'spread'"},
        BadCase{R"({"container": {"image": ""}})", "container.image", "is empty"},
        BadCase{R"({"container": {}})", "container.image", "required"},
        BadCase{R"({"container": "busybox"})", "container", "object"},
        BadCase{R"({"container": {"image": "--privileged"}})", "container.image", "lowercase letters and digits"},
        BadCase{R"({"container": {"image": "Busybox"}})", "container.image", "'Busybox' must be lowercase"},
        BadCase{R"({"container": {"image": "busybox:-x"}})", "container.image", "the tag '-x'"},
        BadCase{R"({"container": {"image": "busybox@sha256:xyz"}})", "container.image", "digest"},
        BadCase{R"({"container": {"image": "a..b/c"}})", "container.image", "'a..b' is not a registry host"},
        BadCase{R"({"container": {"image": "busybox", "runtime": "lxc"}})", "container.runtime",
                "'podman' or 'docker', got 'lxc'"},
        BadCase{R"({"container": {"image": "busybox", "privileged": true}})", "container.privileged", "unknown"},
        BadCase{R"({"max_restarts": -1})", "max_restarts", "between 0"},
        BadCase{R"({"time_limit_s": -5})", "time_limit_s", "between 0"},
        BadCase{R"({"progress_timeout_s": -1})", "progress_timeout_s", "between 0"},
        BadCase{R"({"progress_timeout_s": "2m"})", "progress_timeout_s", "progress_timeout_s"},
        BadCase{R"({"name": "a/b"})", "name", "letters, digits"},
        BadCase{R"({"user": ""})", "user", "1-64 characters"},
        BadCase{R"({"env": {"WORLD_SIZE": "2"}})", "env.WORLD_SIZE", "cannot be overridden"},
        BadCase{R"({"env": {"COHORT_JOB_ID": "2"}})", "env.COHORT_JOB_ID", "cannot be overridden"},
        BadCase{R"({"env": {"1BAD": "2"}})", "env.1BAD", "not a valid environment variable"},
        BadCase{R"({"env": {"OK": 2}})", "env.OK", "must be a string"},
        BadCase{R"({"env": ["A=1"]})", "env", "object of strings"},
        BadCase{R"({"workdir": "tmp"})", "workdir", "absolute path"},
        BadCase{R"({"workdir": "/tmp/a\u0000b"})", "workdir", "NUL byte"},
        BadCase{R"({"workdir": "/home/../etc"})", "workdir", "must not have '..' components"},
        BadCase{R"({"nodes": -99999999999999999999})", "nodes", "must be an integer"},
        BadCase{R"({"nodes": 1e308})", "nodes", "must be an integer"},
        BadCase{R"({"priority": 18446744073709551615})", "priority", "between -1000 and 1000"},
        BadCase{R"({"time_limit_s": 9223372036854775808})", "time_limit_s", "must be between 0"},
        BadCase{R"({"gpu_per_node": 1})", "gpu_per_node", "did you mean 'gpus_per_node'"},
        BadCase{R"({"colour": 1})", "colour", "unknown field 'colour'"}));

// umask travels as the octal text umask prints, only when set; anything else names it.
TEST(JobSpec, UmaskIsTheOctalTextUmaskPrints) {
  auto s = JobSpecFromJson(json{{"command", {"true"}}, {"umask", "0027"}});
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->umask, 027);
  EXPECT_EQ(ToJson(*s)["umask"], "0027");
  EXPECT_EQ(JobSpecFromJson(json{{"command", {"true"}}, {"umask", "7"}})->umask, 07);
  EXPECT_FALSE(ToJson(JobSpecFromJson(json{{"command", {"true"}}}).value()).contains("umask"));
  for (const json& bad : {json("0028"), json("01777"), json(""), json("u=rwx"), json(18), json("00777")}) {
    auto r = JobSpecFromJson(json{{"command", {"true"}}, {"umask", bad}});
    ASSERT_FALSE(r.has_value()) << bad.dump();
    EXPECT_EQ(r.error().field, "umask") << r.error().message;
  }
}

TEST(JobSpec, TensorGroupsMustFitInsideANode) {
  json ok = Valid();
  ok["tasks_per_node"] = 8;
  ok["tensor_group_size"] = 4;
  auto s = JobSpecFromJson(ok);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_EQ(s->tensor_group_size, 4);
  EXPECT_EQ(ToJson(*s)["tensor_group_size"], 4);
  EXPECT_FALSE(ToJson(*JobSpecFromJson(Valid())).contains("tensor_group_size"));

  json bad = Valid();
  bad["nodes"] = 2;
  bad["tasks_per_node"] = 6;
  bad["tensor_group_size"] = 4;
  auto e = JobSpecFromJson(bad);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kUnsatisfiable);  // HTTP 422
  EXPECT_EQ(e.error().field, "tensor_group_size");
  EXPECT_EQ(e.error().message,
            "tensor_group_size: a tensor group of 4 tasks must stay inside one node, but "
            "tasks_per_node 6 is not a multiple of 4 (ranks fill nodes 6 at a time)");
  bad["tensor_group_size"] = -1;
  EXPECT_EQ(JobSpecFromJson(bad).error().code, ErrorCode::kInvalidArgument);
}

// What people write in a spec file by habit: a duration in a seconds field, GB for GPU
// memory, one array index as a number. Each is read or answered with what to write.
TEST(JobSpec, HabitualValuesAreReadOrAnsweredWithWhatToWrite) {
  json dur = Valid();
  dur["time_limit_s"] = "2h";
  auto e = JobSpecFromJson(dur);
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().field, "time_limit_s");
  EXPECT_EQ(e.error().message, "time_limit_s: is whole seconds, got \"2h\": write 7200 (the -t/--time-limit flag takes "
                               "a duration such as 2h)");
  dur.erase("time_limit_s");
  dur["progress_timeout_s"] = "10m";
  EXPECT_NE(JobSpecFromJson(dur).error().message.find("write 600"), std::string::npos);
  dur["progress_timeout_s"] = "soon";
  EXPECT_NE(JobSpecFromJson(dur).error().message.find("must be an integer"), std::string::npos);

  json mem = Valid();
  mem["gpu_memory"] = "20GB";
  e = JobSpecFromJson(mem);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("'20GB' must be a size in binary units: write 20GiB (or 20G)"), std::string::npos)
      << e.error().message;

  json one = Valid();
  one["array"] = 7;
  auto a = JobSpecFromJson(one);
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ(a->array, "7");
  one["array"] = 1.5;
  EXPECT_EQ(JobSpecFromJson(one).error().field, "array");
}

TEST(JobSpec, NotAnObject) {
  auto s = JobSpecFromJson(json::array());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("JSON object"), std::string::npos);
}

TEST(Heartbeat, ReportsAreBounded) {
  json hb = {{"incarnation", "abc"}, {"tasks", json::array()}};
  for (int i = 0; i < 65537; ++i) hb["tasks"].push_back(json::object());
  auto many = HeartbeatFromJson(hb);
  ASSERT_FALSE(many.has_value());
  EXPECT_EQ(many.error().message, "tasks: must be an array of at most 65536 task reports");

  // A long task error is kept to its first 4 KiB (refusing it would refuse the node's
  // heartbeats), cut between UTF-8 characters.
  json task = {{"job", 1}, {"attempt", 0}, {"rank", 0}, {"running", false}, {"error", std::string(4092, 'a') + "\xc3\xa9zzz"}};
  auto cut = HeartbeatFromJson({{"incarnation", "abc"}, {"tasks", json::array({task})}});
  ASSERT_TRUE(cut.has_value()) << cut.error().message;
  EXPECT_EQ(cut->tasks[0].error, std::string(4092, 'a') + "...");

  json gpu = {{"index", 0}, {"name", std::string(300, 'g')}};
  auto reg = RegistrationFromJson({{"name", "n1"}, {"address", "10.0.0.1"}, {"incarnation", "i1"}, {"gpus", json::array({gpu})}});
  ASSERT_FALSE(reg.has_value());
  EXPECT_EQ(reg.error().message, "gpus[0].name: must be at most 256 bytes, got 300");
  auto version = RegistrationFromJson(
      {{"name", "n1"}, {"address", "10.0.0.1"}, {"incarnation", "i1"}, {"version", std::string(65, 'v')}});
  ASSERT_FALSE(version.has_value());
  EXPECT_EQ(version.error().field, "version");
}

TEST(Heartbeat, RoundTripAndValidation) {
  Heartbeat hb;
  hb.incarnation = "abc123";
  hb.applied_version = 42;
  hb.free_ports = {30000, 30001};
  TaskReport t;
  t.job = 7;
  t.attempt = 1;
  t.rank = 3;
  t.running = false;
  t.exit_code = 2;
  t.gpus = {0, 1};
  t.error = "boom";
  hb.tasks.push_back(t);
  auto back = HeartbeatFromJson(ToJson(hb));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), ToJson(hb));

  json bad = ToJson(hb);
  bad["tasks"][0]["rank"] = -1;
  auto r = HeartbeatFromJson(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "tasks[0].rank");
}

// Rolling upgrades: an agent one version newer than its head sends fields the head does
// not know (as yesterday's cpu_list was), and a head newer than its agents sends new timing.
// Those are dropped, never stored or echoed: the decoded message encodes as if they had
// never been sent. What the reader does know is checked as strictly as before.
TEST(AgentProtocol, UnknownFieldsOfANewerVersionAreIgnored) {
  Heartbeat hb;
  hb.incarnation = "abc123";
  hb.applied_version = 3;
  TaskReport t;
  t.job = 7;
  t.rank = 1;
  t.running = true;
  t.cpu_list = "2-3";
  hb.tasks.push_back(t);
  GpuReport g;
  g.index = 0;
  g.telemetry.utilization = 0.5;
  hb.gpus.push_back(g);
  json newer = ToJson(hb);
  newer["numa_nodes"] = json::array({0, 1});
  newer["tasks"][0]["cpu_quota"] = {{"period_us", 100000}, {"secret", "x"}};
  newer["gpus"][0]["nvlink_errors"] = 4;
  auto back = HeartbeatFromJson(newer);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), ToJson(hb));
  EXPECT_EQ(back->tasks[0].cpu_list, "2-3");

  Registration reg;
  reg.name = "n1";
  reg.address = "10.0.0.1";
  reg.incarnation = "i1";
  reg.cpus = 8;
  Gpu gpu;
  gpu.index = 0;
  gpu.name = "H100";
  reg.gpus.push_back(gpu);
  json newer_reg = ToJson(reg);
  newer_reg["cpu_topology"] = "2 sockets";
  newer_reg["gpus"][0]["fabric_id"] = "f0";
  auto reg_back = RegistrationFromJson(newer_reg);
  ASSERT_TRUE(reg_back.has_value()) << reg_back.error().message;
  EXPECT_EQ(ToJson(*reg_back), ToJson(reg));

  AgentTiming timing;
  timing.heartbeat_interval_ms = 250;
  json newer_timing = ToJson(timing);
  newer_timing["lease_jitter_ms"] = 20;
  auto timing_back = AgentTimingFromJson(newer_timing);
  ASSERT_TRUE(timing_back.has_value()) << timing_back.error().message;
  EXPECT_EQ(ToJson(*timing_back), ToJson(timing));
}

TEST(AgentProtocol, KnownFieldsAreStillCheckedAndNamed) {
  json task = {{"job", 1}, {"attempt", 0}, {"rank", 0}, {"running", true}, {"future", 1}};
  auto field_of = [](Result<Heartbeat> r) { return r ? std::string("(accepted)") : r.error().field; };
  json hb = {{"incarnation", "abc"}, {"tasks", json::array({task})}, {"future", true}};
  ASSERT_EQ(field_of(HeartbeatFromJson(hb)), "(accepted)");
  json wrong_type = hb;
  wrong_type["tasks"][0]["cpu_list"] = 5;
  EXPECT_EQ(field_of(HeartbeatFromJson(wrong_type)), "tasks[0].cpu_list");
  json out_of_range = hb;
  out_of_range["tasks"][0]["exit_code"] = 300;
  EXPECT_EQ(field_of(HeartbeatFromJson(out_of_range)), "tasks[0].exit_code");
  json missing = hb;
  missing.erase("incarnation");
  EXPECT_EQ(field_of(HeartbeatFromJson(missing)), "incarnation");
  json missing_in_task = hb;
  missing_in_task["tasks"][0].erase("running");
  EXPECT_EQ(field_of(HeartbeatFromJson(missing_in_task)), "tasks[0].running");
  json gpu_wrong = hb;
  gpu_wrong["gpus"] = json::array({{{"index", 0}, {"utilization", "high"}, {"future", 1}}});
  EXPECT_EQ(field_of(HeartbeatFromJson(gpu_wrong)), "gpus[0].utilization");

  json reg = {{"name", "n1"}, {"address", "10.0.0.1"}, {"incarnation", "i1"}, {"future", 1}, {"cpus", "many"}};
  auto r = RegistrationFromJson(reg);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().field, "cpus");
  auto t = AgentTimingFromJson({{"heartbeat_interval_ms", "fast"}, {"future", 1}});
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().field, "timing.heartbeat_interval_ms");
}

// The head's heartbeat reply: a newer head's field in a task launch's container is dropped
// (refused, it would fail every reply and the node would go DOWN); the container's known
// fields are checked as in a job spec, naming the launch.
TEST(AgentProtocol, ANewerHeadsContainerFieldIsIgnoredAndKnownOnesChecked) {
  HeartbeatReply reply;
  reply.version = 4;
  TaskLaunch l;
  l.job = 9;
  l.command = {"python", "train.py"};
  l.container.image = "localhost/trainer:1.0";
  l.container.runtime = "docker";
  reply.tasks.push_back(l);
  json newer = ToJson(reply);
  newer["tasks"][0]["container"]["pull_policy"] = "always";
  newer["tasks"][0]["container"]["mounts"] = json::array({"/data"});
  auto back = HeartbeatReplyFromJson(newer);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), ToJson(reply)) << "dropped, not kept";

  auto field_of = [](Result<HeartbeatReply> r) { return r ? std::string("(accepted)") : r.error().field; };
  json wrong_type = newer;
  wrong_type["tasks"][0]["container"]["image"] = 5;
  EXPECT_EQ(field_of(HeartbeatReplyFromJson(wrong_type)), "tasks[0].container.image");
  json missing = newer;
  missing["tasks"][0]["container"].erase("image");
  EXPECT_EQ(field_of(HeartbeatReplyFromJson(missing)), "tasks[0].container.image");
  json bad_runtime = newer;
  bad_runtime["tasks"][0]["container"]["runtime"] = "lxc";
  EXPECT_EQ(field_of(HeartbeatReplyFromJson(bad_runtime)), "tasks[0].container.runtime");
}

// Every field of the reply, not only the container, is checked and named as the head checks
// a heartbeat's; a newer head's unknown fields are dropped at every level.
TEST(AgentProtocol, EveryReplyFieldIsCheckedAndNamedAndUnknownOnesDropped) {
  HeartbeatReply reply;
  reply.version = 7;
  TaskLaunch l;
  l.job = 3;
  l.attempt = 1;
  l.rank = 2;
  l.command = {"sleep", "1"};
  l.env = {{"A", "1"}};
  l.gpus = {0, 1};
  l.cpus = 4;
  l.user = "alice";
  l.checkpoint_requested = true;
  l.checkpoint_signal = 10;
  reply.tasks.push_back(l);
  reply.acked.push_back({5, 0, 1});
  json wire = ToJson(reply);
  json newer = wire;
  newer["future"] = 1;
  newer["tasks"][0]["future"] = {{"x", 1}};
  newer["acked"][0]["future"] = true;
  newer["timing"]["future"] = "y";
  auto back = HeartbeatReplyFromJson(newer);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), wire);

  auto field_of = [](Result<HeartbeatReply> r) { return r ? std::string("(accepted)") : r.error().field; };
  auto with = [&](const std::string& pointer, json value) {
    json j = wire;
    j[json::json_pointer(pointer)] = std::move(value);
    return field_of(HeartbeatReplyFromJson(j));
  };
  EXPECT_EQ(with("/version", "7"), "version");
  EXPECT_EQ(with("/tasks", json::object()), "tasks");
  EXPECT_EQ(with("/tasks/0/job", 0), "tasks[0].job");
  EXPECT_EQ(with("/tasks/0/command", "sleep 1"), "tasks[0].command");
  EXPECT_EQ(with("/tasks/0/env", json::array({"A=1"})), "tasks[0].env");
  EXPECT_EQ(with("/tasks/0/gpus/1", "one"), "tasks[0].gpus");
  EXPECT_EQ(with("/tasks/0/cpus", -1), "tasks[0].cpus");
  EXPECT_EQ(with("/tasks/0/checkpoint_signal", 300), "tasks[0].checkpoint_signal");
  EXPECT_EQ(with("/tasks/0/hold", "yes"), "tasks[0].hold");
  EXPECT_EQ(with("/acked/0/rank", "2"), "acked[0].rank");
  EXPECT_EQ(with("/acked", 5), "acked");
  json no_tasks = wire;
  no_tasks.erase("tasks");
  EXPECT_EQ(field_of(HeartbeatReplyFromJson(no_tasks)), "tasks");
}

TEST(Job, RoundTripsEveryField) {
  Job j;
  j.id = 12;
  j.spec = *JobSpecFromJson(Valid());
  j.state = JobState::kFailed;
  j.reason = "rank 1 exited";
  j.attempt = 2;
  j.submit_ms = 1;
  j.start_ms = 2;
  j.end_ms = 3;
  j.exit_code = 7;
  j.allocation.master_addr = "10.0.0.1";
  j.allocation.master_port = 29500;
  j.allocation.nodes.push_back({"n1", "10.0.0.1", 0, {0, 1}, 2, {{0, 0, {0}}, {1, 1, {1}}}, 99});
  j.exits.push_back({1, "n1", 7, 0, "err", 5});
  j.history.push_back({2, 2, 3, {"n1"}, "rank 1 exited"});
  auto back = JobFromJson(ToJson(j));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(ToJson(*back), ToJson(j));
}

// A move request (drain --now) is stored with its running job; a job that is not running
// loads without one, and a negative deadline is a damaged record.
TEST(Job, MoveRequestRoundTripsForARunningJobOnly) {
  Job j;
  j.id = 3;
  j.spec = *JobSpecFromJson(Valid());
  j.state = JobState::kRunning;
  j.attempt = 1;
  j.move = MoveRequest{"n2", 1000, 61000, 40, false, 0, ""};
  json stored = ToJson(j);
  ASSERT_TRUE(stored.contains("move")) << stored.dump();
  auto back = JobFromJson(stored);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  ASSERT_TRUE(back->move.has_value());
  EXPECT_EQ(back->move->node, "n2");
  EXPECT_EQ(back->move->deadline_ms, 61000);
  EXPECT_EQ(back->move->baseline_checkpoint, 40);
  EXPECT_EQ(ToJson(*back), stored);

  json ended = stored;
  ended["state"] = "SUCCEEDED";
  back = JobFromJson(ended);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_FALSE(back->move.has_value());

  json bad = stored;
  bad["move"]["deadline_ms"] = -5;
  back = JobFromJson(bad);
  ASSERT_FALSE(back.has_value());
  EXPECT_NE(back.error().message.find("move.deadline_ms"), std::string::npos) << back.error().message;

  j.move.reset();
  EXPECT_FALSE(ToJson(j).contains("move"));
}

}  // namespace
}  // namespace cohort::api
