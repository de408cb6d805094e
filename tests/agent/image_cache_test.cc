// The node's image cache (agent/image_cache.h): the runtimes' listings parsed, image
// references matched as the runtimes name them, and List/Remove/Prune against a fake
// runtime (a script that keeps one JSON file per image), with running tasks' images kept.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "agent/image_cache.h"
#include "common/clock.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

TEST(ImageCacheTest, ParsesPodmanAndDockerListings) {
  auto podman = ParseImageList("podman", R"([
    {"Id": "aaaa1111bbbb2222", "Names": ["localhost/trainer:1.0"], "Size": 4200000, "Created": 1700000000},
    {"Id": "cccc3333dddd4444", "Size": 10}])");
  ASSERT_TRUE(podman) << podman.error().message;
  ASSERT_EQ(podman->size(), 2u);
  EXPECT_EQ((*podman)[0].names, (std::vector<std::string>{"localhost/trainer:1.0"}));
  EXPECT_EQ((*podman)[0].size_bytes, 4200000);
  EXPECT_EQ((*podman)[0].created_ms, 1700000000000);
  EXPECT_TRUE((*podman)[1].names.empty()) << "a dangling image has no name";
  auto nothing = ParseImageList("podman", "");
  ASSERT_TRUE(nothing);
  EXPECT_TRUE(nothing->empty());
  EXPECT_FALSE(ParseImageList("podman", "{\"not\": \"a list\"}"));

  auto docker = ParseImageList("docker",
                               "{\"ID\":\"sha256:ee\",\"Repository\":\"busybox\",\"Tag\":\"latest\",\"Size\":\"4.26MB\"}\n"
                               "{\"ID\":\"sha256:ee\",\"Repository\":\"busybox\",\"Tag\":\"1.36\",\"Size\":\"4.26MB\"}\n"
                               "{\"ID\":\"sha256:ff\",\"Repository\":\"<none>\",\"Tag\":\"<none>\",\"Size\":\"512kB\"}\n");
  ASSERT_TRUE(docker) << docker.error().message;
  ASSERT_EQ(docker->size(), 2u) << "one image with two tags";
  EXPECT_EQ((*docker)[0].names, (std::vector<std::string>{"busybox:latest", "busybox:1.36"}));
  EXPECT_EQ((*docker)[0].size_bytes, 4260000);
  EXPECT_EQ((*docker)[1].size_bytes, 512000);
  EXPECT_FALSE(ParseImageList("docker", "not json\n"));
}

TEST(ImageCacheTest, ReferencesMatchAsTheRuntimesNameImages) {
  NodeImage i;
  i.id = "0123456789abcdef0123";
  i.names = {"localhost/trainer:1.0", "docker.io/library/busybox:latest"};
  EXPECT_TRUE(ImageMatches(i, "localhost/trainer:1.0"));
  EXPECT_TRUE(ImageMatches(i, "trainer:1.0"));
  EXPECT_TRUE(ImageMatches(i, "busybox"));
  EXPECT_TRUE(ImageMatches(i, "0123456789ab"));
  EXPECT_FALSE(ImageMatches(i, "0123"));
  EXPECT_FALSE(ImageMatches(i, "trainer:2.0"));
  EXPECT_FALSE(ImageMatches(i, "trainer"));  // :latest, which it is not
}

class FakeRuntimeTest : public ::testing::Test {
 protected:
  FakeRuntimeTest() {
    char tmpl[] = "/tmp/cohort-images-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ + "/images");
    runtime_ = dir_ + "/podman";
    std::ofstream(runtime_) << "#!/bin/sh\n"
                               "d='" << dir_ << "'\n"
                               "if [ \"$1\" = images ]; then\n"
                               "  printf '['; first=1\n"
                               "  for f in \"$d\"/images/*.json; do [ -e \"$f\" ] || continue\n"
                               "    [ $first = 1 ] || printf ','; first=0; cat \"$f\"; done\n"
                               "  printf ']\\n'\n"
                               "elif [ \"$1\" = rmi ]; then\n"
                               "  if [ -e \"$d/images/$2.json\" ]; then rm \"$d/images/$2.json\"; echo \"$2\" >> \"$d/removed\"\n"
                               "  else echo \"Error: $2: image not known\" >&2; exit 1; fi\n"
                               "else exit 125; fi\n";
    chmod(runtime_.c_str(), 0755);
  }
  ~FakeRuntimeTest() override { fs::remove_all(dir_); }
  void AddImage(const std::string& id, const std::string& name, int64_t created_s) {
    std::ofstream(dir_ + "/images/" + id + ".json")
        << json{{"Id", id}, {"Names", {name}}, {"Size", 1000000}, {"Created", created_s}}.dump();
  }
  std::string dir_, runtime_;
};

TEST_F(FakeRuntimeTest, ListRemoveAndPruneKeepWhatRunningTasksUse) {
  const int64_t old_s = NowUnixMs() / 1000 - 30 * 24 * 3600;
  AddImage("aaaaaaaaaaaa01", "localhost/used:1", old_s);
  AddImage("bbbbbbbbbbbb02", "localhost/idle:1", old_s);
  AddImage("cccccccccccc03", "localhost/recent:1", old_s);
  ImageCache cache({{"podman", runtime_}}, dir_ + "/scratch");
  const int64_t now = NowUnixMs();
  cache.NoteStarted("podman", "localhost/recent:1", now);
  const std::vector<std::pair<std::string, std::string>> running = {{"podman", "localhost/used:1"}};

  auto list = cache.List(running);
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].running_tasks, 1);
  EXPECT_EQ((*list)[1].running_tasks, 0);
  EXPECT_EQ((*list)[2].last_used_ms, now);

  auto busy = cache.Remove("localhost/used:1", running);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(busy.error().message.find("in use by 1 running task"), std::string::npos);
  auto missing = cache.Remove("localhost/nothing:1", running);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);

  // Unused for a day or more: the idle one only (the recent one ran now; the agent itself
  // started just now, so prune by age counts from then: 0 here takes every unused one).
  auto none = cache.Prune(24LL * 3600 * 1000, now, running);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty()) << "the agent started less than a day ago";
  auto pruned = cache.Prune(0, now + 1, running);
  ASSERT_TRUE(pruned) << pruned.error().message;
  ASSERT_EQ(pruned->size(), 2u);
  EXPECT_EQ((*pruned)[0].names[0], "localhost/idle:1");
  EXPECT_EQ((*pruned)[1].names[0], "localhost/recent:1");
  auto left = cache.List({});
  ASSERT_TRUE(left);
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].names[0], "localhost/used:1");
  auto removed = cache.Remove("localhost/used:1", {});
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_TRUE(cache.List({})->empty());

  ImageCache broken({{"podman", dir_ + "/no-such-runtime"}}, dir_ + "/scratch");
  auto err = broken.List({});
  ASSERT_FALSE(err);
  EXPECT_NE(err.error().message.find("no-such-runtime"), std::string::npos) << err.error().message;
}

}  // namespace
}  // namespace cohort::agent
