#include <map>

#include <gtest/gtest.h>

#include "comm/launch_env.h"

namespace cohort::comm {
namespace {

Result<LaunchEnv> Detect(const std::map<std::string, std::string>& vars) {
  return DetectLaunchEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, CohortAndTorchrunVariables) {
  auto e = Detect({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                   {"NODE_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                   {"COHORT_RENDEZVOUS", "http://head:8470/v1/rendezvous/t"}});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->source, "cohort");
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 4);
  EXPECT_EQ(e->node_rank, 1);
  EXPECT_EQ(e->store_url, "http://head:8470/v1/rendezvous/t");
  EXPECT_FALSE(e->hosts_store());
  // Without COHORT_RENDEZVOUS, rank 0 hosts a TCP store at MASTER_ADDR:MASTER_PORT.
  auto t = Detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h0"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->store_url, "tcp://h0:1234");
  EXPECT_TRUE(t->hosts_store());
}

TEST(LaunchEnv, TorchrunGroupRank) {
  auto e = Detect({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->node_rank, 1);
}

TEST(LaunchEnv, Slurm) {
  auto e = Detect({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}, {"SLURM_NODEID", "1"},
                   {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_ID", "123456"}});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->source, "slurm");
  EXPECT_EQ(e->rank, 6);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->local_world_size, 4);
  EXPECT_EQ(e->node_rank, 1);
  EXPECT_EQ(e->master_addr, "gpu07");
  EXPECT_EQ(e->master_port, 20000 + 123456 % 20000);
  EXPECT_EQ(e->store_url, "tcp://gpu07:" + std::to_string(20000 + 123456 % 20000));
}

TEST(LaunchEnv, OpenMpi) {
  auto e = Detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(e.has_value()) << e.error().message;
  EXPECT_EQ(e->source, "openmpi");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->node_rank, 1);
  EXPECT_EQ(e->store_url, "tcp://n0:29400");
  auto missing = Detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().field, "MASTER_ADDR");
}

TEST(LaunchEnv, SingleProcess) {
  auto e = Detect({});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->source, "single");
  EXPECT_EQ(e->world_size, 1);
  EXPECT_TRUE(e->store_url.empty());
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string field;
  };
  std::vector<Case> cases = {
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK"},
      {{{"RANK", "x"}, {"WORLD_SIZE", "4"}}, "RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}}, "MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR"},
      {{{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "8"}, {"SLURM_NODELIST", "a1"}}, "SLURM_PROCID"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "gpu[07"}}, "SLURM_NODELIST"},
  };
  for (const auto& c : cases) {
    auto e = Detect(c.vars);
    ASSERT_FALSE(e.has_value()) << c.field;
    EXPECT_EQ(e.error().field, c.field) << e.error().message;
  }
}

TEST(LaunchEnv, SlurmHostlists) {
  EXPECT_EQ(*FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(*FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(*FirstSlurmHost("gpu[07-09,12]"), "gpu07");
  EXPECT_EQ(*FirstSlurmHost("a[3],b[1-2]"), "a3");
  EXPECT_EQ(*FirstSlurmHost("login1,gpu[01-02]"), "login1");
  EXPECT_FALSE(FirstSlurmHost("").has_value());
  EXPECT_FALSE(FirstSlurmHost("gpu[x-2]").has_value());
}

}  // namespace
}  // namespace cohort::comm
