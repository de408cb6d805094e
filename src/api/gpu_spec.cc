#include "api/gpu_spec.h"

#include <fmt/format.h>

#include "api/gpu_request.h"

namespace cohort::api {

std::string_view TopologyName(Topology t) { return t == Topology::kRequired ? "required" : "preferred"; }

Result<void> ReadGpuSpecFields(ObjectReader& r, JobSpec& s) {
  const bool had_gpus_per_node = r.Has("gpus_per_node");
  if (const json* g = r.Raw("gpus")) {
    GpuRequest req;
    if (g->is_number_integer()) {
      req = COHORT_TRY(ParseGpuRequest(std::to_string(g->get<int64_t>()), r.FieldName("gpus"), kMaxGpusPerNode));
    } else if (g->is_string()) {
      req = COHORT_TRY(ParseGpuRequest(g->get<std::string>(), r.FieldName("gpus"), kMaxGpusPerNode));
    } else {
      return FieldError(r.FieldName("gpus"), "must be [TYPE:]COUNT (e.g. \"h100:4\" or 4), got {}", JsonTypeName(*g));
    }
    if (had_gpus_per_node && s.gpus_per_node != req.count) {
      return FieldError(r.FieldName("gpus"), "asks for {} GPUs per node but gpus_per_node is {}; give one of them",
                        req.count, s.gpus_per_node);
    }
    s.gpus_per_node = req.count;
    s.gpu_type = req.type;
  }
  if (r.Has("gpu_type")) {
    std::string t = COHORT_TRY(r.String("gpu_type", "", 64));
    if (!t.empty()) t = COHORT_TRY(NormalizeGpuType(t, r.FieldName("gpu_type")));
    if (!s.gpu_type.empty() && t != s.gpu_type) {
      return FieldError(r.FieldName("gpu_type"), "'{}' differs from the type in gpus ('{}')", t, s.gpu_type);
    }
    s.gpu_type = t;
  }
  if (const json* g = r.Raw("gpus_per_task")) {
    int64_t units = 0;
    if (g->is_number()) {
      units = COHORT_TRY(ParseGpusPerTask(g->get<double>(), r.FieldName("gpus_per_task")));
    } else if (g->is_string()) {
      // Slurm's --gpus-per-task=[type:]number: "h100:0.5" is half of an H100 per task.
      std::string text = g->get<std::string>();
      if (const size_t colon = text.rfind(':'); colon != std::string::npos) {
        const std::string type = COHORT_TRY(NormalizeGpuType(text.substr(0, colon), r.FieldName("gpus_per_task")));
        if (!s.gpu_type.empty() && type != s.gpu_type) {
          return FieldError(r.FieldName("gpus_per_task"), "type '{}' differs from the type in gpus ('{}')", type,
                            s.gpu_type);
        }
        s.gpu_type = type;
        text = text.substr(colon + 1);
      }
      units = COHORT_TRY(ParseGpusPerTaskText(text, r.FieldName("gpus_per_task")));
    } else {
      return FieldError(r.FieldName("gpus_per_task"), "must be a number (0.25, 0.5, 0.75 or whole), got {}",
                        JsonTypeName(*g));
    }
    if (units < kGpuShareUnits) {
      s.gpu_share = static_cast<int>(units);
    } else {
      const int64_t per_node = units / kGpuShareUnits * s.tasks_per_node;
      if (per_node > kMaxGpusPerNode) {
        return FieldError(r.FieldName("gpus_per_task"), "{} GPUs x {} tasks per node exceeds {} GPUs per node",
                          units / kGpuShareUnits, s.tasks_per_node, kMaxGpusPerNode);
      }
      if ((had_gpus_per_node || r.Has("gpus")) && s.gpus_per_node != per_node) {
        return FieldError(r.FieldName("gpus_per_task"), "{} GPUs x {} tasks per node is {}, but gpus_per_node is {}",
                          units / kGpuShareUnits, s.tasks_per_node, per_node, s.gpus_per_node);
      }
      s.gpus_per_node = static_cast<int>(per_node);
    }
  }
  if (const json* m = r.Raw("gpu_memory")) {
    if (m->is_number_integer()) {
      s.gpu_memory_mib = COHORT_TRY(ParseMemoryMib(std::to_string(m->get<int64_t>()), r.FieldName("gpu_memory")));
    } else if (m->is_string()) {
      s.gpu_memory_mib = COHORT_TRY(ParseMemoryMib(m->get<std::string>(), r.FieldName("gpu_memory")));
    } else {
      return FieldError(r.FieldName("gpu_memory"), "must be a size such as \"20GiB\" or a byte count, got {}",
                        JsonTypeName(*m));
    }
  }
  s.gpu_memory_enforce = COHORT_TRY(r.String("gpu_memory_enforce", "report"));
  if (s.gpu_memory_enforce != "report" && s.gpu_memory_enforce != "kill") {
    return FieldError(r.FieldName("gpu_memory_enforce"), "must be 'report' or 'kill', got '{}'", s.gpu_memory_enforce);
  }
  const std::string topology = COHORT_TRY(r.String("topology", "preferred"));
  if (topology == "preferred") {
    s.topology = Topology::kPreferred;
  } else if (topology == "required") {
    s.topology = Topology::kRequired;
  } else {
    return FieldError(r.FieldName("topology"), "must be 'preferred' or 'required', got '{}'", topology);
  }
  return {};
}

void WriteGpuSpecFields(const JobSpec& s, json& j) {
  if (!s.gpu_type.empty()) j["gpu_type"] = s.gpu_type;
  if (s.gpu_share > 0) j["gpus_per_task"] = static_cast<double>(s.gpu_share) / kGpuShareUnits;
  if (s.gpu_memory_mib > 0) j["gpu_memory"] = MemoryMibText(s.gpu_memory_mib);
  if (s.gpu_memory_enforce != "report") j["gpu_memory_enforce"] = s.gpu_memory_enforce;
  if (s.topology != Topology::kPreferred) j["topology"] = TopologyName(s.topology);
}

Result<void> ValidateGpuSpec(const JobSpec& s) {
  if (s.gpu_memory_mib > 0 && s.gpu_share == 0 && IsMigProfile(s.gpu_type)) {
    // Before the count check: "gpus_per_node must be 0" would send them the wrong way.
    return FieldError("gpu_memory",
                      "MIG instance '{}' is not shared: each has the profile's own memory, so ask for whole "
                      "instances (gpus: {}:N) without gpu_memory",
                      s.gpu_type, s.gpu_type);
  }
  if (s.shares_gpu() && s.gpus_per_node > 0) {
    return FieldError(s.gpu_share > 0 ? "gpus_per_task" : "gpu_memory",
                      "a task that shares a GPU holds a part of one GPU, so gpus_per_node must be 0, got {}",
                      s.gpus_per_node);
  }
  if (s.shares_gpu() && IsMigProfile(s.gpu_type)) {
    return FieldError("gpu_type", "MIG instance '{}' is not shared: ask for whole instances (gpus: {}:N)", s.gpu_type,
                      s.gpu_type);
  }
  if (!s.gpu_type.empty() && s.gpus_per_node == 0 && !s.shares_gpu()) {
    return FieldError("gpu_type", "'{}' needs a count (gpus: {}:N) or a fraction (gpus_per_task)", s.gpu_type,
                      s.gpu_type);
  }
  if (s.gpu_share < 0 || s.gpu_share >= kGpuShareUnits) {
    return FieldError("gpus_per_task", "share of {} units is outside 1..{}", s.gpu_share, kGpuShareUnits - 1);
  }
  if (s.gpu_memory_mib < 0 || s.gpu_memory_mib > kMaxGpuMemoryMib) {
    return FieldError("gpu_memory", "{} MiB is outside 1..{}", s.gpu_memory_mib, kMaxGpuMemoryMib);
  }
  return {};
}

std::string GpuSpecText(const JobSpec& s) {
  if (s.shares_gpu()) {
    std::string out = s.gpu_share > 0 ? GpuShareText(s.gpu_share) + " GPU" : std::string("GPU memory");
    if (!s.gpu_type.empty()) out += " (" + s.gpu_type + ")";
    if (s.gpu_memory_mib > 0) out += " " + MemoryMibText(s.gpu_memory_mib);
    return out + " per task, shared";
  }
  if (s.gpus_per_node == 0) return "";
  return GpuRequestText(GpuRequest{s.gpu_type, s.gpus_per_node}) + " per node";
}

int64_t AllocationShareUnits(const JobSpec& spec, const NodeAllocation& part) {
  if (!spec.shares_gpu()) return static_cast<int64_t>(part.gpus.size()) * kGpuShareUnits;
  int64_t units = 0;
  for (const TaskPlacement& t : part.tasks) units += t.gpu_share;
  return units;
}

double AttemptGpuAmount(const JobSpec& spec, const AttemptRecord& attempt) {
  const int64_t whole = attempt.gpus >= 0 ? attempt.gpus : int64_t{spec.nodes} * spec.gpus_per_node;
  return static_cast<double>(whole) + static_cast<double>(attempt.gpu_share_units) / kGpuShareUnits;
}

}  // namespace cohort::api
