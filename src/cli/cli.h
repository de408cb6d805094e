// The `cohort` command line: one file per command, each adding itself to the CLI11 app.
//
// RunCli parses argv and dispatches; commands return a process exit code. Exit codes:
// 0 success, 1 the request failed (the head said no, or the job failed), 2 bad usage or
// bad input, 3 the head could not be reached. Errors print one line to stderr:
// "cohort: error: <message>".
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "common/external_command.h"
#include "common/http.h"

namespace cohort::cli {

// The --head flag's help, on the root and on every client command (ResolveHeadUrl's order).
inline constexpr char kHeadFlagHelp[] =
    "Head URL (default: $COHORT_HEAD, the client config's (cohort login), or https://127.0.0.1:8470)";

// Options every client command shares, bound to global flags.
struct GlobalOptions {
  std::string head_url;  // --head, else $COHORT_HEAD, else the client config's, else https://127.0.0.1:8470
  bool json = false;     // --json: machine-readable output
  std::string context;   // --context, else $COHORT_CONTEXT: a saved context instead of the client config
};

// What a command registers: its CLI11 subcommand and the function run when it is chosen.
using CommandFn = std::function<int()>;

struct CommandContext {
  CLI::App& app;
  GlobalOptions& global;
  // Called by a command to install its run function on its subcommand.
  std::function<void(CLI::App*, CommandFn)> on_run;
};

// Default head URL: --head, $COHORT_HEAD, the client config's `head`
// (common/client_config.h), or the local default.
std::string ResolveHeadUrl(const GlobalOptions& g);
// Where ResolveHeadUrl's answer came from, for messages: "--head", "$COHORT_HEAD", "the
// client config (PATH)", or "the default ...".
std::string HeadUrlSource(const GlobalOptions& g);
// The token for `head_url`: $COHORT_TOKEN, else the client config's token if the config
// names that head (or none), else, inside a task of that head ($COHORT_HEAD), its job's
// token ($COHORT_JOB_TOKEN); "" if none.
std::string ResolveToken(const std::string& head_url);
// The CA file for `head_url` from the client config (when it names that head, or none);
// "" if none. $COHORT_CA and $COHORT_CA_FILE come before it.
std::string ResolveCaFile(const std::string& head_url);
// A client of the resolved head that sends the resolved token and, for https, trusts the
// resolved CA.
HttpClient HeadClient(const GlobalOptions& g);

// A lifetime flag: "30d", "12h", "90m", "3600" (seconds), or "never"/"0"; in seconds (0:
// never); the error names "--expires".
Result<int64_t> ParseTokenExpiry(std::string_view text);

// Prints "cohort: error: ..." and returns the exit code for the error.
// (The exit code itself comes from cohort::ExitCodeFor in common/error.h.)
int ReportError(const Error& e);

// Commands (one file each).
void AddHeadCommand(CommandContext& ctx);
void AddAgentCommand(CommandContext& ctx);
void AddUpCommand(CommandContext& ctx);
void AddSubmitCommand(CommandContext& ctx);
void AddBatchCommand(CommandContext& ctx);  // batch (alias sbatch; batch.cc)
void AddQueueCommand(CommandContext& ctx);
void AddShowCommand(CommandContext& ctx);
void AddCancelCommand(CommandContext& ctx);
void AddLogsCommand(CommandContext& ctx);
void AddExecCommands(CommandContext& ctx);  // exec and attach (exec.cc)
void AddNodesCommand(CommandContext& ctx);
void AddDrainCommands(CommandContext& ctx);  // drain and resume
void AddNodeCommands(CommandContext& ctx);   // node rm
void AddRunCommand(CommandContext& ctx);    // run: local ranks, or a step inside an allocation
void AddAllocCommand(CommandContext& ctx);  // alloc (alloc.cc)
void AddTopCommand(CommandContext& ctx);
void AddUsageCommand(CommandContext& ctx);
void AddAuditCommand(CommandContext& ctx);
void AddTokenCommands(CommandContext& ctx);  // token create/ls/revoke, and login
void AddTeamCommands(CommandContext& ctx);   // team create/ls/set/rm
void AddSharesCommand(CommandContext& ctx);
void AddJobControlCommands(CommandContext& ctx);  // hold, release, update
void AddHistoryCommand(CommandContext& ctx);      // history (alias sacct)
void AddHelpCommand(CommandContext& ctx);         // help TOPIC|COMMAND
void AddCompletionCommand(CommandContext& ctx);   // completion bash|zsh
void AddContextCommands(CommandContext& ctx);     // context ls|save|use|rm (context.h)
void AddSweepCommand(CommandContext& ctx);        // sweep show (sweep.cc)
void AddImagesCommand(CommandContext& ctx);       // images, images rm, images prune (images.cc)
// `cohort images`'s table from {node: [image, ...]} (the agents' replies).
std::string RenderImages(const json& by_node, int64_t now_ms);
// `cohort sweep show`'s table from the head's GET /v1/jobs/{id}/sweep reply.
Result<std::string> RenderSweep(const json& reply);

// The script `cohort completion SHELL` prints for the commands of `root` (bash or zsh;
// kInvalidArgument otherwise).
Result<std::string> CompletionScript(CLI::App& root, std::string_view shell);
// The text of `cohort help NAME` for a topic, or null when NAME is no topic.
const char* HelpTopicText(std::string_view name);
void AddServeCommands(CommandContext& ctx);  // serve deploy/scale/ls/rm (services)
// True for the second words of `cohort serve` that the CLI handles itself (services);
// every other `cohort serve ...` goes to the data plane's serve command.
bool ServeControlVerb(std::string_view word);

using ExternalCommand = ::cohort::ExternalCommand;

// The root app with every command added (what RunCli parses), for tests and generators.
std::unique_ptr<CLI::App> BuildCliApp(GlobalOptions& global, std::function<void(CommandFn)> chosen,
                                      std::span<const ExternalCommand> external = {});

// Parses argv and runs the chosen command. `external` commands (common/external_command.h)
// are dispatched before parsing when argv[1] names one, and listed in `cohort --help`.
int RunCli(int argc, char** argv, std::span<const ExternalCommand> external = {});

}  // namespace cohort::cli
