#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace cohort {

void InitLogging(std::string_view component, std::string_view level) {
  auto logger = spdlog::stderr_color_mt(std::string(component));
  logger->set_pattern(fmt::format("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [{}] %v", component));
  spdlog::set_default_logger(logger);
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  spdlog::set_level(lvl);
}

}  // namespace cohort
