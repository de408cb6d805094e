// The data plane runs from its module (apps/cohort/data_plane_module.h): the head, the
// agents and the CLI map none of the GPU and collective libraries; the data-plane
// commands still run, from the module beside the binary; and a binary without its module
// says which file it could not load.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "harness.h"

namespace cohort::testing {
namespace {

// The libraries only the data plane needs; "" when `pid` maps none of them.
std::string DataPlaneLibrariesMapped(int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line, found;
  for (const char* lib : {"libcudart", "libcublas", "libnccl", "libgloo", "libopenblas", "libcohort-data"}) {
    maps.clear();
    maps.seekg(0);
    while (std::getline(maps, line)) {
      if (line.find(lib) != std::string::npos) {
        found += line.substr(line.rfind(' ') + 1) + "\n";
        break;
      }
    }
  }
  return found;
}

TEST(DataPlaneModule, HeadAndAgentsMapNoDataPlaneLibraries) {
  LocalCluster c;
  ASSERT_NO_FATAL_FAILURE(c.StartHead());
  ASSERT_NO_FATAL_FAILURE(c.StartAgent("n1", 2));
  ASSERT_NO_FATAL_FAILURE(c.WaitForNodes(1));
  EXPECT_EQ(DataPlaneLibrariesMapped(c.head().pid()), "");
  EXPECT_EQ(DataPlaneLibrariesMapped(c.agent("n1").pid()), "");
}

TEST(DataPlaneModule, EveryDataPlaneCommandRunsFromTheModule) {
  LocalCluster c;
  auto help = RunCli(c, {COHORT_BINARY, "--help"});
  ASSERT_TRUE(help.status.Success()) << help.errors;
  for (const std::string name : {"bench", "train", "tokenize", "serve"}) {
    EXPECT_NE(help.output.find("  " + name + " "), std::string::npos) << name << " not listed:\n" << help.output;
    auto r = RunCli(c, {COHORT_BINARY, name, "--help"});
    EXPECT_TRUE(r.status.Success()) << name << ": " << r.errors;
    EXPECT_NE(r.output.find("Usage: cohort " + name), std::string::npos) << r.output;
  }
  // `cohort help COMMAND` is the command's --help: its options, not the bare name the
  // parser knows ("Usage: train [OPTIONS]" and -h alone).
  for (const std::string name : {"bench", "train", "tokenize"}) {
    auto r = RunCli(c, {COHORT_BINARY, "help", name});
    EXPECT_TRUE(r.status.Success()) << name << ": " << r.errors;
    EXPECT_NE(r.output.find("Usage: cohort " + name + " [OPTIONS]"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("-h,--help"), std::string::npos) << r.output;
  }
  auto train = RunCli(c, {COHORT_BINARY, "help", "train"});
  EXPECT_NE(train.output.find("-c,--config"), std::string::npos) << train.output;
}

TEST(DataPlaneModule, ABinaryWithoutItsModuleSaysWhichFileItCouldNotLoad) {
  LocalCluster c;
  // A link to the binary in a directory without the module: /proc/self/exe names the link.
  const std::string dir = c.dir() + "/bin";
  std::filesystem::create_directories(dir);
  const std::string exe = dir + "/cohort";
  std::error_code ec;
  std::filesystem::create_hard_link(COHORT_BINARY, exe, ec);
  if (ec) std::filesystem::copy_file(COHORT_BINARY, exe, ec);
  ASSERT_FALSE(ec) << ec.message();
  auto r = RunCli(c, {exe, "train", "--help"});
  EXPECT_EQ(r.status.exit_code, 1) << r.output << r.errors;
  EXPECT_NE(r.errors.find("libcohort-data.so, which cannot be loaded"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find(dir + "/libcohort-data.so: not there"), std::string::npos) << r.errors;
  // The control plane does not need it, `cohort serve`'s service verbs included.
  auto version = RunCli(c, {exe, "--version"});
  EXPECT_TRUE(version.status.Success()) << version.errors;
  auto services = RunCli(c, {exe, "serve", "ls", "--help"});
  EXPECT_TRUE(services.status.Success()) << services.errors;
  EXPECT_NE(services.output.find("Usage: cohort serve ls"), std::string::npos) << services.output;
  auto replica = RunCli(c, {exe, "serve", "--help"});
  EXPECT_EQ(replica.status.exit_code, 1) << "a replica runs in the module: " << replica.output;
}

}  // namespace
}  // namespace cohort::testing
