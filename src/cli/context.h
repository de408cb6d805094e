// Contexts, like kubectl's: named copies of the client config (common/client_config.h),
// each a head with its token and authority, kept as CONFIG_DIR/contexts/NAME (0600, the
// client config's own format). `cohort context save NAME` keeps the current config under
// a name, `use NAME` makes one current (copies it over the config), `ls` lists them
// (marking the current one), `rm NAME` forgets one; `--context NAME` (or
// $COHORT_CONTEXT) uses one for a single command without changing the current.
//
// Functions of the file system under the given config path; one CLI thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/client_config.h"
#include "common/error.h"

namespace cohort::cli {

// kInvalidArgument naming the context unless `name` is 1-64 letters, digits, '.', '_' or
// '-' (and not "." or "..").
Result<void> CheckContextName(const std::string& name);

// CONFIG_DIR/contexts/NAME for the client config at `config_path`.
std::string ContextPath(const std::string& config_path, const std::string& name);

// The saved contexts, sorted by name, each with its config.
Result<std::vector<std::pair<std::string, ClientConfig>>> ListContexts(const std::string& config_path);

// save: the config at `config_path` (which must exist) as context `name`, replacing one
// of that name. use: context `name` over the config at `config_path`; kNotFound (with the
// closest names) when there is no such context. rm: kNotFound likewise.
Result<void> SaveContext(const std::string& config_path, const std::string& name);
Result<ClientConfig> UseContext(const std::string& config_path, const std::string& name);
Result<void> RemoveContext(const std::string& config_path, const std::string& name);

// The file a command reads its client config from: the context named by --context or
// $COHORT_CONTEXT (`flag` first), else the client config itself. kNotFound for a context
// that does not exist.
Result<std::string> ActiveConfigPath(const std::string& flag);

// The file `cohort login` writes: the context --context (`flag`) or $COHORT_CONTEXT names,
// made if it is new (kInvalidArgument for a bad name), else the client config.
Result<std::string> LoginConfigPath(const std::string& flag);

}  // namespace cohort::cli
