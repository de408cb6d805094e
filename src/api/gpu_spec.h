// The GPU fields of a JobSpec on the wire (issues 18, 19): gpus, gpu_type, gpus_per_task,
// gpu_memory, gpu_memory_enforce and topology. Kept beside the codec (codecs.cc calls
// these) so the JobSpec codec stays one list of plain fields. Pure functions; any thread.
//
//   gpus: "h100:4"           gpu_type h100, gpus_per_node 4 (also "4", "1g.10gb:2", or 4)
//   gpus_per_task: 0.5       a half of one GPU per task (0.25, 0.5, 0.75); a whole number
//                            n is n whole GPUs per task (gpus_per_node = n x tasks_per_node);
//                            "h100:0.5" also names the type (Slurm's [type:]number)
//   gpu_memory: "20GiB"      GPU memory per task on a shared GPU (or a byte count)
//   gpu_memory_enforce: kill report (default) or kill a task over its memory share
//   topology: required       preferred (default) or required
//
// Written back canonically: gpu_type, gpus_per_node, gpus_per_task (fractions only),
// gpu_memory (MiB, as "20GiB"), gpu_memory_enforce and topology when not the defaults,
// so that a spec without them reads and dumps as before.
#pragma once

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

// Reads the fields above from `r` into `s`, after tasks_per_node and gpus_per_node are
// read. kInvalidArgument naming the field for a malformed value or for `gpus` and
// `gpus_per_node` (or gpus_per_task) that disagree.
Result<void> ReadGpuSpecFields(ObjectReader& r, JobSpec& s);

// Adds the fields above to `j` when they differ from their defaults.
void WriteGpuSpecFields(const JobSpec& s, json& j);

// Cross-field rules: a fraction or gpu_memory goes with gpus_per_node 0 (each task holds a
// part of one GPU); a MIG profile is not shared; a gpu_type needs a count or a fraction.
Result<void> ValidateGpuSpec(const JobSpec& s);

// "0.5 GPU (20GiB) per task, shared", "h100:4 per node", "1g.10gb:2 per node", "4 per
// node", "" for a CPU-only job: how show and queue describe the request.
std::string GpuSpecText(const JobSpec& s);

// GPU share units one part of a placed job of `spec` holds: its tasks' slices for a sharing
// job (the units the scheduler gave each, sched/gpu_units.h), kGpuShareUnits per GPU
// otherwise. Quotas and fair share count these.
int64_t AllocationShareUnits(const JobSpec& spec, const NodeAllocation& part);

// GPUs an attempt held, with fractions: its whole GPUs (records stored before
// AttemptRecord::gpus: the spec's shape) and its sharing parts (gpu_share_units).
double AttemptGpuAmount(const JobSpec& spec, const AttemptRecord& attempt);

}  // namespace cohort::api
