// `cohort team create|ls|set|rm` (admins change teams; anyone with a token lists them):
// teams with a GPU quota, a borrow limit, a fair-share weight and users (api/team.h).
#include <charconv>

#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {

namespace {

// A whole number in [min, max] from `text`, or an error naming `flag`.
Result<int64_t> WholeNumber(std::string_view text, std::string_view flag, std::string_view what, int64_t min,
                            int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return FieldError(std::string(flag), "{} must be a whole number from {} to {}, got '{}'", what, min, max, text);
  }
  return v;
}

struct TeamFlags {
  std::string name;
  std::string quota;         // "gpus=16" or "16"
  std::string borrow_limit;  // "8", "gpus=8" or "unlimited"
  std::string weight;
  std::vector<std::string> users;
  bool users_given = false;
  std::vector<std::string> add_users, remove_users;
};

// The request body for `create` (`patch` false) or `set` (true) from the flags.
Result<json> TeamBody(const TeamFlags& f, bool patch) {
  json body = json::object();
  if (!patch) body["name"] = f.name;
  if (!f.quota.empty()) body["quota"] = {{"gpus", COHORT_TRY(ParseTeamGpus(f.quota, "--quota"))}};
  if (f.borrow_limit == "unlimited") {
    if (patch) body["borrow_limit"] = "unlimited";  // a new team's default
  } else if (!f.borrow_limit.empty()) {
    body["borrow_limit"] = {{"gpus", COHORT_TRY(ParseTeamGpus(f.borrow_limit, "--borrow-limit"))}};
  }
  if (!f.weight.empty()) {
    body["weight"] = COHORT_TRY(WholeNumber(f.weight, "--weight", "the weight", 1, api::kMaxTeamWeight));
  }
  if (!patch || f.users_given) body["users"] = f.users;
  if (patch) {
    if (!f.add_users.empty()) body["add_users"] = f.add_users;
    if (!f.remove_users.empty()) body["remove_users"] = f.remove_users;
    if (body.empty()) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "nothing to change: give --quota, --borrow-limit, --weight, --users, --add-user or "
                       "--remove-user");
    }
  }
  return body;
}

int PrintTeam(const GlobalOptions& global, const json& reply, std::string_view verb) {
  if (global.json) {
    PrintJson(reply);
    return 0;
  }
  auto team = FromHead(api::TeamFromJson(reply), "team");
  if (!team) return ReportError(team.error());
  std::printf("team %s %s\n", team->name.c_str(), std::string(verb).c_str());
  std::fputs(RenderTeams({*team}).c_str(), stdout);
  return 0;
}

int RunCreate(const GlobalOptions& global, const TeamFlags& f) {
  auto body = TeamBody(f, false);
  if (!body) return ReportError(body.error());
  auto reply = HeadClient(global).Post(api::routes::kTeams, *body);
  if (!reply) return ReportError(reply.error());
  return PrintTeam(global, *reply, "created");
}

int RunSet(const GlobalOptions& global, const TeamFlags& f) {
  auto body = TeamBody(f, true);
  if (!body) return ReportError(body.error());
  auto reply = HeadClient(global).Put(api::routes::Team(f.name), *body);
  if (!reply) return ReportError(reply.error());
  return PrintTeam(global, *reply, "changed");
}

int RunList(const GlobalOptions& global) {
  auto reply = HeadClient(global).Get(api::routes::kTeams);
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  auto teams = FromHead(api::TeamsFromJson(*reply), "team list");
  if (!teams) return ReportError(teams.error());
  std::fputs(RenderTeams(*teams).c_str(), stdout);
  return 0;
}

int RunRemove(const GlobalOptions& global, const std::vector<std::string>& names) {
  const HttpClient head = HeadClient(global);
  return ForEachName(
      names, [&](const std::string& name) { return head.Delete(api::routes::Team(name)); },
      [&](const std::string& name, json reply) {
        if (global.json) {
          PrintJson(reply);
        } else {
          std::printf("team %s removed\n", name.c_str());
        }
        return 0;
      });
}

}  // namespace

Result<int64_t> ParseTeamGpus(std::string_view text, std::string_view flag) {
  std::string_view number = text;
  if (number.starts_with("gpus=")) {
    number.remove_prefix(5);
  } else if (number.find('=') != std::string_view::npos) {
    return FieldError(std::string(flag), "only GPUs have quotas: write gpus=N, got '{}'", text);
  }
  return WholeNumber(number, flag, "GPUs", 0, api::kMaxTeamGpus);
}

std::string RenderTeams(const std::vector<api::Team>& teams) {
  Table t({"NAME", "QUOTA", "BORROW LIMIT", "WEIGHT", "USERS", "CREATED"});
  t.SetMaxWidth(4, 80);
  for (const auto& team : teams) {
    t.AddRow({team.name, fmt::format("{} GPUs", team.quota_gpus),
              team.borrow_limit_gpus ? fmt::format("{} GPUs", *team.borrow_limit_gpus) : "unlimited",
              std::to_string(team.weight), Join(team.users, ","), FormatTimestamp(team.created_ms)});
  }
  return t.Render();
}

void AddTeamCommands(CommandContext& ctx) {
  GlobalOptions& global = ctx.global;
  auto* team = ctx.app.add_subcommand("team", "Teams: GPU quotas with borrowing, fair-share weights, users");
  team->require_subcommand(1);

  const auto add_fields = [](CLI::App* sub, TeamFlags& f) {
    sub->add_option("--quota", f.quota, "GPUs guaranteed to the team: gpus=N (default 0)");
    sub->add_option("--borrow-limit", f.borrow_limit,
                    "GPUs beyond the quota the team may use while others leave them idle: N, gpus=N or unlimited "
                    "(default)");
    sub->add_option("--weight", f.weight, "Fair-share weight, a whole number >= 1 (default 1)");
  };

  auto cf = std::make_shared<TeamFlags>();
  auto* create = team->add_subcommand("create", "Create a team (admins)");
  create->add_option("NAME", cf->name, "Team name")->required();
  add_fields(create, *cf);
  create->add_option("--users", cf->users, "Its users (comma-separated); a user is in one team")->delimiter(',');
  AddClientOptions(create, global);
  ctx.on_run(create, [cf, &global] { return RunCreate(global, *cf); });

  auto* ls = team->add_subcommand("ls", "List the teams");
  AddClientOptions(ls, global);
  ctx.on_run(ls, [&global] { return RunList(global); });

  auto sf = std::make_shared<TeamFlags>();
  auto* set = team->add_subcommand("set", "Change a team (admins); unset flags keep their values");
  set->add_option("NAME", sf->name, "Team name")->required();
  add_fields(set, *sf);
  auto* users = set->add_option("--users", sf->users, "Replace its users (comma-separated)")->delimiter(',');
  set->add_option("--add-user", sf->add_users, "Add users (repeatable, or comma-separated)")->delimiter(',');
  set->add_option("--remove-user", sf->remove_users, "Remove users (repeatable, or comma-separated)")->delimiter(',');
  AddClientOptions(set, global);
  ctx.on_run(set, [sf, users, &global] {
    sf->users_given = users->count() > 0;
    return RunSet(global, *sf);
  });

  auto names = std::make_shared<std::vector<std::string>>();
  auto* rm = team->add_subcommand("rm", "Remove teams that have no pending or running jobs (admins)");
  rm->add_option("NAME", *names, "Team names")->required();
  AddClientOptions(rm, global);
  ctx.on_run(rm, [names, &global] { return RunRemove(global, *names); });
}

}  // namespace cohort::cli
