// Logging: thin names over spdlog so modules do not depend on its API directly.
// Thread-safe (spdlog's default logger is).
#pragma once

#include <spdlog/spdlog.h>

namespace cohort {

// Sets the process-wide level from "trace|debug|info|warn|error|off" and a component tag
// that prefixes every line ("head", "agent node-1"). Unknown levels fall back to info.
void InitLogging(std::string_view component, std::string_view level = "info");

}  // namespace cohort

#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
