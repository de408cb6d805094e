#include "cli/cli.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/task_shim.h"
#include "cli/context.h"
#include "cli/daemon_flags.h"
#include "cli/suggest.h"
#include "common/client_config.h"
#include "common/tls.h"

namespace cohort::cli {

namespace {

// The file LoadedClientConfig reads: the client config, or the context --context or
// $COHORT_CONTEXT names (set by RunCli once it has parsed; the CLI is one thread).
std::string g_config_path;

const std::string& ActiveConfig() {
  if (g_config_path.empty()) g_config_path = ClientConfigPath();
  return g_config_path;
}

// The active config file's values, read once per file; an unreadable or malformed file
// is reported once and ignored (the flags and environment still work).
const ClientConfig& LoadedClientConfig() {
  static std::string loaded_path;
  static ClientConfig config;
  static bool loaded = false;
  const std::string& path = ActiveConfig();
  if (loaded && loaded_path == path) return config;
  loaded = true;
  loaded_path = path;
  config = ClientConfig{};
  if (path.empty()) return config;
  auto c = ReadClientConfig(path);
  if (!c) {
    std::fprintf(stderr, "cohort: warning: ignoring %s\n", c.error().message.c_str());
    return config;
  }
  config = c->value_or(ClientConfig{});
  return config;
}

std::string WithoutTrailingSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// The client config, when it belongs to `head_url` (it names that head, or none): its token
// and CA are not sent or trusted anywhere else. Null otherwise.
const ClientConfig* ConfigFor(const std::string& head_url) {
  const auto& c = LoadedClientConfig();
  if (c.head.empty() || WithoutTrailingSlash(c.head) == WithoutTrailingSlash(head_url)) return &c;
  return nullptr;
}

// The options of the command being run, for the hint an unreachable head gets (set by
// RunCli once it has parsed; the CLI is one thread).
const GlobalOptions* g_options = nullptr;

}  // namespace

std::string HeadUrlSource(const GlobalOptions& g) {
  if (!g.head_url.empty()) return "--head";
  if (const char* env = std::getenv("COHORT_HEAD"); env && *env) return "$COHORT_HEAD";
  if (const auto& c = LoadedClientConfig(); !c.head.empty()) return "the client config (" + ActiveConfig() + ")";
  return "the default (no --head, $COHORT_HEAD or client config)";
}

std::string ResolveHeadUrl(const GlobalOptions& g) {
  if (!g.head_url.empty()) return g.head_url;
  if (const char* env = std::getenv("COHORT_HEAD"); env && *env) return env;
  if (const auto& c = LoadedClientConfig(); !c.head.empty()) return c.head;
  return "https://127.0.0.1:8470";
}

std::string ResolveToken(const std::string& head_url) {
  if (const char* env = std::getenv("COHORT_TOKEN"); env && *env) return env;
  if (const ClientConfig* c = ConfigFor(head_url); c && !c->token.empty()) return c->token;
  // Inside a task: its job's own token, for the head that started it (COHORT_HEAD), so that
  // `cohort show $COHORT_JOB_ID` and `cohort logs` work there as the job.
  const char* job_token = std::getenv("COHORT_JOB_TOKEN");
  const char* task_head = std::getenv("COHORT_HEAD");
  if (job_token && *job_token && task_head && WithoutTrailingSlash(task_head) == WithoutTrailingSlash(head_url)) {
    return job_token;
  }
  return "";
}

std::string ResolveCaFile(const std::string& head_url) {
  // $COHORT_CA and $COHORT_CA_FILE are read by HttpClient itself (common/tls.h).
  const ClientConfig* c = ConfigFor(head_url);
  return c ? c->ca : "";
}

HttpClient HeadClient(const GlobalOptions& g) {
  HttpClient client(ResolveHeadUrl(g), Millis(15000));
  client.set_bearer_token(ResolveToken(client.base_url()));
  const bool ca_from_env = std::getenv("COHORT_CA") || std::getenv("COHORT_CA_FILE");
  if (std::string ca = ResolveCaFile(client.base_url()); !ca.empty() && !ca_from_env && client.base_url().starts_with("https://")) {
    // A CA file that cannot be read fails the first call with the file's name (below).
    if (auto pem = tls::ReadCaFile(ca); pem) {
      client.set_tls(tls::ClientOptions{*pem, nullptr});
    } else {
      std::fprintf(stderr, "cohort: error: the client config's ca: %s\n", pem.error().message.c_str());
      std::exit(ExitCodeFor(pem.error()));
    }
  }
  return client;
}

int ReportError(const Error& e) {
  std::fprintf(stderr, "cohort: error: %s\n", e.message.c_str());
  const int code = ExitCodeFor(e);
  if (code == 3 && g_options != nullptr && e.message.starts_with("cannot reach ")) {
    std::fprintf(stderr,
                 "cohort: hint: the head URL %s came from %s. Is a head running there? Start a local cluster with "
                 "`cohort up`, or point at another head with --head URL, COHORT_HEAD=URL or `cohort login --head "
                 "URL` (which saves it in the client config) or `cohort context use NAME` (see cohort help config).\n",
                 ResolveHeadUrl(*g_options).c_str(), HeadUrlSource(*g_options).c_str());
  }
  return code;
}

std::unique_ptr<CLI::App> BuildCliApp(GlobalOptions& global, std::function<void(CommandFn)> chosen,
                                      std::span<const ExternalCommand> external) {
  auto app = std::make_unique<CLI::App>("Cohort: many GPU machines working as one computer", "cohort");
  app->require_subcommand(1);
  app->set_version_flag("--version", "cohort 0.1.0");
  app->add_option("--head", global.head_url, kHeadFlagHelp);
  app->add_flag("--json", global.json, "Print JSON instead of tables");
  app->add_option("--context", global.context,
                  "Use this saved context's head and token for this command (default: $COHORT_CONTEXT, else the "
                  "client config; cohort context ls)");
  app->footer("Topics: cohort help (durations, states, environment, config, exit-codes, spec). Completion: "
              "source <(cohort completion bash)");

  CommandContext ctx{*app, global, [chosen](CLI::App* sub, CommandFn fn) {
                       sub->callback([chosen, fn] { chosen(fn); });
                     }};
  AddHeadCommand(ctx);
  AddAgentCommand(ctx);
  AddUpCommand(ctx);
  AddSubmitCommand(ctx);
  AddBatchCommand(ctx);
  AddQueueCommand(ctx);
  AddShowCommand(ctx);
  AddCancelCommand(ctx);
  AddSweepCommand(ctx);
  AddImagesCommand(ctx);
  AddJobControlCommands(ctx);
  AddHistoryCommand(ctx);
  AddLogsCommand(ctx);
  AddExecCommands(ctx);
  AddNodesCommand(ctx);
  AddNodeCommands(ctx);
  AddDrainCommands(ctx);
  AddRunCommand(ctx);
  AddAllocCommand(ctx);
  AddTopCommand(ctx);
  AddUsageCommand(ctx);
  AddAuditCommand(ctx);
  AddTokenCommands(ctx);
  AddTeamCommands(ctx);
  AddSharesCommand(ctx);
  AddHelpCommand(ctx);
  AddCompletionCommand(ctx);
  AddContextCommands(ctx);
  AddServeCommands(ctx);
  // Listed for --help only: a matching argv[1] never reaches the parser (see RunCli);
  // `serve` is listed by AddServeCommands.
  for (const auto& cmd : external) {
    if (cmd.name == "serve") continue;
    ctx.app.add_subcommand(cmd.name, cmd.description)->allow_extras()->prefix_command();
  }
  return app;
}

int RunCli(int argc, char** argv, std::span<const ExternalCommand> external) {
  // The task shim is internal and must not pay for CLI parsing or touch global state.
  if (argc >= 2 && std::strcmp(argv[1], "task-shim") == 0) {
    return agent::RunTaskShim(argc - 1, argv + 1);
  }
  // Commands from outside the CLI parse their own flags, so only they can list them: `cohort
  // help train` is `cohort train --help` (the parser here knows their names alone). `serve`
  // is the CLI's own too (its service verbs), and its help is the parser's.
  if (argc == 3 && std::strcmp(argv[1], "help") == 0) {
    for (const auto& cmd : external) {
      if (cmd.name != "serve" && cmd.name == argv[2] && cmd.run) {
        char flag[] = "--help";
        char* args[] = {argv[2], flag, nullptr};
        return cmd.run(2, args);
      }
    }
  }
  // Commands from outside the CLI parse their own flags.
  const bool serve_control = argc >= 3 && std::strcmp(argv[1], "serve") == 0 && ServeControlVerb(argv[2]);
  for (const auto& cmd : external) {
    if (serve_control) break;
    if (argc >= 2 && cmd.name == argv[1] && cmd.run) return cmd.run(argc - 1, argv + 1);
  }
  GlobalOptions global;
  CommandFn chosen;
  std::unique_ptr<CLI::App> built = BuildCliApp(global, [&chosen](CommandFn fn) { chosen = std::move(fn); }, external);
  CLI::App& app = *built;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A misspelt word is the cause: say that instead of CLI11's consequence of it ("A
    // subcommand is required", "arguments were not expected").
    if (e.get_exit_code() != 0) {
      if (std::string hint = DidYouMean(app, argc, argv); !hint.empty()) {
        std::fprintf(stderr, "cohort: error: %s\n", hint.c_str());
        return 2;
      }
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  HideSecretArguments(argc, argv);  // parsed and copied: ps need not show them
  g_options = &global;
  // `cohort login --context NAME` may name a context it is about to make.
  const bool login = !app.get_subcommands().empty() && app.get_subcommands().front()->get_name() == "login";
  auto config_path = login ? LoginConfigPath(global.context) : ActiveConfigPath(global.context);
  if (!config_path) {
    Error e = config_path.error();
    e.code = ErrorCode::kInvalidArgument;  // a context that does not exist is bad input (exit 2)
    return ReportError(e);
  }
  g_config_path = *config_path;
  const int rc = chosen ? chosen() : 2;
  g_config_path.clear();  // (tests run several commands in one process)
  return rc;
}

}  // namespace cohort::cli
