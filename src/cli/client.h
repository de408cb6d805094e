// Pieces shared by the client commands (submit, queue, show, cancel, logs, nodes, drain)
// and the pure functions behind them, declared here so that tests can reach them.
//
// Each command file does its I/O (HTTP calls to the head, stdout, stderr) and leaves the
// parsing and the rendering to the functions below, which take plain values and return
// strings or Results: no network, no clock (the current time is an argument), no globals.
// The shared helpers are defined in client.cc; each command's helpers in that command's
// file. Everything may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/audit.h"
#include "api/dashboard.h"
#include "api/job_array.h"
#include "api/routes.h"
#include "api/team.h"
#include "api/types.h"
#include "api/usage.h"
#include "api/views.h"
#include "cli/cli.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::cli {

// ---- shared (client.cc) ----

// Adds --head and --json to a client subcommand, bound to the same GlobalOptions fields
// as the root's flags, so both `cohort --json queue` and `cohort queue --json` work.
void AddClientOptions(CLI::App* sub, GlobalOptions& global);

// Parses a job id as typed on the command line ("12"); kInvalidArgument otherwise.
Result<api::JobId> ParseJobId(std::string_view text);

// Job references as typed after -j ("12", "12_7"); kInvalidArgument naming --jobs.
Result<std::vector<api::JobRef>> ParseJobRefs(const std::vector<std::string>& texts);
// Whether job `j` (as the head lists it) is one `refs` name: the job, an element of an
// array they name, or the element they name.
bool JobMatchesRefs(const json& j, const std::vector<api::JobRef>& refs);
// The job list's ?jobs= for -j refs: their job ids, comma-separated ("12_7" asks for 12,
// whose elements come with it; KeepJobsMatchingRefs then keeps element 7).
std::string JobRefsQuery(const std::vector<api::JobRef>& refs);
// Keeps in a job list reply ({"jobs": [...]}) the jobs `refs` name; all of them when
// `refs` is empty.
void KeepJobsMatchingRefs(json& reply, const std::vector<api::JobRef>& refs);

// The job a reference names, as `cohort queue` shows it: "12", or "12_7" for element 7 of
// array 12 (asked of the head: kFailedPrecondition if that element has not started yet).
Result<api::JobId> ResolveJobRef(const HttpClient& head, std::string_view text);

// Job states as typed after --state (each item may hold several, comma-separated; any
// case): their canonical names joined by commas ("PENDING,RUNNING"); errors name `flag`.
Result<std::string> ParseStateList(const std::vector<std::string>& items, std::string_view flag);

// The user the head takes this client for (GET /v1/whoami): a token's user; against a
// head run with --insecure, $USER (what submit sends as the job's user there).
Result<std::string> MyUserName(const HttpClient& head);

// ---- cancel (cancel.cc) ----

// What `cohort cancel` with a filter (-u, --me, -n, -t) sends, from the jobs it picked
// (GET /v1/jobs entries), in their order: a job by its id; an array whose own record was
// picked goes whole ("12") when running jobs are picked too, else (-t PENDING) only its
// indices not yet started ("12_[40-99]"); a picked element goes on its own ("12_7") unless
// its array goes whole.
std::vector<std::string> CancelTargets(const std::vector<json>& jobs, bool running_included);

// GET /v1/jobs/{id}, decoded.
Result<api::Job> FetchJob(const HttpClient& head, api::JobId id);

// GET `path` (a list endpoint) and every page after it, following "next_cursor": the
// pages' `key` arrays concatenated, as {key: [...]}.
Result<json> FetchAllPages(const HttpClient& head, const std::string& path, const std::string& key);

// Prints `j` indented by two spaces, then a newline, to stdout.
void PrintJson(const json& j);

// For the commands that act on several objects one by one (cancel, drain, resume, node
// rm, token revoke): calls `act` on each of `names` in order, and `done` with its reply. A
// failure is reported (ReportError) and the next name goes on, except that an unreachable
// head (exit code 3) stops at once; `done` may stop with a nonzero exit code. Returns the
// exit code of the first failure, or 0.
int ForEachName(const std::vector<std::string>& names, const std::function<Result<json>(const std::string&)>& act,
                const std::function<int(const std::string&, json)>& done);

// A view decoded from a head's reply (api::NodeStatusFromJson etc.): a decoding error
// becomes kInternal, "malformed {what} from the head: ..." (naming the bad field).
template <typename T>
Result<T> FromHead(Result<T> decoded, std::string_view what) {
  if (decoded) return decoded;
  Error e = std::move(decoded.error());
  e.code = ErrorCode::kInternal;
  e.message = fmt::format("malformed {} from the head: {}", what, e.message);
  return std::unexpected(std::move(e));
}

// Time the job has run: RUNNING, since its current attempt started; ended, its attempts'
// run times added up (not the waits between them, so that GPUs x this is its GPU time).
// std::nullopt for a job that never started.
std::optional<int64_t> JobRunTimeMs(const api::Job& job, int64_t now_ms);

// ---- submit (submit.cc) ----

// Flags of `cohort submit`; an unset optional leaves the spec file's value (or the API
// default) alone.
struct SubmitFlags {
  std::optional<int> nodes;
  std::optional<int> min_nodes;                  // elastic: smallest gang
  std::optional<std::string> checkpoint_signal;  // USR1 etc., sent on drain --now
  std::optional<std::string> signal;  // Slurm's --signal [B:]SIG[@TIME]: checkpoint_signal and checkpoint_before_limit_s
  std::optional<std::string> container;          // container.image
  std::optional<std::string> array;              // array: Slurm's --array (api/job_array.h)
  std::optional<std::string> dependency;         // dependency (api/job_dependency.h)
  bool kill_on_invalid_dep = false;              // kill_on_invalid_dep
  std::optional<int> tasks_per_node;
  // cohort batch's (sbatch's) -n/--ntasks: tasks in all, spread evenly over the nodes, and
  // --gres=gpu[:TYPE]:COUNT, the GPUs per node (-G); cli/batch.h.
  std::optional<int> ntasks;
  std::optional<std::string> gres;
  std::optional<int> gpus_per_node;
  // Issue 18 (api/gpu_spec.h): -G/--gpus [TYPE:]COUNT per node, replacing the file's
  // gpus, gpu_type and gpus_per_node; a fraction or whole GPUs per task; memory per task;
  // what to do over it; topology.
  std::optional<std::string> gpus;
  std::optional<std::string> gpus_per_task;
  std::optional<std::string> gpu_memory;
  std::optional<std::string> gpu_memory_enforce;
  std::optional<std::string> topology;
  std::optional<int> cpus_per_task;
  std::optional<int> priority;
  std::optional<int> max_restarts;
  std::optional<std::string> name;
  std::optional<std::string> placement;
  std::optional<std::string> time_limit;  // as typed: "3600", "1:00:00", "2h"
  std::optional<std::string> progress_timeout;  // as typed: "120", "120s", "5m"; "0"/"off": none
  std::optional<std::string> workdir;
  // -o/--output, -e/--error, --open-mode (api/output_pattern.h), as typed.
  std::optional<std::string> output;
  std::optional<std::string> error;
  std::optional<std::string> open_mode;
  std::optional<std::string> user;
  std::optional<std::string> team;  // -A/--team/--account: the team the job counts against
  // Node constraints (sched/constraints.h), as typed.
  std::optional<std::string> mem;         // --mem: "64G" per node
  std::optional<std::string> nodelist;    // -w: "node[1-4]"
  std::optional<std::string> exclude;     // -x
  std::optional<std::string> constraint;  // -C: "a100&ib"
  std::optional<std::string> begin;       // --begin: "16:00", "now+1h" (ParseBeginTime)
  std::vector<std::string> env;      // "KEY=VALUE" (or "KEY": its value in `environment`)
  std::string export_env;          // --export: ALL, NONE or VAR[=VALUE],...; "": the default (cli/job_env.h)
  std::vector<std::string> command;  // after "--"; replaces the file's command
};

// Values used when neither the file nor a flag sets a field.
struct SubmitDefaults {
  std::string workdir;  // the current directory
  std::string user;     // $USER
  std::map<std::string, std::string> environment;  // for "--env KEY" without a value
  int64_t now_ms = 0;  // what --begin counts from (now+1h, 16:00); 0: the clock's now
  int umask = -1;      // this process's umask, sent as the spec's (Slurm's SLURM_UMASK); -1: none
};

// Parses a time limit into seconds: "3600" (seconds), "90s", "15m", "2h", "1d",
// Slurm's "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", and "0"/"unlimited"
// (no limit). kInvalidArgument naming --time-limit otherwise.
Result<int64_t> ParseTimeLimit(std::string_view text);

// Parses a progress timeout into whole seconds: "120" (seconds), "90s", "15m", "2h", and
// "0"/"off" (no timeout). kInvalidArgument naming --progress-timeout otherwise (also for
// a value under one second, or over the maximum).
Result<int64_t> ParseProgressTimeout(std::string_view text);

// Slurm's --signal=[B:]SIG[@TIME]: the checkpoint signal (USR1, SIGUSR1 or its number 10;
// USR2, HUP, INT, TERM likewise) and how long before the time limit the job is asked to
// checkpoint (TIME: seconds or a duration, 60 when left out, as Slurm's). "B:" is taken
// (every task gets the signal: there is no batch shell). kInvalidArgument naming --signal
// otherwise.
struct SignalFlag {
  std::string signal;  // canonical: "USR1"
  int64_t before_limit_s = 60;
};
Result<SignalFlag> ParseSignalFlag(std::string_view text);

// The inverse for display: 0 → "unlimited", 5400 → "01:30:00", 93784 → "1-02:03:04".
std::string FormatTimeLimit(int64_t seconds);

// "KEY=VALUE" → {KEY, VALUE}; "KEY" alone takes its value from `environment` and fails
// if it is not set there.
Result<std::pair<std::string, std::string>> ParseEnvAssignment(
    std::string_view text, const std::map<std::string, std::string>& environment);

// The spec to submit: `base` (a spec file's document, or an empty object) with every
// given flag written over it, then the defaults for fields still missing. Env flags add
// to the file's env. The result is not yet validated: pass it to api::JobSpecFromJson.
Result<json> MergeSubmitFlags(json base, const SubmitFlags& flags, const SubmitDefaults& defaults);

// "Job 12 SUCCEEDED after 3.2s" / "Job 12 FAILED after 1m02s (exit code 1): <reason>".
std::string FinalStateLine(const api::Job& job);
// The spec a submission sends: `base` (a spec file's fields, or {"kind": "allocation"})
// merged with `flags` and this process's defaults, the submitting side applied (--export,
// the program resolved here), checked; errors name the flag that gave a bad value, else
// `source` (the spec file).
Result<api::JobSpec> BuildSubmitSpec(json base, const SubmitFlags& flags, const std::string& source);
// The body of POST /v1/jobs for `spec`. `user_named`: --user or the spec file named its
// user. Otherwise its user is only this shell's $USER, left out when `head` sends a
// token: the head gives the job the token's user (a user's token may name no other, so a
// login name that differs from the token's was refused). Without a token (a head run
// with --insecure) $USER is sent.
json SubmitBody(const api::JobSpec& spec, bool user_named, const HttpClient& head);
// The resource, placement and environment flags `cohort submit` and `cohort alloc` share:
// -N, -n, -G, --gpus-per-task, --gpu-memory(-enforce), --topology, -c, -J, -p, --placement,
// -t, --env, --export, --mem, -w, -x, -C, --workdir, --user.
// With `slurm_tasks` (cohort batch), -n is sbatch's --ntasks (tasks in all), per node is
// --ntasks-per-node only, and --gres=gpu:N is taken.
void AddResourceFlags(CLI::App* sub, SubmitFlags& f, bool slurm_tasks = false);

// The syntax of a spec's node constraints (--nodelist, --exclude, --constraint, --mem),
// checked before submitting as the head checks it: kInvalidArgument naming the flag.
Result<void> CheckConstraintSyntax(const api::JobSpec& spec);

// ---- hold, release, update (job_control.cc) ----

// The body of POST /v1/jobs/{id}/update for `cohort update`'s flags: each checked (the
// error names the flag); kInvalidArgument when none is given.
Result<json> UpdateBody(const std::optional<std::string>& time_limit, const std::optional<int>& priority,
                        const std::optional<std::string>& name);

// ---- history (history.cc) ----

// Flags of `cohort history`, as typed ("" for one not given).
struct HistoryFlags {
  std::string user;
  std::vector<std::string> states;  // default: the ended states
  std::string since;
  std::string until;
  int limit = 100;
  std::vector<std::string> jobs;  // -j: only these (sacct -j): 12 (an array: its elements too), 12_7
};

// The query of GET /v1/jobs for `flags` at `now_ms`: states checked (default SUCCEEDED,
// FAILED, CANCELLED, TIMEOUT), times as ParseTimeFlag reads them; errors name the flag.
Result<std::vector<std::pair<std::string, std::string>>> HistoryQueryFor(const HistoryFlags& flags, int64_t now_ms);

// The sacct-like table: JOBID NAME USER STATE EXIT ELAPSED GPU-HOURS SUBMITTED ENDED
// REASON. EXIT is Slurm's "code:signal" ("-" for a job that never ran).
std::string RenderHistory(const std::vector<api::JobStatus>& jobs, int64_t now_ms);

// ---- queue (queue.cc) ----

// The squeue-like table: JOBID NAME USER STATE ATTEMPT NODES GPUS TIME NODELIST(REASON).
std::string RenderQueue(const std::vector<api::Job>& jobs, int64_t now_ms);
// The GPUs a job holds or asks for, as queue's GPUS column shows them: whole GPUs, a sharing
// job's parts (0.5), or the GPU memory it asks for alone (20GiB) until it is placed.
std::string JobGpusText(const api::Job& j);

// How `cohort queue` lays the table out: which columns (--format; empty: the default
// ones), the sort (--sort: column keys, each descending when given as -KEY), and the width
// to fit (0: none; the widest columns are cut first, never below a few characters, and
// when that is not enough the default table drops ATTEMPT, GPUS, NODES, USER, TIME in that
// order; columns named with --format are kept).
struct QueueView {
  std::vector<std::string> columns;
  std::vector<std::pair<std::string, bool>> sort;  // (key, descending)
  size_t width = 0;
  // The PROGRESS cells of running jobs that report progress (api::FormatProgressEta of
  // their "progress_eta"); by default the column shows only when some job has one.
  std::map<api::JobId, std::string> progress;
};
// `cohort show`'s progress line: "progress: 45% 2.1/s ETA 3m12s (step 450 of 1000)".
std::string RenderProgressEta(const api::ProgressEta& e);

// --format and --sort as typed ("id,name,state", "-priority,id"); errors name the flag
// and list the columns.
Result<QueueView> ParseQueueView(const std::string& format, const std::string& sort, size_t width);
std::string RenderQueue(std::vector<api::Job> jobs, int64_t now_ms, const QueueView& view);

// ---- logs (logs.cc) ----

// Where the last `lines` lines of a log begin, given `window`, its bytes from offset
// `window_start` to the end: an absolute offset, or -1 when the window holds fewer lines
// and does not reach the start (read a larger one). A final newline ends a line.
int64_t TailLineStart(std::string_view window, int64_t window_start, int64_t lines);

// ---- show (show.cc) ----

// The `key: value` report of one job, with its allocation, exits and attempt history.
std::string RenderJob(const api::Job& job, int64_t now_ms);
// A running job's tasks_usage: CPU time, resident memory, GPU memory and the GPU memory
// warning of a task over its part of a shared GPU (issue 18).
std::string RenderTaskUsage(const std::vector<api::TaskUsage>& tasks);

// ---- nodes (nodes.cc) ----

// The node table: NAME STATE GPUS CPUS GPU-TYPE ADDRESS HEARTBEAT JOBS REASON; GPUS is
// "allocated/total", with ", N bad" when the head counts unhealthy GPUs.
std::string RenderNodes(const std::vector<api::NodeStatus>& nodes);
// The detail report of one node, with a row per GPU.
std::string RenderNode(const api::NodeStatus& node);

// ---- drain (drain.cc) ----

// "Node n1 is DRAINING (jobs 3, 4 still running)" and similar.
std::string NodeStateLine(const api::NodeStatus& node);

// drain's and resume's NODE arguments, each a name or a Slurm host list ("node[1-4,7]"),
// as node names in order, each once; kInvalidArgument naming NODE for a bad list.
Result<std::vector<std::string>> ExpandNodeArgs(const std::vector<std::string>& args);

// ---- usage (usage.cc) ----

// The tables of `cohort usage` from a GET /v1/usage reply: per user (with a TOTAL row)
// and per job, GPU-hours with 4 decimals and, with a price, COST with 2.
std::string RenderUsage(const api::UsageReport& report, std::optional<double> price_per_gpu_hour);

// ---- times typed on the command line (time_flags.cc) ----

// A point in time typed on the command line: an RFC 3339 time ("2026-03-01T12:00:00Z",
// "2026-03-01T13:00:00.5+01:00") or a duration back from `now_ms` ("30m", "1h", "7d");
// Unix ms. kInvalidArgument naming `flag` otherwise.
Result<int64_t> ParseTimeFlag(std::string_view text, std::string_view flag, int64_t now_ms);

// The --user, --since and --until flags of a query (audit, history), as typed ("" for one
// not given): the user's name checked, each time read by ParseTimeFlag, --until after
// --since. Errors name the flag.
struct TimeWindow {
  std::optional<int64_t> since, until;  // Unix ms
};
Result<TimeWindow> ParseUserAndWindow(const std::string& user, const std::string& since, const std::string& until,
                                      int64_t now_ms);

// When a job may start, as Slurm's --begin reads it (sbatch(1)): now, now+COUNT[UNIT]
// (seconds by default; seconds, minutes, hours, days, weeks; or a duration: now+1h30m),
// HH:MM[:SS] (the next time the local clock shows it: today, or tomorrow once passed),
// midnight, noon, fika (15:00), teatime (16:00), today, tomorrow, YYYY-MM-DD[THH:MM[:SS]]
// in local time, or an RFC 3339 time with its zone. Unix ms (a time already past is kept:
// the job may start at once). kInvalidArgument naming `flag` otherwise.
Result<int64_t> ParseBeginTime(std::string_view text, std::string_view flag, int64_t now_ms);

// ---- audit (audit.cc) ----

// Flags of `cohort audit`, as typed ("" for one not given).
struct AuditFlags {
  std::string user;
  std::string since;
  std::string until;
  std::string limit = "100";
};

// The query of GET /v1/audit for `flags`: each flag checked, an error naming it (--user a
// valid user name, --since and --until times with since before until, --limit 1-10000).
Result<std::vector<std::pair<std::string, std::string>>> AuditQueryFor(const AuditFlags& flags, int64_t now_ms);

// The table of audit rows: TIME WHO TOKEN CLIENT REQUEST STATUS JOB ERROR (WHO: the user,
// else "node N", else the caller as the head described it).
std::string RenderAudit(const std::vector<api::AuditEntry>& entries);

// The preemptions of a job (`cohort show`): attempt, when, for which job and team, why,
// the work at risk and how each ended.
std::string RenderPreemptions(const api::Job& job);
// An allocation's steps (`cohort show`): id, start, duration, tasks, each rank's exit code
// ("-" while unknown) and the command.
std::string RenderSteps(const api::Job& job, int64_t now_ms);

// ---- teams and fair share (team.cc, shares.cc) ----

// A GPU amount of a team flag: "16" or "gpus=16", a whole number from 0 to
// api::kMaxTeamGpus; kInvalidArgument naming `flag` otherwise.
Result<int64_t> ParseTeamGpus(std::string_view text, std::string_view flag);
// `cohort team ls`: NAME QUOTA BORROW WEIGHT USERS.
std::string RenderTeams(const std::vector<api::Team>& teams);
// `cohort shares`, like sshare: each team's weight and share, quota and borrowing, GPUs in
// use, decayed usage and fair-share factor.
std::string RenderShares(const api::SharesReport& report);
// `cohort queue --priority`, like sprio: each pending job's priority and its weighted
// factors, in the order the scheduler considers them.
std::string RenderPriorities(const api::PriorityReport& report);

// ---- top (top.cc) ----

struct TopOptions {
  std::string head_url;  // shown in the first line
  size_t width = 120;    // columns every line is cut to (at least 40)
  int64_t now_ms = 0;    // used when the dashboard has no time_ms (none fetched yet)
  std::string status;    // an extra line under the summary ("cannot refresh: ...")
};

// One frame of `cohort top` from a GET /v1/dashboard reply: a summary line, then NODES,
// GPUS, RUNNING, QUEUE and RECENT tables. Readings the head does not have (telemetry
// before the agents report it) show as "-". No escape codes.
std::string RenderTop(const api::Dashboard& dashboard, const TopOptions& options);

// ---- logs (logs.cc) ----

// Prefixes each complete line of a rank's output with "[rank N] ". Partial lines are kept
// per rank until their newline arrives or Flush is called. One instance per `logs` run.
class RankLinePrefixer {
 public:
  // Returns the complete lines in `data` (and in what was buffered for `rank`), prefixed.
  std::string Feed(int rank, std::string_view data);
  // Returns the rank's buffered partial line, prefixed and ended with '\n' (or "").
  std::string Flush(int rank);

 private:
  std::map<int, std::string> partial_;
};

}  // namespace cohort::cli
