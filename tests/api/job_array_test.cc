// Job arrays' index sets (api/job_array.h), the spec's `array` field and the elements'
// environment.
#include <gtest/gtest.h>

#include "api/job_array.h"
#include "api/job_env.h"
#include "api/types.h"

namespace cohort::api {
namespace {

ArraySpec Parsed(std::string_view text) {
  auto r = ParseArraySpec(text, "array");
  EXPECT_TRUE(r) << text << ": " << r.error().ToString();
  return r ? *r : ArraySpec{};
}

std::string ErrorOf(std::string_view text) {
  auto r = ParseArraySpec(text, "array");
  EXPECT_FALSE(r) << text << " parsed as " << (r ? r->ToString() : "");
  return r ? "" : r.error().ToString();
}

TEST(JobArrayTest, SlurmSyntax) {
  ArraySpec a = Parsed("0-999%16");
  EXPECT_EQ(a.indices.size(), 1000);
  EXPECT_EQ(a.throttle, 16);
  EXPECT_EQ(a.ToString(), "0-999%16");
  EXPECT_EQ(Parsed("0-99:2").indices.size(), 50);
  EXPECT_EQ(Parsed("0-99:2").ToString(), "0-98:2");
  EXPECT_TRUE(Parsed("0-99:2").indices.contains(98));
  EXPECT_FALSE(Parsed("0-99:2").indices.contains(97));
  EXPECT_EQ(Parsed("7,1,3,5-6").ToString(), "1,3,5-7");
  EXPECT_EQ(Parsed("4").indices.size(), 1);
  EXPECT_EQ(Parsed("0-99999").indices.ranges().size(), 1u);  // compact whatever the size
}

TEST(JobArrayTest, ErrorsNameTheProblem) {
  EXPECT_NE(ErrorOf("0-").find("no last index"), std::string::npos);
  EXPECT_NE(ErrorOf("5-1").find("ends (1) before it starts (5)"), std::string::npos);
  EXPECT_NE(ErrorOf("0-9%0").find("throttle must be 1"), std::string::npos);
  EXPECT_NE(ErrorOf("%0").find("throttle"), std::string::npos);
  EXPECT_NE(ErrorOf("0-9:0").find("step must be at least 1"), std::string::npos);
  EXPECT_NE(ErrorOf("1,,2").find("empty part"), std::string::npos);
  EXPECT_NE(ErrorOf("0-5,3").find("overlap"), std::string::npos);
  EXPECT_NE(ErrorOf("a-3").find("not a whole number"), std::string::npos);
  EXPECT_NE(ErrorOf("0-10000000").find("indices must be 0..9999999"), std::string::npos);
  EXPECT_NE(ErrorOf("0-2000000").find("more than 1000000 elements"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("empty"), std::string::npos);
  EXPECT_NE(ErrorOf("0-9%x").find("whole number"), std::string::npos);
}

TEST(JobArrayTest, TakeRemoveAndAddKeepTheSetCompact) {
  ArrayIndexSet s = Parsed("0-9,20-30:5").indices;
  EXPECT_EQ(s.TakeFirst(3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(s.ToString(), "3-9,20-30:5");
  EXPECT_TRUE(s.Remove(5));
  EXPECT_FALSE(s.Remove(5));
  EXPECT_FALSE(s.Remove(21));
  EXPECT_EQ(s.ToString(), "3-4,6-9,20-30:5");
  EXPECT_TRUE(s.Remove(25));
  EXPECT_EQ(s.ToString(), "3-4,6-9,20,30");
  s.Add(2);
  s.Add(5);
  EXPECT_EQ(s.ToString(), "2-9,20,30");
  s.Add(25);
  EXPECT_EQ(s.ToString(), "2-9,20-30:5");
  EXPECT_EQ(s.TakeFirst(100).size(), 11u);
  EXPECT_TRUE(s.empty());
  // Adding inside a stepped range's span splits it.
  ArrayIndexSet t = Parsed("0-8:4").indices;
  t.Add(5);
  EXPECT_EQ(t.size(), 4);
  EXPECT_TRUE(t.contains(5) && t.contains(4) && t.contains(8) && !t.contains(6));
  // The canonical text reads back to the same set.
  auto again = ArrayIndexSet::Parse(t.ToString(), "array");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->size(), 4);
  EXPECT_TRUE(again->contains(5));
}

TEST(JobArrayTest, SpecAndJobRoundTrip) {
  auto spec = JobSpecFromJson({{"command", {"/bin/true"}}, {"array", "0-999%16"}});
  ASSERT_TRUE(spec) << spec.error().ToString();
  EXPECT_EQ(spec->array, "0-999%16");
  auto bad = JobSpecFromJson({{"command", {"/bin/true"}}, {"array", "5-1"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "array");
  Job parent;
  parent.id = 12;
  parent.spec = *spec;
  parent.array_left = "5-999";
  parent.array_cancelled = 2;
  auto back = JobFromJson(ToJson(parent));
  ASSERT_TRUE(back) << back.error().ToString();
  EXPECT_EQ(back->array_left, "5-999");
  EXPECT_EQ(back->array_cancelled, 2);
  Job element;
  element.id = 13;
  element.spec.command = {"/bin/true"};
  element.spec.name = "x";
  element.spec.user = "alice";
  element.array_job_id = 12;
  element.array_task_id = 7;
  auto eback = JobFromJson(ToJson(element));
  ASSERT_TRUE(eback) << eback.error().ToString();
  EXPECT_EQ(eback->array_job_id, 12);
  EXPECT_EQ(eback->array_task_id, 7);
  EXPECT_FALSE(ToJson(Job{}).contains("array_job_id"));  // single jobs are stored as before
}

TEST(JobArrayTest, ElementsGetTheirIndexInTheEnvironment) {
  Job job;
  job.id = 40;
  job.spec.command = {"/bin/true"};
  job.array_job_id = 12;
  job.array_task_id = 7;
  NodeAllocation na;
  na.node = "n1";
  na.tasks = {{0, 0, {}}};
  job.allocation.nodes = {na};
  auto env = TaskEnvironment(job, na, na.tasks[0], TaskEnvOptions{});
  EXPECT_EQ(env["COHORT_ARRAY_JOB_ID"], "12");
  EXPECT_EQ(env["COHORT_ARRAY_TASK_ID"], "7");
  EXPECT_EQ(env["SLURM_ARRAY_JOB_ID"], "12");
  EXPECT_EQ(env["SLURM_ARRAY_TASK_ID"], "7");
  job.array_job_id = 0;
  job.array_task_id = -1;
  EXPECT_FALSE(TaskEnvironment(job, na, na.tasks[0], TaskEnvOptions{}).contains("COHORT_ARRAY_TASK_ID"));
}

}  // namespace
}  // namespace cohort::api
