// The client configuration file: which head the CLI talks to and with which token.
//
// $XDG_CONFIG_HOME/cohort/config, else ~/.config/cohort/config: lines "key: value" (a
// YAML subset), keys `head` (the head's URL), `token` and `ca` (the file of the
// certificate authority an https head's certificate comes from); '#' starts a comment. Written by
// `cohort login` and by a head's first start (for the user who started it), always with
// mode 0600 in a 0700 directory, atomically (a temporary file renamed over it).
#pragma once

#include <optional>
#include <string>

#include "common/error.h"

namespace cohort {

struct ClientConfig {
  std::string head;   // "" when unset
  std::string token;  // "" when unset
  std::string ca;     // path of a PEM file; "" when unset
};

// The file's path ($XDG_CONFIG_HOME or $HOME, then the passwd entry's home); "" if no home
// directory can be found.
std::string ClientConfigPath();

// nullopt if the file does not exist; kInvalidArgument naming the file and line for a
// malformed line or an unknown key.
Result<std::optional<ClientConfig>> ReadClientConfig(const std::string& path);
Result<void> WriteClientConfig(const std::string& path, const ClientConfig& config);

}  // namespace cohort
