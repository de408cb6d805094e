// `cohort nodes [NAME]`: the worker nodes, like sinfo / kubectl get nodes; with a name,
// one node in detail with a row per GPU.
#include "api/gpu_request.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"
#include "sched/constraints.h"

namespace cohort::cli {
namespace {

std::string GpuType(const api::Node& n) {
  if (n.gpus.empty()) return "-";
  const std::string& first = n.gpus.front().name;
  for (const auto& g : n.gpus) {
    if (g.name != first) return "mixed";
  }
  std::string name = first.empty() ? "unknown" : first;
  if (n.gpus.front().simulated) name += " (sim)";
  return name;
}

// "GPU 3 unhealthy: XID 79 (GPU has fallen off the bus)", or "GPUs 1,3 unhealthy: ..."
// (the first GPU's reason); "" when every GPU is healthy.
std::string GpuHealthReason(const api::Node& n) {
  std::vector<int> bad;
  std::string first;
  for (const auto& g : n.gpus) {
    if (g.healthy) continue;
    if (bad.empty()) first = g.health_reason;
    bad.push_back(g.index);
  }
  if (bad.empty()) return "";
  std::string which = bad.size() == 1 ? fmt::format("GPU {}", bad[0]) : "GPUs " + FormatIndexList(bad);
  return first.empty() ? which + " unhealthy" : fmt::format("{} unhealthy: {}", which, first);
}

// "1/8", or "1/8, 2 bad" with unhealthy GPUs.
std::string GpuCounts(const api::NodeStatus& v) {
  std::string out = fmt::format("{}/{}", v.gpus_allocated, v.node.gpus.size());
  if (v.unhealthy_gpus > 0) out += fmt::format(", {} bad", v.unhealthy_gpus);
  return out;
}

std::string NodeReason(const api::NodeStatus& v) {
  std::string reason;
  if (v.node.drain) {
    reason = v.node.drain_reason.empty() ? "drained by request" : v.node.drain_reason;
  } else if (v.node.state == api::NodeState::kDown) {
    reason = v.node.reason;
  }
  std::string gpus = GpuHealthReason(v.node);
  if (!gpus.empty()) reason = reason.empty() ? gpus : reason + "; " + gpus;
  return reason.empty() ? "-" : reason;
}

template <typename T, typename F>
std::string Reading(const std::optional<T>& v, F&& format) {
  return v ? format(*v) : "-";
}

std::string HeartbeatAge(int64_t age_ms) { return age_ms < 0 ? "never" : FormatDuration(age_ms) + " ago"; }

std::string JobList(const std::vector<api::JobId>& jobs) {
  std::vector<std::string> ids;
  for (auto id : jobs) ids.push_back(std::to_string(id));
  return Join(ids, ",");
}

int Run(const std::string& name, const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  if (!name.empty()) {
    auto reply = head.Get(api::routes::Node(name));
    if (!reply) return ReportError(reply.error());
    if (global.json) {
      PrintJson(*reply);
      return 0;
    }
    auto node = FromHead(api::NodeStatusFromJson(*reply), "node");
    if (!node) return ReportError(node.error());
    std::fputs(RenderNode(*node).c_str(), stdout);
    return 0;
  }
  auto reply = FetchAllPages(head, api::routes::kNodes, "nodes");
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  auto nodes = FromHead(api::NodeListFromJson(*reply), "node list");
  if (!nodes) return ReportError(nodes.error());
  std::fputs(RenderNodes(*nodes).c_str(), stdout);
  return 0;
}

// Issue 18: what each device is (model short name or MIG profile) and how the whole GPUs
// connect, as `nvidia-smi topo -m` does: NV (one NVLink island), PIX (one PCIe switch),
// SYS (otherwise, or unknown). "" when no device carries MIG or topology.
std::string GpuTopologyText(const api::Node& n) {
  bool any = !n.gpu_sharing.empty();
  for (const auto& g : n.gpus) any |= !g.mig_profile.empty() || g.nvlink_island >= 0 || g.pcie_switch >= 0;
  if (!any) return "";
  const auto field = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
  std::string out = "\ngpu topology" + (n.gpu_sharing.empty() ? std::string() : " (sharing: " + n.gpu_sharing + ")") + ":\n";
  Table t({"INDEX", "TYPE", "NVLINK-ISLAND", "PCIE-SWITCH", "MIG-PARENT"});
  std::vector<const api::Gpu*> whole;
  for (const auto& g : n.gpus) {
    t.AddRow({std::to_string(g.index), g.mig_profile.empty() ? api::GpuShortName(g.name) : g.mig_profile,
              field(g.nvlink_island), field(g.pcie_switch), field(g.mig_parent)});
    if (g.mig_profile.empty()) whole.push_back(&g);
  }
  out += t.Render(2);
  if (whole.size() < 2 || whole.size() > 16) return out;
  std::vector<std::string> header = {""};
  for (const api::Gpu* g : whole) header.push_back("GPU" + std::to_string(g->index));
  Table m(header);
  for (const api::Gpu* a : whole) {
    std::vector<std::string> row = {"GPU" + std::to_string(a->index)};
    for (const api::Gpu* b : whole) {
      if (a == b) {
        row.push_back("X");
      } else if (a->nvlink_island >= 0 && a->nvlink_island == b->nvlink_island) {
        row.push_back("NV");
      } else if (a->pcie_switch >= 0 && a->pcie_switch == b->pcie_switch) {
        row.push_back("PIX");
      } else {
        row.push_back("SYS");
      }
    }
    m.AddRow(row);
  }
  return out + "\n  connections (NV: NVLink island, PIX: one PCIe switch, SYS: otherwise):\n" + m.Render(2);
}

// "rack=r1,switch=s3", in key order; "" for none.
std::string TopologyLabels(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (const auto& [k, val] : labels) out += (out.empty() ? "" : ",") + k + "=" + val;
  return out;
}

}  // namespace

std::string RenderNodes(const std::vector<api::NodeStatus>& nodes) {
  Table t({"NAME", "STATE", "GPUS", "CPUS", "GPU-TYPE", "ADDRESS", "HEARTBEAT", "JOBS", "REASON"});
  t.SetMaxWidth(4, 32);
  t.SetMaxWidth(7, 24);
  t.SetMaxWidth(8, 48);
  for (const auto& v : nodes) {
    t.AddRow({v.node.name, v.display_state, GpuCounts(v),
              fmt::format("{}/{}", v.cpus_allocated, v.node.cpus), GpuType(v.node), v.node.address,
              HeartbeatAge(v.heartbeat_age_ms), JobList(v.jobs), NodeReason(v)});
  }
  return t.Render();
}

std::string RenderNode(const api::NodeStatus& v) {
  const api::Node& n = v.node;
  std::vector<std::pair<std::string, std::string>> kv = {
      {"name", n.name},
      {"state", v.display_state},
      {"reason", NodeReason(v)},
      {"address", n.address},
      {"agent url", n.agent_url},
      {"version", n.version},
      {"incarnation", n.incarnation},
      {"registered", FormatTimestamp(n.registered_ms)},
      {"last heartbeat",
       n.last_heartbeat_ms > 0 ? fmt::format("{} ({})", FormatTimestamp(n.last_heartbeat_ms), HeartbeatAge(v.heartbeat_age_ms))
                               : "never"},
      {"gpus", fmt::format("{} allocated of {}{}", v.gpus_allocated, n.gpus.size(),
                           v.unhealthy_gpus > 0 ? fmt::format(", {} unhealthy", v.unhealthy_gpus) : "")},
      {"cpus", fmt::format("{} allocated of {}", v.cpus_allocated, n.cpus)},
      // For --mem and --constraint (sched/constraints.h).
      {"memory", n.memory_bytes > 0 ? sched::FormatMemoryMb(n.memory_bytes >> 20) : "unknown"},
      {"features", n.features.empty() ? "" : Join(n.features, ",", "")},
      // The agent's --topology labels (rack=r1,switch=s3): gangs are placed by `switch`.
      {"topology", TopologyLabels(n.labels)},
      {"jobs", JobList(v.jobs)},
  };
  size_t width = 0;
  for (const auto& [k, _] : kv) width = std::max(width, k.size());
  std::string out;
  for (const auto& [k, val] : kv) {
    out += k + ":" + std::string(width - k.size() + 1, ' ') + (val.empty() ? "-" : val) + "\n";
  }
  if (!n.gpus.empty()) {
    out += "\ngpu devices:\n";
    Table t({"INDEX", "NAME", "UUID", "MEMORY", "SIMULATED"});
    t.SetMaxWidth(2, 48);
    for (const auto& g : n.gpus) {
      t.AddRow({std::to_string(g.index), g.name.empty() ? "-" : g.name, g.uuid.empty() ? "-" : g.uuid,
                FormatGiB(g.memory_bytes), g.simulated ? "yes" : "no"});
    }
    out += t.Render(2);
    out += GpuTopologyText(n);
    bool any = false;
    for (const auto& g : n.gpus) any |= g.telemetry.has_value() || !g.healthy;
    if (any) {
      out += "\ngpu health and telemetry:\n";
      Table h({"INDEX", "HEALTH", "UTIL", "MEM-USED", "TEMP", "POWER", "SM-CLOCK", "REASON"});
      h.SetMaxWidth(7, 60);
      for (const auto& g : n.gpus) {
        api::GpuTelemetry t = g.telemetry.value_or(api::GpuTelemetry{});
        h.AddRow({std::to_string(g.index), g.healthy ? "ok" : "UNHEALTHY",
                  Reading(t.utilization, [](double u) { return fmt::format("{:.0f}%", u * 100); }),
                  Reading(t.memory_used_bytes, [](int64_t b) { return FormatGiB(b); }),
                  Reading(t.temperature_celsius, [](double c) { return fmt::format("{:.0f}C", c); }),
                  Reading(t.power_watts, [](double w) { return fmt::format("{:.0f}W", w); }),
                  Reading(t.sm_clock_hz, [](double hz) { return fmt::format("{:.0f}MHz", hz / 1e6); }),
                  g.healthy ? "-" : g.health_reason});
      }
      out += h.Render(2);
    }
  }
  return out;
}

void AddNodesCommand(CommandContext& ctx) {
  auto name = std::make_shared<std::string>();
  auto* sub = ctx.app.add_subcommand("nodes", "List the worker nodes, or show one in detail");
  sub->add_option("NAME", *name, "Show only this node, in detail");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [name, &global] { return Run(*name, global); });
}

}  // namespace cohort::cli
