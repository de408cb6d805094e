// `cohort head` flags for fair share and preemption (head/core/share_state.h), as typed by
// a person ("7d", "10m"); Resolve checks them and fills the head's configuration.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "head/core/share_state.h"

namespace cohort::cli {

struct ShareFlags {
  head::core::SharesConfig config;  // weights and the preemptors cap, set straight by CLI11
  std::string max_age = "7d";
  std::string half_life = "7d";
  std::string preemption = "on";
  std::string min_runtime = "10m";
  std::string grace = "5m";

  void AddTo(CLI::App* sub);
  // The configuration; kInvalidArgument naming the flag and the value it refuses.
  Result<head::core::SharesConfig> Resolve() const;
};

}  // namespace cohort::cli
