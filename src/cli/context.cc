// `cohort context ls|save|use|rm` (see context.h).
#include "cli/context.h"

#include <algorithm>
#include <filesystem>

#include "cli/client.h"
#include "cli/suggest.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

namespace fs = std::filesystem;

std::string ContextsDir(const std::string& config_path) {
  return (fs::path(config_path).parent_path() / "contexts").string();
}

std::vector<std::string> Names(const std::string& config_path) {
  std::vector<std::string> names;
  auto list = ListContexts(config_path);
  if (list) {
    for (auto& [n, c] : *list) names.push_back(n);
  }
  return names;
}

Error NoSuchContext(const std::string& config_path, const std::string& name) {
  auto close = ClosestNames(name, Names(config_path));
  return Error{ErrorCode::kNotFound,
               fmt::format("no context '{}'{} (cohort context ls lists them; cohort context save NAME makes one)", name,
                           close.empty() ? "" : "; did you mean " + close[0] + "?"),
               "context"};
}

// The saved context `name`, read and checked.
Result<ClientConfig> ReadContext(const std::string& config_path, const std::string& name) {
  COHORT_TRY_VOID(CheckContextName(name));
  auto c = COHORT_TRY(ReadClientConfig(ContextPath(config_path, name)));
  if (!c) return std::unexpected(NoSuchContext(config_path, name));
  return *c;
}

}  // namespace

Result<void> CheckContextName(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name != "." && name != ".." &&
                  std::all_of(name.begin(), name.end(), [](char ch) {
                    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
                  });
  if (!ok) return FieldError("context", "'{}' must be 1-64 letters, digits, '.', '_' or '-'", name);
  return {};
}

std::string ContextPath(const std::string& config_path, const std::string& name) {
  return ContextsDir(config_path) + "/" + name;
}

Result<std::vector<std::pair<std::string, ClientConfig>>> ListContexts(const std::string& config_path) {
  std::vector<std::pair<std::string, ClientConfig>> out;
  std::error_code ec;
  const std::string dir = ContextsDir(config_path);
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !CheckContextName(name)) continue;
    auto c = COHORT_TRY(ReadClientConfig(entry.path().string()));
    if (c) out.emplace_back(name, *c);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

Result<void> SaveContext(const std::string& config_path, const std::string& name) {
  COHORT_TRY_VOID(CheckContextName(name));
  auto current = COHORT_TRY(ReadClientConfig(config_path));
  if (!current) {
    return Errorf(ErrorCode::kFailedPrecondition, "no client config at {} to save (cohort login --head URL first)",
                  config_path);
  }
  return WriteClientConfig(ContextPath(config_path, name), *current);
}

Result<ClientConfig> UseContext(const std::string& config_path, const std::string& name) {
  ClientConfig c = COHORT_TRY(ReadContext(config_path, name));
  COHORT_TRY_VOID(WriteClientConfig(config_path, c));
  return c;
}

Result<void> RemoveContext(const std::string& config_path, const std::string& name) {
  COHORT_TRY(ReadContext(config_path, name));
  std::error_code ec;
  fs::remove(ContextPath(config_path, name), ec);
  if (ec) return Errorf(ErrorCode::kInvalidArgument, "cannot remove context '{}': {}", name, ec.message());
  return {};
}

namespace {

// The context --context (`flag`) or $COHORT_CONTEXT names; empty for none.
std::string ContextName(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("COHORT_CONTEXT"); env && *env) return env;
  return {};
}

}  // namespace

Result<std::string> ActiveConfigPath(const std::string& flag) {
  const std::string config_path = ClientConfigPath();
  const std::string name = ContextName(flag);
  if (name.empty()) return config_path;
  if (config_path.empty()) return Errorf(ErrorCode::kInvalidArgument, "no home directory to keep contexts in");
  COHORT_TRY(ReadContext(config_path, name));
  return ContextPath(config_path, name);
}

Result<std::string> LoginConfigPath(const std::string& flag) {
  const std::string config_path = ClientConfigPath();
  const std::string name = ContextName(flag);
  if (name.empty()) return config_path;
  if (config_path.empty()) return Errorf(ErrorCode::kInvalidArgument, "no home directory to keep contexts in");
  COHORT_TRY_VOID(CheckContextName(name));
  return ContextPath(config_path, name);
}

void AddContextCommands(CommandContext& ctx) {
  auto* group = ctx.app.add_subcommand("context", "Named heads, like kubectl's contexts: ls, save NAME, use NAME, rm NAME");
  group->require_subcommand(1);
  GlobalOptions& global = ctx.global;
  auto name = std::make_shared<std::string>();

  auto* ls = group->add_subcommand("ls", "List the saved contexts; * marks the current one");
  AddClientOptions(ls, global);
  ctx.on_run(ls, [&global] {
    const std::string path = ClientConfigPath();
    auto list = ListContexts(path);
    if (!list) return ReportError(list.error());
    auto current = ReadClientConfig(path);
    ClientConfig now = current && *current ? **current : ClientConfig{};
    auto is_current = [&](const ClientConfig& c) { return c.head == now.head && c.token == now.token && c.ca == now.ca; };
    if (global.json) {
      json out = json::array();
      for (const auto& [n, c] : *list) out.push_back({{"name", n}, {"head", c.head}, {"current", is_current(c)}});
      PrintJson(json{{"contexts", out}});
      return 0;
    }
    Table t({"CURRENT", "NAME", "HEAD"}, 0);
    for (const auto& [n, c] : *list) t.AddRow({is_current(c) ? "*" : "", n, c.head.empty() ? "-" : c.head});
    std::fputs(t.Render().c_str(), stdout);
    return 0;
  });

  auto* save = group->add_subcommand("save", "Keep the current client config (head, token, CA) as NAME");
  save->add_option("NAME", *name, "Context name")->required();
  ctx.on_run(save, [name] {
    if (auto s = SaveContext(ClientConfigPath(), *name); !s) return ReportError(s.error());
    std::printf("Saved the current config as context %s\n", name->c_str());
    return 0;
  });

  auto* use = group->add_subcommand("use", "Make context NAME the current client config");
  use->alias("use-context");
  use->add_option("NAME", *name, "Context name")->required();
  ctx.on_run(use, [name] {
    auto c = UseContext(ClientConfigPath(), *name);
    if (!c) return ReportError(c.error());
    std::printf("Switched to context %s (head %s)\n", name->c_str(), c->head.empty() ? "-" : c->head.c_str());
    return 0;
  });

  auto* rm = group->add_subcommand("rm", "Forget context NAME");
  rm->add_option("NAME", *name, "Context name")->required();
  ctx.on_run(rm, [name] {
    if (auto r = RemoveContext(ClientConfigPath(), *name); !r) return ReportError(r.error());
    std::printf("Removed context %s\n", name->c_str());
    return 0;
  });
}

}  // namespace cohort::cli
