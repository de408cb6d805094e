// The job contract's environment (job_env.h).
#include "api/job_env.h"

#include <fmt/format.h>

#include "api/gpu_request.h"
#include "api/job_array.h"
#include "api/routes.h"
#include "api/sweep.h"

namespace cohort::api {

TaskEnvOptions ClusterTaskEnvOptions(std::string_view head_url, std::string_view token,
                                     std::string_view checkpoint_root, JobId job, std::string_view ca_pem) {
  TaskEnvOptions o;
  o.head_url = std::string(head_url);
  o.rendezvous_url = o.head_url + routes::Rendezvous(token);
  o.report_url = o.head_url + routes::Report(token);
  o.checkpoint_dir = fmt::format("{}/job-{}", checkpoint_root, job);
  o.ca_pem = std::string(ca_pem);
  return o;
}

std::map<std::string, std::string> TaskEnvironment(const Job& job, const NodeAllocation& node,
                                                   const TaskPlacement& task, const TaskEnvOptions& options) {
  std::map<std::string, std::string> env = job.spec.env;
  auto set = [&](const std::string& name, std::string value) { env[name] = std::move(value); };
  auto set_if = [&](const char* name, const std::string& value) {
    if (!value.empty()) env[name] = value;
  };
  set("RANK", std::to_string(task.rank));
  set("WORLD_SIZE", std::to_string(job.world_size()));
  set("LOCAL_RANK", std::to_string(task.local_rank));
  set("LOCAL_WORLD_SIZE", std::to_string(job.spec.tasks_per_node));
  set("NODE_RANK", std::to_string(node.node_rank));
  set("GROUP_RANK", std::to_string(node.node_rank));
  set("MASTER_ADDR", job.allocation.master_addr);
  set("MASTER_PORT", std::to_string(job.allocation.master_port));
  if (options.set_visible_devices) {
    std::string gpus;
    for (size_t i = 0; i < task.gpus.size(); ++i) {
      // MIG instances by uuid (the only way CUDA names them), whole GPUs by index.
      gpus += (i ? "," : "") + (i < task.devices.size() ? task.devices[i] : std::to_string(task.gpus[i]));
    }
    set("CUDA_VISIBLE_DEVICES", std::move(gpus));
  }
  if (task.gpu_share > 0 || task.gpu_memory_mib > 0) {
    // A part of one GPU (issue 18): the limits an MPS server applies to this client; the
    // agent runs that server where it can, else the GPU is time-sliced (COHORT_GPU_SHARING).
    set("COHORT_GPU_SHARE", GpuShareText(task.gpu_share));
    set("COHORT_GPU_MEMORY_MIB", std::to_string(task.gpu_memory_mib));
    set("COHORT_GPU_MEMORY_ENFORCE", job.spec.gpu_memory_enforce);  // agent/gpu/task_memory.h
    set("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(task.gpu_share * 100 / kGpuShareUnits));
    set("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", fmt::format("0={}M", task.gpu_memory_mib));
  }
  if (job.id > 0) {
    set("COHORT_JOB_ID", std::to_string(job.id));
    set("COHORT_JOB_NAME", job.spec.name);
  }
  if (job.is_array_element()) {  // head/core/arrays.h; Slurm's names too
    for (const char* prefix : {"COHORT", "SLURM"}) {
      set(fmt::format("{}_ARRAY_JOB_ID", prefix), std::to_string(job.array_job_id));
      set(fmt::format("{}_ARRAY_TASK_ID", prefix), std::to_string(job.array_task_id));
    }
    // The array as a whole, as Slurm gives it: scripts split work by COUNT, MIN and STEP.
    if (auto a = ParseArraySpec(options.array, "array"); a && !a->indices.empty()) {
      const auto& ranges = a->indices.ranges();
      const int64_t step = ranges.size() == 1 ? ranges[0].step : 1;
      for (const char* prefix : {"COHORT", "SLURM"}) {
        set(fmt::format("{}_ARRAY_TASK_COUNT", prefix), std::to_string(a->indices.size()));
        set(fmt::format("{}_ARRAY_TASK_MIN", prefix), std::to_string(a->indices.min()));
        set(fmt::format("{}_ARRAY_TASK_MAX", prefix), std::to_string(a->indices.max()));
        set(fmt::format("{}_ARRAY_TASK_STEP", prefix), std::to_string(step));
      }
    }
  }
  for (const auto& [name, value] : job.sweep_values) set(SweepEnvName(name), value);  // api/sweep.h
  set("COHORT_ATTEMPT", std::to_string(job.attempt));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(job.attempt));
  set_if("COHORT_NODE", node.node);
  set("COHORT_NUM_NODES", std::to_string(job.allocation.nodes.size()));
  set_if("COHORT_HEAD", options.head_url);
  set_if("COHORT_RENDEZVOUS", options.rendezvous_url);
  set_if("COHORT_REPORT", options.report_url);
  set_if("COHORT_CHECKPOINT_DIR", options.checkpoint_dir);
  set_if("COHORT_CA", options.ca_pem);
  set_if("COHORT_JOB_TOKEN", options.job_token);
  if (job.spec.umask >= 0) set("COHORT_UMASK", fmt::format("{:04o}", job.spec.umask));
  if (job.spec.is_allocation() && job.id > 0) {
    // What `cohort alloc`'s shell has, for a batch script and for the steps it runs, and
    // sbatch's name and directory: scripts that read them move over unchanged.
    for (auto& [name, value] : AllocationVariables(job)) set(name, std::move(value));
    set("SLURM_JOB_NAME", job.spec.name);
    if (!job.spec.workdir.empty()) set("SLURM_SUBMIT_DIR", job.spec.workdir);
  }
  return env;
}

std::map<std::string, std::string> AllocationVariables(const Job& job) {
  std::string nodes;
  for (const auto& na : job.allocation.nodes) nodes += (nodes.empty() ? "" : ",") + na.node;
  const std::string id = std::to_string(job.id);
  const std::string count = std::to_string(job.allocation.nodes.size());
  return {{"COHORT_JOB_ID", id},      {"SLURM_JOB_ID", id},          {"SLURM_JOBID", id},
          {"COHORT_NODELIST", nodes}, {"SLURM_JOB_NODELIST", nodes}, {"COHORT_NUM_NODES", count},
          {"SLURM_NNODES", count}};
}

}  // namespace cohort::api
