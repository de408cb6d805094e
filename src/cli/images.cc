// `cohort images [NODE...]`: each node's image cache (agent/image_cache.h): the container
// images its runtimes hold, their size, the tasks running in them and when a task last
// started in one. `cohort images rm NODE IMAGE` removes one (never one in use);
// `cohort images prune [NODE...] [--unused-for 7d]` removes those unused for that long
// (default: every one no task runs in). Nodes default to every UP node.
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

struct ImagesFlags {
  std::vector<std::string> nodes;
  std::string node;   // rm
  std::string image;  // rm
  std::string unused_for = "0";
};

// The nodes named, or every UP node.
Result<std::vector<std::string>> Nodes(const HttpClient& head, const std::vector<std::string>& named) {
  if (!named.empty()) return named;
  json all = COHORT_TRY(FetchAllPages(head, api::routes::kNodes, "nodes"));
  std::vector<std::string> out;
  for (const auto& n : all["nodes"]) {
    if (n.value("state", "") == "UP") out.push_back(n.value("name", ""));
  }
  return out;
}

std::string Megabytes(int64_t bytes) { return fmt::format("{:.1f} MB", bytes / 1e6); }

int RunList(const ImagesFlags& f, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  auto nodes = Nodes(head, f.nodes);
  if (!nodes) return ReportError(nodes.error());
  json out = json::object();
  int rc = 0;
  for (const auto& node : *nodes) {
    auto r = head.Get(api::routes::NodeImages(node));
    if (!r) {
      rc = rc ? rc : ReportError(r.error());
      continue;
    }
    out[node] = (*r)["images"];
  }
  if (global.json) {
    PrintJson(json{{"nodes", out}});
    return rc;
  }
  std::fputs(RenderImages(out, NowUnixMs()).c_str(), stdout);
  return rc;
}

int RunRemove(const ImagesFlags& f, const GlobalOptions& global, bool prune) {
  HttpClient head = HeadClient(global);
  std::vector<std::string> nodes = prune ? std::vector<std::string>{} : std::vector<std::string>{f.node};
  if (prune) {
    auto all = Nodes(head, f.nodes);
    if (!all) return ReportError(all.error());
    nodes = *all;
  }
  json body = json::object();
  if (prune) {
    auto ms = ParseDurationMs(f.unused_for, "--unused-for");
    if (!ms) return ReportError(ms.error());
    body["unused_for_s"] = *ms / 1000;
  } else {
    body["image"] = f.image;
  }
  int rc = 0;
  for (const auto& node : nodes) {
    auto r = head.Post(api::routes::NodeImages(node) + (prune ? "/prune" : "/remove"), body);
    if (!r) {
      rc = rc ? rc : ReportError(r.error());
      continue;
    }
    if (global.json) {
      PrintJson(json{{"node", node}, {"removed", (*r)["removed"]}});
      continue;
    }
    for (const auto& i : (*r)["removed"]) {
      std::vector<std::string> names = i.value("names", std::vector<std::string>{});
      std::printf("%s: removed %s (%s, %s)\n", node.c_str(), names.empty() ? "<none>" : Join(names, ",").c_str(),
                  i.value("id", "").substr(0, 12).c_str(), Megabytes(i.value("size_bytes", int64_t{0})).c_str());
    }
    if ((*r)["removed"].empty()) std::printf("%s: nothing to remove\n", node.c_str());
  }
  return rc;
}

}  // namespace

std::string RenderImages(const json& by_node, int64_t now_ms) {
  Table t({"NODE", "RUNTIME", "IMAGE", "ID", "SIZE", "TASKS", "LAST USED"}, 0);
  for (const auto& [node, images] : by_node.items()) {
    for (const auto& i : images) {
      std::vector<std::string> names = i.value("names", std::vector<std::string>{});
      const int64_t used = i.value("last_used_ms", int64_t{0});
      t.AddRow({node, i.value("runtime", ""), names.empty() ? "<none>" : Join(names, ","),
                i.value("id", "").substr(0, 12), Megabytes(i.value("size_bytes", int64_t{0})),
                std::to_string(i.value("running_tasks", 0)),
                used > 0 ? FormatDuration(now_ms - used) + " ago" : "-"});
    }
  }
  return t.Render();
}

void AddImagesCommand(CommandContext& ctx) {
  auto f = std::make_shared<ImagesFlags>();
  auto* images = ctx.app.add_subcommand("images", "The container images each node holds (its image cache)");
  images->add_option("NODE", f->nodes, "Nodes (default: every UP node)");
  images->require_subcommand(0, 1);
  AddClientOptions(images, ctx.global);
  auto* rm = images->add_subcommand("rm", "Remove an image from a node (admin; never one a running task uses)");
  rm->add_option("NODE", f->node, "The node")->required();
  rm->add_option("IMAGE", f->image, "The image: a name (localhost/trainer:1.0) or an id")->required();
  AddClientOptions(rm, ctx.global);
  auto* prune = images->add_subcommand("prune", "Remove the images no task runs in (admin)");
  prune->add_option("NODE", f->nodes, "Nodes (default: every UP node)");
  prune->add_option("--unused-for", f->unused_for,
                    "Only those no task started in for this long: 7d, 12h (default 0: every unused one)");
  AddClientOptions(prune, ctx.global);
  GlobalOptions& global = ctx.global;
  // One callback (the parent's runs after its subcommand's): which one was given decides.
  ctx.on_run(images, [f, &global, rm, prune] {
    if (rm->parsed()) return RunRemove(*f, global, false);
    if (prune->parsed()) return RunRemove(*f, global, true);
    return RunList(*f, global);
  });
}

}  // namespace cohort::cli
