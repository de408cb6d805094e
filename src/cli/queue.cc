// `cohort queue [--all] [--state S[,S...]] [--user U] [--limit N]`: the job list, like
// squeue. By default PENDING and RUNNING jobs, oldest first; --all adds ended ones.
// `cohort queue --priority`: the pending jobs' priority factors instead, like sprio.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>
#include <thread>

#include "api/gpu_request.h"
#include "api/gpu_spec.h"
#include "api/job_array.h"
#include "cli/client.h"
#include "cli/table.h"
#include "common/clock.h"

namespace cohort::cli {
namespace {

struct QueueFlags {
  bool all = false;
  std::vector<std::string> states;
  std::string user;
  std::vector<std::string> jobs;  // -j: only these (squeue -j), any state unless --state
  int limit = 0;
  bool priority = false;
  std::string format;
  std::string sort;
  bool me = false;        // --me: -u as the head knows this client
  bool watching = false;  // --watch given
  std::string watch;      // its value, a duration ("" : 2s)
  int width = -1;      // -1: the terminal's when stdout is one; 0: never cut
};

// The pending jobs' priority factors, like sprio: with -u and -j (sprio's own), only those
// jobs' rows, found through the job list as `cohort queue` finds them.
int RunPriority(const QueueFlags& f, const GlobalOptions& global) {
  if (f.all || !f.states.empty() || !f.format.empty() || !f.sort.empty() || f.limit > 0 || f.watching) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                                 "--priority lists the pending jobs' priority factors (sprio): it takes -u and -j, "
                                 "not --all, --state, --format, --sort, --limit or --watch")
                           .error());
  }
  auto refs = ParseJobRefs(f.jobs);
  if (!refs) return ReportError(refs.error());
  HttpClient head = HeadClient(global);
  std::optional<std::set<int64_t>> only;
  if (!f.user.empty() || !refs->empty()) {
    std::vector<std::pair<std::string, std::string>> params = {{"state", "PENDING"}};
    if (!f.user.empty()) params.emplace_back("user", f.user);
    auto listed = FetchAllPages(head, api::routes::WithQuery(api::routes::kJobs, params), "jobs");
    if (!listed) return ReportError(listed.error());
    only.emplace();
    for (const auto& j : listed->value("jobs", json::array())) {
      if (refs->empty() || JobMatchesRefs(j, *refs)) only->insert(j.value("id", int64_t{0}));
    }
  }
  auto reply = head.Get(api::routes::kPriorities);
  if (!reply) return ReportError(reply.error());
  auto report = FromHead(api::PriorityReportFromJson(*reply), "priority report");
  if (!report) return ReportError(report.error());
  if (only) {
    std::erase_if(report->jobs, [&](const api::JobPriority& p) { return !only->contains(p.id); });
  }
  if (global.json) {
    PrintJson(api::ToJson(*report));
    return 0;
  }
  std::fputs(RenderPriorities(*report).c_str(), stdout);
  return 0;
}

// The terminal's width when stdout is one ($COLUMNS otherwise), or 0 (no limit).
size_t OutputWidth() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) return static_cast<size_t>(std::atoi(c));
  return 0;
}

// "PENDING,RUNNING" for the query, after checking each name locally.
Result<std::string> StateQuery(const QueueFlags& f) {
  if (f.states.empty()) return f.all || !f.jobs.empty() ? std::string("all") : std::string("PENDING,RUNNING");
  return ParseStateList(f.states, "--state");
}

// One fetch and one rendering: the table (or the reply, --json) as text.
// `refs`: -j's, parsed.
Result<std::string> Frame(const QueueFlags& f, const std::vector<api::JobRef>& refs, const QueueView& view,
                          const std::string& path, const GlobalOptions& global) {
  // --limit: the newest N, one page; otherwise every page.
  json reply = COHORT_TRY(f.limit > 0 ? HeadClient(global).Get(path) : FetchAllPages(HeadClient(global), path, "jobs"));
  KeepJobsMatchingRefs(reply, refs);
  if (global.json) return reply.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  if (!reply.is_object() || !reply.contains("jobs") || !reply["jobs"].is_array()) {
    return MakeError(ErrorCode::kInternal, "malformed job list from the head: no 'jobs' array");
  }
  std::vector<api::Job> jobs;
  QueueView with_progress = view;
  for (const auto& j : reply["jobs"]) {
    jobs.push_back(COHORT_TRY(api::JobFromJson(j)));
    if (j.contains("progress_eta")) {
      auto eta = COHORT_TRY(api::ProgressEtaFromJson(j["progress_eta"], "progress_eta"));
      with_progress.progress[jobs.back().id] = api::FormatProgressEta(eta);
    }
  }
  return RenderQueue(std::move(jobs), NowUnixMs(), with_progress);
}

int Run(const QueueFlags& f, const GlobalOptions& global) {
  if (f.priority) return RunPriority(f, global);
  auto refs = ParseJobRefs(f.jobs);
  if (!refs) return ReportError(refs.error());
  auto states = StateQuery(f);
  if (!states) return ReportError(states.error());
  auto view = ParseQueueView(f.format, f.sort, f.width >= 0 ? static_cast<size_t>(f.width) : OutputWidth());
  if (!view) return ReportError(view.error());
  std::vector<std::pair<std::string, std::string>> params;
  if (!states->empty()) params.emplace_back("state", *states);
  if (!f.user.empty()) params.emplace_back("user", f.user);
  if (f.limit > 0) params.emplace_back("limit", std::to_string(f.limit));
  if (!refs->empty()) params.emplace_back("jobs", JobRefsQuery(*refs));
  const std::string path = api::routes::WithQuery(api::routes::kJobs, params);
  int64_t watch_ms = 0;
  if (f.watching) {
    auto ms = f.watch.empty() ? Result<int64_t>(2000) : ParseDurationMs(f.watch, "--watch");
    if (!ms) return ReportError(ms.error());
    if (*ms < 100) return ReportError(FieldError("--watch", "must be at least 100ms, got '{}'", f.watch).error());
    watch_ms = *ms;
  }
  if (watch_ms == 0) {
    auto frame = Frame(f, *refs, *view, path, global);
    if (!frame) return ReportError(frame.error());
    std::fputs(frame->c_str(), stdout);
    return 0;
  }
  // --watch, like watch(1): clear, a title line, the frame; an unreachable head is shown,
  // not fatal (it may be restarting). Ctrl-C ends it.
  const bool tty = isatty(STDOUT_FILENO);
  while (true) {
    auto frame = Frame(f, *refs, *view, path, global);
    std::string text = fmt::format("{}Every {}: cohort queue    {}\n\n", tty ? "\033[H\033[2J" : "",
                                   FormatDuration(watch_ms), FormatTimestamp(NowUnixMs()));
    text += frame ? *frame : "cohort: error: " + frame.error().message + "\n";
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (!frame && ExitCodeFor(frame.error()) != 3) return ReportError(frame.error());
    std::this_thread::sleep_for(std::chrono::milliseconds(watch_ms));
  }
}

// The GPUs a job holds (its current attempt's) or asks for: whole GPUs, or a sharing job's
// parts of GPUs (two tasks of a quarter each: 0.5); a request of GPU memory alone is a
// part known once placed, shown as the memory until then.
double JobGpuAmount(const api::Job& j) {
  const api::JobSpec& s = j.spec;
  if (!s.shares_gpu()) return static_cast<double>(s.nodes) * s.gpus_per_node;
  if (!j.history.empty() && j.history.back().attempt == j.attempt) return api::AttemptGpuAmount(s, j.history.back());
  // Placed, without its history (the dashboard's jobs): its tasks' slices.
  int64_t units = 0;
  for (const api::NodeAllocation& na : j.allocation.nodes) units += api::AllocationShareUnits(s, na);
  if (units > 0) return static_cast<double>(units) / api::kGpuShareUnits;
  return static_cast<double>(s.nodes) * s.tasks_per_node * s.gpu_share / api::kGpuShareUnits;
}

}  // namespace

std::string JobGpusText(const api::Job& j) {
  const double amount = JobGpuAmount(j);
  if (amount == 0 && j.spec.gpu_memory_mib > 0) return api::MemoryMibText(j.spec.gpu_memory_mib);
  return fmt::format("{:g}", amount);
}

namespace {

struct Column {
  const char* key;
  const char* header;
  size_t max_width;  // 0: unlimited
  size_t min_width;  // the narrowest it is cut to when fitting the terminal
  std::function<std::string(const api::Job&, int64_t now_ms)> value;
};

std::string WhereOrWhy(const api::Job& job) {
  std::vector<std::string> nodes;
  for (const auto& n : job.allocation.nodes) nodes.push_back(n.node);
  if (job.state == api::JobState::kRunning || (api::IsTerminal(job.state) && !nodes.empty())) {
    return FormatHostList(nodes);
  }
  return "(" + (job.reason.empty() ? std::string("None") : job.reason) + ")";
}

// "1/3": the attempt, and the restarts allowed. Moves (drain --now, preemption) start
// attempts that are not restarts: "3 (2/2)" is attempt 3, two of two restarts used.
std::string AttemptText(const api::Job& j) {
  std::string a = std::to_string(j.attempt);
  if (j.spec.max_restarts <= 0) return a;
  if (j.moves > 0) return fmt::format("{} ({}/{})", a, j.attempt - j.moves, j.spec.max_restarts);
  return a + "/" + std::to_string(j.spec.max_restarts);
}

const std::vector<Column>& Columns() {
  static const std::vector<Column> kColumns = {
      {"id", "JOBID", 0, 5, [](const api::Job& j, int64_t) { return api::DisplayJobId(j); }},
      {"name", "NAME", 24, 8, [](const api::Job& j, int64_t) { return j.spec.name; }},
      {"user", "USER", 16, 6, [](const api::Job& j, int64_t) { return j.spec.user; }},
      {"state", "STATE", 0, 9, [](const api::Job& j, int64_t) { return std::string(api::JobStateName(j.state)); }},
      {"attempt", "ATTEMPT", 0, 7, [](const api::Job& j, int64_t) { return AttemptText(j); }},
      {"nodes", "NODES", 0, 5, [](const api::Job& j, int64_t) { return std::to_string(j.spec.nodes); }},
      {"gpus", "GPUS", 0, 4, [](const api::Job& j, int64_t) { return JobGpusText(j); }},
      {"time", "TIME", 0, 4,
       [](const api::Job& j, int64_t now) {
         auto run = JobRunTimeMs(j, now);
         return run ? FormatDuration(*run) : std::string("-");
       }},
      // Filled from QueueView::progress by RenderQueue (the Job alone does not carry it).
      {"progress", "PROGRESS", 28, 8, [](const api::Job&, int64_t) { return std::string("-"); }},
      {"nodelist", "NODELIST(REASON)", 80, 16, [](const api::Job& j, int64_t) { return WhereOrWhy(j); }},
      {"priority", "PRIORITY", 0, 8, [](const api::Job& j, int64_t) { return std::to_string(j.spec.priority); }},
      {"submitted", "SUBMITTED", 0, 9, [](const api::Job& j, int64_t) { return FormatTimestamp(j.submit_ms); }},
      {"timelimit", "TIME_LIMIT", 0, 10,
       [](const api::Job& j, int64_t) { return FormatTimeLimit(j.spec.time_limit_s); }},
      {"reason", "REASON", 80, 16, [](const api::Job& j, int64_t) { return j.reason.empty() ? "-" : j.reason; }},
      {"command", "COMMAND", 60, 12, [](const api::Job& j, int64_t) {
         return j.spec.is_allocation() ? std::string("(allocation)") : ShellJoin(j.spec.command);
       }},
  };
  return kColumns;
}

std::vector<std::string> ColumnKeys() {
  std::vector<std::string> keys;
  for (const auto& c : Columns()) keys.emplace_back(c.key);
  return keys;
}

// The sort key of a job for `key` (a column key): numbers compare as numbers.
std::pair<int64_t, std::string> SortValue(const api::Job& j, const std::string& key, int64_t now_ms) {
  if (key == "id") return {j.id, ""};
  if (key == "priority") return {j.spec.priority, ""};
  if (key == "submitted") return {j.submit_ms, ""};
  if (key == "nodes") return {j.spec.nodes, ""};
  if (key == "gpus") return {static_cast<int64_t>(JobGpuAmount(j) * api::kGpuShareUnits), ""};
  if (key == "attempt") return {j.attempt, ""};
  if (key == "timelimit") return {j.spec.time_limit_s, ""};
  if (key == "time") return {JobRunTimeMs(j, now_ms).value_or(-1), ""};
  for (const auto& c : Columns()) {
    if (key == c.key) return {0, c.value(j, now_ms)};
  }
  return {0, ""};
}

}  // namespace

Result<QueueView> ParseQueueView(const std::string& format, const std::string& sort, size_t width) {
  QueueView v;
  v.width = width;
  auto split = [](const std::string& text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find(',', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) out.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return out;
  };
  const std::vector<std::string> keys = ColumnKeys();
  auto known = [&](const std::string& k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
  if (!format.empty()) {
    for (auto& k : split(format)) {
      if (!known(k)) {
        return FieldError("--format", "unknown column '{}'; columns: {}", k, Join(keys, ",", ""));
      }
      v.columns.push_back(k);
    }
    if (v.columns.empty()) return FieldError("--format", "names no column; columns: {}", Join(keys, ",", ""));
  }
  for (auto& k : split(sort)) {
    bool descending = k.starts_with('-');
    std::string key = descending ? k.substr(1) : k;
    if (!known(key)) return FieldError("--sort", "unknown key '{}'; keys: {} (prefix - to reverse)", key, Join(keys, ",", ""));
    v.sort.emplace_back(key, descending);
  }
  return v;
}

std::string RenderQueue(std::vector<api::Job> jobs, int64_t now_ms, const QueueView& view) {
  // An active array is shown by its elements once none of its indices waits unstarted.
  std::erase_if(jobs, [](const api::Job& j) {
    return j.spec.is_array() && !api::IsTerminal(j.state) && j.array_left.empty();
  });
  std::vector<const Column*> cols;
  static const std::vector<std::string> kDefault = {"id",    "name", "user", "state",   "attempt",
                                                    "nodes", "gpus", "time", "nodelist"};
  std::vector<std::string> defaults = kDefault;
  if (!view.progress.empty()) defaults.insert(defaults.end() - 1, "progress");
  for (const auto& key : view.columns.empty() ? defaults : view.columns) {
    for (const auto& c : Columns()) {
      if (key == c.key) cols.push_back(&c);
    }
  }
  if (!view.sort.empty()) {
    std::stable_sort(jobs.begin(), jobs.end(), [&](const api::Job& a, const api::Job& b) {
      for (const auto& [key, descending] : view.sort) {
        auto va = SortValue(a, key, now_ms), vb = SortValue(b, key, now_ms);
        if (va != vb) return descending ? vb < va : va < vb;
      }
      return false;
    });
  }
  // The default columns the table drops, in this order, when even cut to their minimums
  // they overflow the width (columns named with --format are kept).
  static const std::vector<std::string> kDropOrder = {"attempt", "gpus", "nodes", "user", "time", "progress"};
  size_t dropped = 0;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> widths;
  while (true) {
    header.clear();
    rows.clear();
    for (const Column* c : cols) header.emplace_back(c->header);
    for (const auto& job : jobs) {
      std::vector<std::string> row;
      for (const Column* c : cols) {
        if (std::string_view(c->key) == "progress") {
          auto p = view.progress.find(job.id);
          row.push_back(p != view.progress.end() ? p->second : "-");
        } else {
          row.push_back(c->value(job, now_ms));
        }
      }
      rows.push_back(std::move(row));
    }
    // Each column as wide as its widest cell (within its maximum); to fit `width`, the
    // widest cuttable columns give way first, never below their minimum.
    widths.assign(cols.size(), 0);
    for (size_t i = 0; i < cols.size(); ++i) {
      widths[i] = DisplayWidth(header[i]);
      for (const auto& r : rows) widths[i] = std::max(widths[i], DisplayWidth(r[i]));
      if (cols[i]->max_width) widths[i] = std::min(widths[i], std::max(cols[i]->max_width, DisplayWidth(header[i])));
    }
    if (view.width == 0) break;
    size_t total = 0;
    for (size_t w : widths) total += w + 2;
    total -= 2;
    while (total > view.width) {
      size_t widest = cols.size();
      for (size_t i = 0; i < cols.size(); ++i) {
        const size_t floor = std::max(cols[i]->min_width, DisplayWidth(header[i]));
        if (widths[i] > floor && (widest == cols.size() || widths[i] > widths[widest])) widest = i;
      }
      if (widest == cols.size()) break;  // nothing left to cut
      --widths[widest];
      --total;
    }
    if (total <= view.width || !view.columns.empty() || dropped == kDropOrder.size()) break;
    std::erase_if(cols, [&](const Column* c) { return kDropOrder[dropped] == c->key; });
    ++dropped;
  }
  Table t(header, 0);
  for (size_t i = 0; i < cols.size(); ++i) t.SetMaxWidth(i, widths[i]);
  for (auto& r : rows) t.AddRow(std::move(r));
  return t.Render();
}

std::string RenderQueue(const std::vector<api::Job>& jobs, int64_t now_ms) { return RenderQueue(jobs, now_ms, QueueView{}); }

void AddQueueCommand(CommandContext& ctx) {
  auto f = std::make_shared<QueueFlags>();
  auto* sub = ctx.app.add_subcommand("queue", "List jobs (pending and running by default), like squeue");
  sub->alias("squeue");
  sub->add_flag("-a,--all", f->all, "Include jobs that have ended");
  sub->add_option("-s,--state", f->states,
                  "Only jobs in these states (PENDING,RUNNING,SUCCEEDED,FAILED,CANCELLED,TIMEOUT)")
      ->delimiter(',');
  sub->add_option("-u,--user", f->user, "Only this user's jobs");
  sub->add_flag("--me", f->me, "Only your jobs (as the head knows you: cohort whoami), like squeue --me");
  sub->add_option("-j,--jobs", f->jobs,
                  "Only these jobs, comma-separated, in any state unless --state: 12 (an array: all its "
                  "elements), 12_7 (one element), like squeue -j")
      ->delimiter(',');
  sub->add_flag("--priority", f->priority,
                "The pending jobs' priority and its factors (fair share, age, size, the job's own), like sprio");
  sub->add_option("--limit", f->limit, "At most this many jobs (the newest)")->check(CLI::Range(1, 10'000));
  sub->add_option("-o,--format", f->format,
                  "Columns, comma-separated: " + Join(ColumnKeys(), ",", "") +
                      " (default id,name,user,state,attempt,nodes,gpus,time,nodelist)");
  sub->add_option("-S,--sort", f->sort, "Sort by columns, comma-separated; -KEY reverses (e.g. -priority,id)");
  sub->add_option("-w,--watch", f->watch, "Redraw every this long, a duration (default 2s), until Ctrl-C")
      ->expected(0, 1);
  sub->add_option("--width", f->width, "Cut the table to this many columns (default: the terminal's; 0: never)");
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, sub, &global] {
    f->watching = sub->count("--watch") > 0;
    if (f->me) {
      if (!f->user.empty()) {
        return ReportError(MakeError(ErrorCode::kInvalidArgument, "give -u USER or --me, not both").error());
      }
      auto mine = MyUserName(HeadClient(global));
      if (!mine) return ReportError(mine.error());
      f->user = *mine;
    }
    return Run(*f, global);
  });
}

}  // namespace cohort::cli
