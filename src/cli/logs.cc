// `cohort logs JOB [-f] [--rank R] [--attempt A] [--tail LINES | --tail-bytes N]`: a
// job's output. --tail starts each rank's log at its last LINES lines (like tail -n),
// found by reading windows back from the end, 64 KiB and doubling; --tail-bytes at a
// byte count before the end.
//
// Without --rank every rank of the attempt is read (world size = nodes × tasks_per_node)
// and each line is printed as "[rank N] line"; partial lines wait per rank for their
// newline or the end. With --rank the bytes are printed as they are. -f keeps polling
// every 250 ms until every rank's log has ended (X-Cohort-Done), waits for a job that has
// not started (an array's element its array has not made yet too), and, unless --attempt pins one, follows the job into its next attempt
// after a restart. Like `kubectl logs -f`, the exit code does not depend on the job's
// result: 0 once the logs end, 1 if a rank's log could not be read (a note on stderr
// names it; a rank on a DOWN node is skipped, the others go on), 3 if the head is
// unreachable.
#include <cctype>
#include <thread>

#include "api/job_array.h"
#include "api/service.h"
#include "cli/client.h"
#include "cli/table.h"

namespace cohort::cli {
namespace {

constexpr Millis kPollInterval{250};
constexpr int64_t kChunkBytes = 1 << 20;

struct LogsFlags {
  std::string job;
  bool follow = false;
  std::optional<int> rank;
  std::optional<int> attempt;
  std::optional<int64_t> tail;        // lines
  std::optional<int64_t> tail_bytes;  // bytes
};

constexpr int64_t kTailWindowBytes = 64 << 10;
constexpr int64_t kTailMaxWindowBytes = 16 << 20;  // the head's largest log read

// Read position of one rank's log.
struct RankStream {
  int rank = 0;
  int64_t offset = 0;
  bool positioned = false;  // --tail: offset has been moved near the end
  bool done = false;        // the task ended and everything was read, or the log is unreadable
  bool failed = false;
};

std::string Header(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers) {
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        })) {
      return v;
    }
  }
  return {};
}

int64_t HeaderInt(const HttpResponse& r, std::string_view name, int64_t def) {
  std::string v = Header(r, name);
  if (v.empty()) return def;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  return end && *end == '\0' ? x : def;
}

void Note(const std::string& message) { std::fprintf(stderr, "cohort: note: %s\n", message.c_str()); }

class LogReader {
 public:
  LogReader(HttpClient head, api::JobId id, const LogsFlags& flags)
      : head_(std::move(head)), id_(id), flags_(flags), raw_(flags.rank.has_value()) {}

  bool any_failed() const { return any_failed_; }

  // Reads the attempt's logs of `ranks`: once up to the present, or with -f until each
  // has ended. Errors only for an unreachable head (or a protocol failure).
  Result<void> ReadAttempt(int attempt, const std::vector<int>& ranks) {
    std::vector<RankStream> streams;
    for (int r : ranks) streams.push_back(RankStream{.rank = r});
    while (true) {
      bool progress = false;
      bool all_done = true;
      for (auto& s : streams) {
        if (s.done) continue;
        progress |= COHORT_TRY(Drain(attempt, s));
        if (s.done) Emit(prefixer_.Flush(s.rank));
        all_done &= s.done;
      }
      std::fflush(stdout);
      if (all_done || !flags_.follow) break;
      if (!progress) std::this_thread::sleep_for(kPollInterval);
    }
    for (auto& s : streams) Emit(prefixer_.Flush(s.rank));
    std::fflush(stdout);
    return {};
  }

 private:
  // Reads what `s` has now, chunk by chunk. Returns whether any bytes came.
  Result<bool> Drain(int attempt, RankStream& s) {
    if ((flags_.tail || flags_.tail_bytes) && !s.positioned) {
      auto r = COHORT_TRY(Fetch(attempt, s, 0, 1));
      if (!r) return false;
      const int64_t size = HeaderInt(*r, "X-Cohort-Size", 0);
      if (flags_.tail_bytes) {
        s.offset = std::max<int64_t>(0, size - *flags_.tail_bytes);
      } else {
        // Windows back from the end until one holds the last N lines or the start; past
        // the head's largest read (16 MiB) the output starts where that window does.
        s.offset = 0;
        for (int64_t window = kTailWindowBytes; size > 0; window *= 2) {
          const int64_t start = std::max<int64_t>(0, size - std::min(window, kTailMaxWindowBytes));
          auto w = COHORT_TRY(Fetch(attempt, s, start, size - start));
          if (!w) return false;
          const int64_t at = TailLineStart(w->body, start, *flags_.tail);
          if (at >= 0 || window >= kTailMaxWindowBytes) {
            s.offset = at >= 0 ? at : start;
            break;
          }
        }
      }
      s.positioned = true;
    }
    bool progress = false;
    while (true) {
      auto r = COHORT_TRY(Fetch(attempt, s, s.offset, kChunkBytes));
      if (!r) return progress;
      if (!r->body.empty()) {
        progress = true;
        if (raw_) {
          std::fwrite(r->body.data(), 1, r->body.size(), stdout);
        } else {
          Emit(prefixer_.Feed(s.rank, r->body));
        }
      }
      int64_t next = HeaderInt(*r, "X-Cohort-Next-Offset", s.offset + static_cast<int64_t>(r->body.size()));
      int64_t size = HeaderInt(*r, "X-Cohort-Size", next);
      s.offset = next;
      if (Header(*r, "X-Cohort-Done") == "1") s.done = true;
      if (s.done || r->body.empty() || next >= size) return progress;
    }
  }

  // One GET. A log that cannot be read (its node is down, the agent lost it) prints a
  // note and marks the rank done and failed: nullopt. An unreachable head is an error.
  Result<std::optional<HttpResponse>> Fetch(int attempt, RankStream& s, int64_t offset, int64_t limit) {
    auto r = COHORT_TRY(head_.GetRaw(api::routes::WithQuery(api::routes::JobLogs(id_), {{"rank", std::to_string(s.rank)},
                                                                                      {"attempt", std::to_string(attempt)},
                                                                                      {"offset", std::to_string(offset)},
                                                                                      {"limit", std::to_string(limit)}})));
    if (r.status >= 200 && r.status < 300) return std::optional<HttpResponse>(std::move(r));
    Error e = ErrorFromResponse(r.status, r.body);
    // Refused credentials are the caller's, not the rank's: every rank would be refused,
    // and the exit code says so (4), as every other command's refusal does.
    if (e.code == ErrorCode::kFailedPrecondition || e.code == ErrorCode::kInvalidArgument ||
        e.code == ErrorCode::kPermissionDenied || e.code == ErrorCode::kUnauthenticated) {
      return std::unexpected(std::move(e));
    }
    Note(fmt::format("rank {}: {}{}", s.rank, e.message,
                     e.code == ErrorCode::kUnavailable ? "; skipping this rank" : ""));
    s.done = true;
    s.failed = true;
    any_failed_ = true;
    return std::optional<HttpResponse>();
  }

  void Emit(const std::string& text) {
    if (!text.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
  }

  HttpClient head_;
  api::JobId id_;
  const LogsFlags& flags_;
  bool raw_;
  bool any_failed_ = false;
  RankLinePrefixer prefixer_;
};

std::unexpected<Error> ArrayHasNoOutput(const api::Job& array) {
  auto spec = api::ParseArraySpec(array.spec.array, "array");
  const int64_t first = spec && !spec->indices.empty() ? spec->indices.min() : 0;
  return MakeError(ErrorCode::kInvalidArgument,
                   fmt::format("job {} is a job array ({}): each element has its own output; name one, e.g. "
                               "cohort logs {}_{} (cohort queue lists them)",
                               array.id, array.spec.array, array.id, first));
}

// The job once it has started (history not empty). Without -f a job that has not started
// is kFailedPrecondition; with -f this polls until it starts or ends without starting,
// saying on stderr that it waits and why (again whenever the reason changes).
Result<api::Job> WaitForStart(const HttpClient& head, api::JobId id, bool follow) {
  std::string told;  // the last "waiting" note, printed again only when the reason changes
  while (true) {
    api::Job job = COHORT_TRY(FetchJob(head, id));
    // An array never runs itself (it would wait here until its last element ended): each
    // element has its own output.
    if (job.spec.is_array()) return ArrayHasNoOutput(job);
    if (!job.history.empty()) return job;
    if (api::IsTerminal(job.state)) {
      return Errorf(ErrorCode::kFailedPrecondition, "job {} ended before it started ({}: {})", id,
                    api::JobStateName(job.state), job.reason);
    }
    if (!follow) {
      return Errorf(ErrorCode::kFailedPrecondition, "job {} has not started yet ({}: {}); use -f to wait for it",
                    id, api::JobStateName(job.state), job.reason.empty() ? "no reason given" : job.reason);
    }
    std::string note = fmt::format("job {} is {}, waiting for it to start: {}", id, api::JobStateName(job.state),
                                   job.reason.empty() ? "no reason given" : job.reason);
    if (note != told) Note(note);
    told = std::move(note);
    std::this_thread::sleep_for(kPollInterval);
  }
}

// After an attempt's logs ended under -f: the next attempt to follow, or nullopt when the
// job has ended with `attempt` as its last.
Result<std::optional<int>> NextAttempt(const HttpClient& head, api::JobId id, int attempt) {
  while (true) {
    api::Job job = COHORT_TRY(FetchJob(head, id));
    int latest = job.history.empty() ? attempt : job.history.back().attempt;
    if (latest > attempt) return std::optional<int>(latest);
    if (api::IsTerminal(job.state)) return std::optional<int>();
    std::this_thread::sleep_for(kPollInterval);
  }
}

// An array's element not made yet (it waits in its array under the throttle): with -f,
// polls until the array makes it, saying on stderr that it waits and why; the id of its
// job then. Without -f, or when the index is not waiting (cancelled, or no such index),
// the head's error `not_found`.
Result<api::JobId> WaitForElement(const HttpClient& head, const api::JobRef& ref, bool follow, Error not_found) {
  std::string told;
  const std::string text = fmt::format("{}_{}", ref.job, ref.task);
  while (follow) {
    api::Job array = COHORT_TRY(FetchJob(head, ref.job));
    auto left = api::ArrayIndexSet::Parse(array.array_left, "array_left");
    if (!array.spec.is_array() || api::IsTerminal(array.state) || array.array_left.empty() || !left ||
        !left->contains(ref.task)) {
      // Made meanwhile, or never will be; or being made this moment (taken from the
      // waiting indices, its job not committed yet: core/arrays.h), then look again.
      auto id = ResolveJobRef(head, text);
      if (id || id.error().code != ErrorCode::kNotFound ||
          id.error().message.find("is being made") == std::string::npos) {
        return id;  // its job, or why it will never be made (cancelled before it started)
      }
    } else {
      std::string note = fmt::format("element {}_{} has not started yet, waiting for its array to make it: {}",
                                     ref.job, ref.task, array.reason.empty() ? "no reason given" : array.reason);
      if (note != told) Note(note);
      told = std::move(note);
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return std::unexpected(std::move(not_found));
}

int Run(const LogsFlags& flags, const GlobalOptions& global) {
  auto ref = api::ParseJobRef(flags.job, "job id");
  if (!ref) return ReportError(ref.error());
  HttpClient head = HeadClient(global);
  auto id = ResolveJobRef(head, flags.job);  // "12_7": the element's own job
  if (!id && ref->is_element() && id.error().code == ErrorCode::kNotFound) {
    id = WaitForElement(head, *ref, flags.follow, id.error());
  }
  if (!id) return ReportError(id.error());
  auto job = WaitForStart(head, *id, flags.follow);
  if (!job) return ReportError(job.error());
  int world = job->spec.world_size();
  if (flags.rank && *flags.rank >= world) {
    return ReportError(MakeError(ErrorCode::kInvalidArgument,
                             fmt::format("--rank: job {} has ranks 0..{}, got {}", *id, world - 1, *flags.rank)).error());
  }
  int attempt = job->history.back().attempt;
  if (flags.attempt) {
    if (auto missing = api::MissingAttemptRecord(*job, *flags.attempt)) {
      return ReportError(MakeError(ErrorCode::kInvalidArgument, "--attempt: " + *missing).error());
    }
    attempt = *flags.attempt;
  }
  std::vector<int> ranks;
  if (flags.rank) {
    ranks.push_back(*flags.rank);
  } else {
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  }

  LogReader reader(head, *id, flags);
  while (true) {
    auto read = reader.ReadAttempt(attempt, ranks);
    if (!read) return ReportError(read.error());
    if (!flags.follow || flags.attempt) break;
    auto next = NextAttempt(head, *id, attempt);
    if (!next) return ReportError(next.error());
    if (!*next) break;
    attempt = **next;
    Note(fmt::format("job {} restarted; following attempt {}", *id, attempt));
  }
  return reader.any_failed() ? 1 : 0;
}

}  // namespace

std::string RankLinePrefixer::Feed(int rank, std::string_view data) {
  std::string& buf = partial_[rank];
  buf.append(data);
  std::string out;
  size_t start = 0;
  while (true) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    out += fmt::format("[rank {}] ", rank);
    out.append(buf, start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  return out;
}

std::string RankLinePrefixer::Flush(int rank) {
  auto it = partial_.find(rank);
  if (it == partial_.end() || it->second.empty()) return {};
  std::string out = fmt::format("[rank {}] {}\n", rank, it->second);
  it->second.clear();
  return out;
}

int64_t TailLineStart(std::string_view window, int64_t window_start, int64_t lines) {
  // A final newline ends the last line; it starts none.
  size_t end = window.size();
  if (end > 0 && window[end - 1] == '\n') --end;
  if (lines == 0) return window_start + static_cast<int64_t>(window.size());
  int64_t seen = 0;
  for (size_t i = end; i > 0; --i) {
    if (window[i - 1] == '\n' && ++seen == lines) return window_start + static_cast<int64_t>(i);
  }
  return window_start == 0 ? 0 : -1;
}

// A count or index of 0 or more (CLI::NonNegativeNumber's message names the largest double
// as its upper bound).
const CLI::Validator kZeroOrMore(
    [](std::string& text) -> std::string {
      return !text.empty() && text[0] == '-' ? "must be 0 or more, got " + text : std::string();
    },
    "");

void AddLogsCommand(CommandContext& ctx) {
  auto f = std::make_shared<LogsFlags>();
  auto* sub = ctx.app.add_subcommand("logs", "Print a job's output (every rank, prefixed; or one rank, raw)");
  sub->add_option("JOB", f->job, "Job id; 12_7 is element 7 of array 12")->required();
  sub->add_flag("-f,--follow", f->follow, "Keep printing new output until the job's logs end");
  sub->add_option_function<int>("-r,--rank", [f](const int& r) { f->rank = r; }, "Only this rank, printed raw")
      ->check(kZeroOrMore);
  sub->add_option_function<int>("-a,--attempt", [f](const int& a) { f->attempt = a; },
                                "This attempt (default: the latest)")
      ->check(kZeroOrMore);
  auto* lines = sub->add_option_function<int64_t>("--tail", [f](const int64_t& t) { f->tail = t; },
                                                  "Start at the last this many lines of each rank's log (like tail -n)")
                    ->check(kZeroOrMore);
  sub->add_option_function<int64_t>("--tail-bytes", [f](const int64_t& t) { f->tail_bytes = t; },
                                    "Start this many bytes before the end of each rank's log")
      ->check(kZeroOrMore)
      ->excludes(lines);
  AddClientOptions(sub, ctx.global);
  GlobalOptions& global = ctx.global;
  ctx.on_run(sub, [f, &global] { return Run(*f, global); });
}

}  // namespace cohort::cli
