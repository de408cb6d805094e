// `cohort images` through a real head and agent: the agent's image cache (a fake Podman
// that keeps one JSON file per image, so no registry or real runtime is needed) listed per
// node, one image removed, the rest pruned, and the errors named.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace cohort::testing {
namespace {

TEST(Images, ListRemoveAndPruneThroughTheCli) {
  LocalCluster c;
  const std::string store = c.dir() + "/store", runtime = c.dir() + "/fake-podman";
  std::filesystem::create_directories(store);
  std::ofstream(runtime) << "#!/bin/sh\n"
                            "d='" << store << "'\n"
                            "if [ \"$1\" = images ]; then\n"
                            "  printf '['; first=1\n"
                            "  for f in \"$d\"/*.json; do [ -e \"$f\" ] || continue\n"
                            "    [ $first = 1 ] || printf ','; first=0; cat \"$f\"; done\n"
                            "  printf ']\\n'\n"
                            "elif [ \"$1\" = rmi ] && [ -e \"$d/$2.json\" ]; then rm \"$d/$2.json\"\n"
                            "else echo \"Error: $*: not known\" >&2; exit 1; fi\n";
  chmod(runtime.c_str(), 0755);
  for (const auto& [id, name] : std::vector<std::pair<std::string, std::string>>{
           {"aaaaaaaaaaaa01", "localhost/trainer:1.0"}, {"bbbbbbbbbbbb02", "localhost/old:1"}}) {
    std::ofstream(store + "/" + id + ".json") << json{{"Id", id}, {"Names", {name}}, {"Size", 4200000}}.dump();
  }
  c.StartHead();
  c.StartAgent("node-a", 1, 16, {"--container-runtime", "podman=" + runtime});
  c.WaitForNodes(1);

  auto list = Cohort(c, {"images"});
  ASSERT_EQ(list.status.Code(), 0) << list.errors;
  EXPECT_NE(list.output.find("NODE"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("localhost/trainer:1.0"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("localhost/old:1"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("4.2 MB"), std::string::npos) << list.output;

  auto rm = Cohort(c, {"images", "rm", "node-a", "localhost/old:1"});
  ASSERT_EQ(rm.status.Code(), 0) << rm.errors;
  EXPECT_NE(rm.output.find("node-a: removed localhost/old:1"), std::string::npos) << rm.output;
  EXPECT_FALSE(std::filesystem::exists(store + "/bbbbbbbbbbbb02.json"));
  auto again = Cohort(c, {"images", "rm", "node-a", "localhost/old:1"});
  EXPECT_EQ(again.status.Code(), 1);
  EXPECT_NE(again.errors.find("no image 'localhost/old:1' on this node"), std::string::npos) << again.errors;
  auto nowhere = Cohort(c, {"images", "ghost"});
  EXPECT_NE(nowhere.status.Code(), 0);
  EXPECT_NE(nowhere.errors.find("ghost"), std::string::npos) << nowhere.errors;

  auto prune = Cohort(c, {"images", "prune", "--unused-for", "0"});
  ASSERT_EQ(prune.status.Code(), 0) << prune.errors;
  EXPECT_NE(prune.output.find("node-a: removed localhost/trainer:1.0"), std::string::npos) << prune.output;
  auto empty = Cohort(c, {"--json", "images", "node-a"});
  ASSERT_EQ(empty.status.Code(), 0) << empty.errors;
  EXPECT_EQ(json::parse(empty.output)["nodes"]["node-a"], json::array()) << empty.output;
}

}  // namespace
}  // namespace cohort::testing
