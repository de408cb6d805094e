// The values of secret flags leave the process's command line once parsed
// (daemon_flags.h): `cohort agent --join-token VALUE` runs for days, and every user of
// the node reads its command line with ps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/daemon_flags.h"

namespace cohort::cli {
namespace {

std::vector<std::string> Hidden(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  HideSecretArguments(static_cast<int>(argv.size()), argv.data());
  // What /proc/PID/cmdline shows: the same memory, NUL-separated.
  std::vector<std::string> out;
  for (char* a : argv) out.emplace_back(a);
  return out;
}

TEST(HideSecretArguments, BlanksTheJoinTokenAndLoginTokenValuesOnly) {
  const std::string token = "cohort_0123456789ab_" + std::string(64, 'f');
  EXPECT_EQ(Hidden({"cohort", "agent", "--head", "https://h:8470", "--join-token", token, "--name", "n1"}),
            (std::vector<std::string>{"cohort", "agent", "--head", "https://h:8470", "--join-token",
                                      std::string(token.size(), '*'), "--name", "n1"}));
  EXPECT_EQ(Hidden({"cohort", "agent", "--join-token=" + token}),
            (std::vector<std::string>{"cohort", "agent", "--join-token=" + std::string(token.size(), '*')}));
  EXPECT_EQ(Hidden({"cohort", "login", "--head", "https://h", "--token", token}),
            (std::vector<std::string>{"cohort", "login", "--head", "https://h", "--token",
                                      std::string(token.size(), '*')}));
  // Other flags (one that starts the same included), a flag last with no value, and a
  // job's own command after "--" stay.
  const std::vector<std::string> kept = {"cohort", "agent", "--join-token-file", "/etc/cohort/join.token",
                                         "--tokenizer", "gpt2", "--token"};
  EXPECT_EQ(Hidden(kept), kept);
  const std::vector<std::string> job = {"cohort", "submit", "--", "curl", "--token", "abc"};
  EXPECT_EQ(Hidden(job), job);
}

}  // namespace
}  // namespace cohort::cli
