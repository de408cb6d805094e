// `cohort serve deploy FILE | scale NAME N | ls | rm NAME`: inference services on the
// cluster (api/service.h, the head's /v1/services). `cohort serve --model PATH` itself
// (one replica) is the data plane's (src/serve/serve_command.h): RunCli hands argv to it
// unless the second word is one of these verbs (ServeControlVerb).
//
// A service file is a job spec of `kind: service` (YAML or JSON, as `cohort submit`'s):
// name, model, replicas, gpus_per_replica, ... When it names no `command`, the replicas
// run this very binary's `serve` (the path of the cohort that deploys, which nodes
// installed the same way share).
#include "api/service.h"
#include "cli/client.h"
#include "cli/job_spec_file.h"
#include "cli/table.h"
#include "common/subprocess.h"

namespace cohort::cli {

bool ServeControlVerb(std::string_view word) {
  return word == "deploy" || word == "scale" || word == "ls" || word == "rm";
}

namespace {

std::string Load(const api::ReplicaStatus& r) {
  if (r.state != "RUNNING") return "-";
  return fmt::format("{}+{}", r.running, r.waiting);
}

void PrintService(const api::ServiceStatus& s) {
  std::printf("Service %s: model %s, %d replica(s), %d healthy (owner %s)\n", s.name.c_str(), s.model_name.c_str(),
              s.replicas, s.healthy, s.user.c_str());
  Table t({"JOB", "STATE", "NODE", "SITE", "ENDPOINT", "HEALTH", "RUN+WAIT", "KV", "TOK/S", "TTFT_P50"});
  t.SetMaxWidth(5, 48);
  for (const auto& r : s.replica_status) {
    t.AddRow({std::to_string(r.job), r.state, r.node.empty() ? "-" : r.node, r.site.empty() ? "-" : r.site,
              r.endpoint.empty() ? "-" : r.endpoint, r.healthy ? "ok" : r.health, Load(r),
              r.kv_blocks_total ? fmt::format("{:.0f}%", 100.0 * r.kv_blocks_used / r.kv_blocks_total) : "-",
              fmt::format("{:.1f}", r.tokens_per_second),
              r.ttft_p50_seconds > 0 ? fmt::format("{:.0f}ms", r.ttft_p50_seconds * 1000) : "-"});
  }
  std::fputs(t.Render(2).c_str(), stdout);
}

Result<api::ServiceStatus> Decode(Result<json> reply) {
  if (!reply) return std::unexpected(reply.error());
  return FromHead(api::ServiceStatusFromJson(*reply), "service");
}

std::string Replicas(int n) { return fmt::format("{} replica{}", n, n == 1 ? "" : "s"); }

int Deploy(const std::string& path, const GlobalOptions& global) {
  auto doc = LoadSpecDocument(path);
  if (!doc) return ReportError(doc.error());
  if (doc->is_object() && !doc->contains("command")) (*doc)["command"] = {SelfExePath(), "serve"};
  auto spec = api::ServiceSpecFromJson(*doc);
  if (!spec) return ReportError(WithContext(spec.error(), path));
  auto s = Decode(HeadClient(global).Post(api::routes::kServices, api::ToJson(*spec)));
  if (!s) return ReportError(s.error());
  if (global.json) {
    PrintJson(api::ToJson(*s));
  } else {
    std::printf("Deployed service %s (%s): requests name model \"%s\" at the head's /v1/completions\n",
                s->name.c_str(), Replicas(s->replicas).c_str(), s->model_name.c_str());
  }
  return 0;
}

int Scale(const std::string& name, int n, const GlobalOptions& global) {
  auto s = Decode(HeadClient(global).Post(api::routes::ServiceScale(name), json{{"replicas", n}}));
  if (!s) return ReportError(s.error());
  if (global.json) {
    PrintJson(api::ToJson(*s));
  } else {
    std::printf("Service %s scaled to %s\n", s->name.c_str(), Replicas(s->replicas).c_str());
  }
  return 0;
}

// Every service, or only `name` (kubectl get svc NAME): a name no service has is an error.
int List(const std::string& name, const GlobalOptions& global) {
  auto reply = HeadClient(global).Get(api::routes::kServices);
  if (!reply) return ReportError(reply.error());
  json list = reply->value("services", json::array());
  if (!name.empty()) {
    json only = json::array();
    for (const auto& j : list) {
      if (j.is_object() && j.value("name", "") == name) only.push_back(j);
    }
    if (only.empty()) {
      return ReportError(Error{ErrorCode::kNotFound, fmt::format("no service '{}' (cohort serve ls lists them)", name)});
    }
    list = std::move(only);
  }
  if (global.json) {
    PrintJson(name.empty() ? *reply : json{{"services", list}});
    return 0;
  }
  if (list.empty()) std::printf("No services\n");
  for (const auto& j : list) {
    auto s = FromHead(api::ServiceStatusFromJson(j), "service");
    if (!s) return ReportError(s.error());
    PrintService(*s);
  }
  return 0;
}

int Remove(const std::string& name, const GlobalOptions& global) {
  auto s = Decode(HeadClient(global).Delete(api::routes::Service(name)));
  if (!s) return ReportError(s.error());
  if (global.json) {
    PrintJson(api::ToJson(*s));
  } else {
    std::printf("Removed service %s (%s cancelled)\n", s->name.c_str(), Replicas(s->replicas).c_str());
  }
  return 0;
}

}  // namespace

void AddServeCommands(CommandContext& ctx) {
  auto* serve = ctx.app.add_subcommand(
      "serve", "Serve a model: `serve --model PATH` runs one replica; deploy, scale, ls, rm manage services");
  serve->require_subcommand(1);
  GlobalOptions& global = ctx.global;

  auto file = std::make_shared<std::string>();
  auto* deploy = serve->add_subcommand("deploy", "Deploy a service from a spec file (kind: service)");
  deploy->add_option("FILE", *file, "Service spec (YAML or JSON)")->required();
  AddClientOptions(deploy, global);
  ctx.on_run(deploy, [file, &global] { return Deploy(*file, global); });

  auto name = std::make_shared<std::string>();
  auto count = std::make_shared<int>(0);
  auto* scale = serve->add_subcommand("scale", "Set a service's number of replicas");
  scale->add_option("NAME", *name, "Service")->required();
  scale->add_option("N", *count, "Replicas (0 keeps the service with none: its model answers 503)")
      ->required()
      ->check(CLI::Range(0, api::kMaxReplicas));
  AddClientOptions(scale, global);
  ctx.on_run(scale, [name, count, &global] { return Scale(*name, *count, global); });

  auto ls_name = std::make_shared<std::string>();
  auto* ls = serve->add_subcommand("ls", "List services and their replicas (or only NAME's)");
  ls->add_option("NAME", *ls_name, "Only this service");
  AddClientOptions(ls, global);
  ctx.on_run(ls, [ls_name, &global] { return List(*ls_name, global); });

  auto rm_name = std::make_shared<std::string>();
  auto* rm = serve->add_subcommand("rm", "Remove a service (cancel its replicas)");
  rm->add_option("NAME", *rm_name, "Service")->required();
  AddClientOptions(rm, global);
  ctx.on_run(rm, [rm_name, &global] { return Remove(*rm_name, global); });
}

}  // namespace cohort::cli
