// The client config file: written 0600 in a 0700 directory, read back, and a malformed or
// unknown line is an error naming the file and line.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/client_config.h"

namespace cohort {
namespace {

class ClientConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-client-config-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ClientConfigTest, WrittenPrivateAndReadBack) {
  const std::string path = dir_ + "/xdg/cohort/config";
  ASSERT_TRUE(WriteClientConfig(path, ClientConfig{"https://10.0.0.1:8470", "cohort_abc_def", "/etc/cohort/ca.crt"})
                  .has_value());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((dir_ + "/xdg/cohort").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto c = ReadClientConfig(path);
  ASSERT_TRUE(c.has_value()) << c.error().message;
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->head, "https://10.0.0.1:8470");
  EXPECT_EQ((*c)->token, "cohort_abc_def");
  EXPECT_EQ((*c)->ca, "/etc/cohort/ca.crt");
  EXPECT_FALSE(ReadClientConfig(dir_ + "/absent")->has_value());
  EXPECT_FALSE(WriteClientConfig(path, ClientConfig{"http://x\nhead: y", "", ""}).has_value());
  EXPECT_FALSE(WriteClientConfig(path, ClientConfig{"http://x", "", "/ca\ntoken: stolen"}).has_value());
}

TEST_F(ClientConfigTest, BadLinesNameTheFileAndLine) {
  const std::string path = dir_ + "/config";
  std::ofstream(path) << "# comment\nhead: 'http://h:1'\ntoken \"t\"\n";
  auto c = ReadClientConfig(path);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find(path + ":3"), std::string::npos) << c.error().message;
  std::ofstream(path) << "head: http://h:1\npassword: x\n";
  c = ReadClientConfig(path);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("unknown key 'password'"), std::string::npos) << c.error().message;
  std::ofstream(path) << "head: 'http://h:1'  # quoted\n";
  c = ReadClientConfig(path);
  ASSERT_TRUE(c.has_value() && c->has_value());
  EXPECT_EQ((*c)->head, "http://h:1");
}

TEST_F(ClientConfigTest, ThePathFollowsXdgThenHome) {
  const char* old_xdg = std::getenv("XDG_CONFIG_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_CONFIG_HOME", "/x/y", 1);
  EXPECT_EQ(ClientConfigPath(), "/x/y/cohort/config");
  unsetenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (home && *home == '/') {
    EXPECT_EQ(ClientConfigPath(), std::string(home) + "/.config/cohort/config");
  }
  if (old_xdg) setenv("XDG_CONFIG_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace cohort
