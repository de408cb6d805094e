// Runs the CLI in process against an address where no head listens, capturing stderr: for
// the CLI tests of flags and their errors (nothing here reaches a head).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli.h"

namespace cohort::cli::test_util {

struct Ran {
  int code = 0;
  std::string err;
};

inline Ran RunArgs(std::vector<std::string> args) {
  args.insert(args.begin(), {"cohort", "--head", "http://127.0.0.1:1"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  int code = RunCli(static_cast<int>(argv.size()), argv.data());
  return {code, ::testing::internal::GetCapturedStderr()};
}

}  // namespace cohort::cli::test_util
