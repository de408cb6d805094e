// What `cohort submit` sends of the submitting side: the environment (--export, Slurm's
// semantics) and the command resolved to the program it names here.
//
// --export=ALL (the default) sends the submitter's environment less a deny list: what
// belongs to the submitting session or the node a task lands on (LD_PRELOAD, LD_AUDIT,
// SSH_*, DISPLAY, PWD, SHLVL, HOSTNAME, ...), the account variables the agent sets for the
// job's user (HOME, USER, LOGNAME, SHELL), names the job contract reserves
// (api::IsReservedEnvName: COHORT_* including COHORT_TOKEN, RANK, ...), and the Slurm names
// cohort sets in an allocation's shell or an array's element (SLURM_JOB_ID,
// SLURM_JOB_NODELIST, SLURM_ARRAY_TASK_ID, ...), which would mislabel a job submitted there. --export=NONE sends
// nothing; --export=A,B=1 only A (its value here) and B=1; ALL,B=1 everything and B=1.
// The spec file's env and --env override what --export sends.
//
// A job in a container image (`container:`) runs the image's programs with the image's
// environment, as `podman run` would: its default is NONE (ALL would put the submitter's
// PATH, LD_LIBRARY_PATH, ... over the image's), and its program is not resolved here.
//
// The command's program is resolved as a shell would here: a name without '/' through the
// exported PATH (the submitter's when PATH is not exported), a relative path against the
// job's working directory; the spec gets the absolute path, so `python3` means on the
// nodes what it meant where the job was submitted (a shared filesystem, as with Slurm).
// A program that is missing or not executable here is an error at submit (exit 2), not an
// exit 127 that burns a restart.
//
// Pure functions of their inputs plus, for ResolveProgram, the filesystem; any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"

namespace cohort::cli {

// True for a name --export=ALL leaves out.
bool DeniedForExport(std::string_view name);

// The variables --export=`spec` sends from `environment`; kInvalidArgument naming
// --export for an empty item, a bad name, a variable named but not set here, or NONE
// combined with others.
Result<std::map<std::string, std::string>> ExportedEnvironment(std::string_view spec,
                                                               const std::map<std::string, std::string>& environment);

// The absolute path of `program` resolved against `path_var` (PATH's value) and
// `workdir`; kInvalidArgument naming the command when it is missing, a directory, or not
// executable.
Result<std::string> ResolveProgram(const std::string& program, std::string_view path_var, const std::string& workdir);

// `spec` (the merged spec as JSON) with the submitting side applied: env = what
// --export=`export_spec` sends ("": ALL, or NONE for a container job), overridden by the
// spec's own env; command[0] resolved (ResolveProgram) against the final PATH and the
// spec's workdir, except in a container job or a batch script's (whose command is the
// script's arguments). A spec whose command is
// missing or malformed is returned as is for api::JobSpecFromJson to name the field.
Result<json> ApplySubmittingSide(json spec, std::string_view export_spec,
                                 const std::map<std::string, std::string>& environment);

}  // namespace cohort::cli
