// The `container:` section of a job spec: which image every task runs in, and under which
// runtime (api::ContainerSpec in types.h).
//
//   container:
//     image: localhost/trainer:1.2      # required; an OCI image reference
//     runtime: podman                   # podman (default) or docker
//
// The image reference is checked the way the OCI distribution spec writes one:
// [host[:port]/]path[:tag][@algorithm:hex], path components lowercase [a-z0-9] joined by
// '.', '_', '__' or '-', at most 255 bytes for the name and 128 for the tag. It reaches
// the runtime's command line as one argument, so it can never start with '-'.
#pragma once

#include <string>
#include <string_view>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

inline constexpr std::string_view kContainerRuntimes[] = {"podman", "docker"};

// Checks an image reference; the error names `field` and what is wrong.
Result<void> ValidateImageReference(std::string_view image, const std::string& field);

// The section's object; `field` is its name in messages ("container"). A job spec refuses
// unknown fields (kRefuse); a task launch in the head's heartbeat reply ignores them
// (kIgnore), so that a newer head's container field leaves an older agent's heartbeats
// working. Wrong types, bad values and a missing image are refused either way.
Result<ContainerSpec> ContainerSpecFromJson(const json& j, const std::string& field, UnknownFields unknown);
json ToJson(const ContainerSpec& c);

}  // namespace cohort::api
