// A job's default name from a path (its program's, or a batch script's): the file name,
// each character a name may not hold ([A-Za-z0-9._-]) made '_', at most 128 bytes. "" when
// nothing is left: the caller picks its own default. Pure.
#pragma once

#include <string>
#include <string_view>

namespace cohort::api {

std::string JobNameFromPath(std::string_view path);

}  // namespace cohort::api
