#include "head/audit.h"

#include <algorithm>
#include <charconv>

#include "api/routes.h"
#include "common/http.h"
#include "common/log.h"

namespace cohort::head {

namespace {

constexpr size_t kMaxPathBytes = 1024;
constexpr size_t kMaxErrorBytes = 1024;

std::string Cut(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  return std::string(s.substr(0, max)) + "...";
}

// The positive decimal number `s` starts with; 0 if none.
api::JobId LeadingId(std::string_view s) {
  api::JobId id = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  return ec == std::errc() && end != s.data() && id > 0 ? id : 0;
}

// The segment after `prefix` in `path` ("" if the path does not start with it).
std::string_view SegmentAfter(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return {};
  std::string_view rest = path.substr(prefix.size());
  return rest.substr(0, rest.find('/'));
}

// A task route's path carries its capability, "JOB-ATTEMPT-MAC" (rendezvous.h), as its
// third segment: the row keeps the job and attempt and drops the MAC.
std::string RedactCapability(std::string_view path) {
  const size_t start = path.find('/', std::string_view("/v1/").size());
  if (start == std::string_view::npos) return std::string(path);
  const size_t end = std::min(path.find('/', start + 1), path.size());
  const std::string_view token = path.substr(start + 1, end - start - 1);
  const size_t mac = token.rfind('-');
  std::string out(path.substr(0, start + 1));
  out += mac == std::string_view::npos ? std::string_view() : token.substr(0, mac + 1);
  out += "(redacted)";
  out += path.substr(end);
  return out;
}

}  // namespace

std::optional<api::AuditEntry> AuditEntryFor(const Router::Route& route, const Caller& caller,
                                             const httplib::Request& req, const httplib::Response& res,
                                             int64_t now_ms) {
  if (route.method == "GET") return std::nullopt;
  const bool agents_or_tasks = route.access == Access::kNode || route.access == Access::kTask;
  if (agents_or_tasks && res.status < 400) return std::nullopt;
  // Inference requests change nothing the head keeps: only their refusals are kept.
  const bool inference = route.pattern == api::routes::kCompletions || route.pattern == api::routes::kChatCompletions;
  if (inference && res.status < 400) return std::nullopt;
  api::AuditEntry e;
  e.time_ms = now_ms;
  e.caller = caller.Describe();
  if (caller.kind == Caller::Kind::kToken) {
    e.user = caller.user;
    e.token_id = caller.token_id;
  } else if (caller.kind == Caller::Kind::kJob) {
    e.user = caller.user;
  } else if (caller.kind == Caller::Kind::kNode) {
    e.node = caller.node;
  }
  if (route.pattern == api::routes::kAgentRegister && e.node.empty()) {
    // A join: the row names the node it registers (the body's "name"), not only the join
    // token, so `cohort audit` says which machine joined.
    const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_object() && body.contains("name") && body["name"].is_string()) {
      e.node = Cut(body["name"].get<std::string>(), 256);
    }
  }
  e.client = Cut(req.remote_addr, 64);
  e.method = route.method;
  if (route.access == Access::kTask) {
    e.path = Cut(RedactCapability(req.path), kMaxPathBytes);
    e.job_id = LeadingId(SegmentAfter(req.path, "/v1/rendezvous/"));
    if (e.job_id == 0) e.job_id = LeadingId(SegmentAfter(req.path, "/v1/report/"));
  } else {
    e.path = Cut(req.path, kMaxPathBytes);
    e.job_id = LeadingId(SegmentAfter(req.path, "/v1/jobs/"));
    // A submission: the Location of the job it made.
    if (e.job_id == 0) e.job_id = LeadingId(SegmentAfter(res.get_header_value("Location"), "/v1/jobs/"));
  }
  e.status = res.status;
  if (res.status >= 400) e.error = Cut(ErrorFromResponse(res.status, res.body).message, kMaxErrorBytes);
  return e;
}

AuditLog::AuditLog(store::StateStore& store, Options options) : store_(store), options_(std::move(options)) {
  writer_ = std::thread([this] { Loop(); });
}

AuditLog::~AuditLog() { Stop(); }

void AuditLog::Record(api::AuditEntry entry) {
  MutexLock lock(mu_);
  if (stop_ || queue_.size() >= options_.max_queued) {
    if (stats_.dropped_queue_full++ % 1000 == 0) {
      LOG_WARN("audit log: dropping rows ({} so far): {}", stats_.dropped_queue_full,
               stop_ ? "the log is stopped" : "the writer is behind (the queue is full)");
    }
    return;
  }
  queue_.push_back(std::move(entry));
  ++queued_seq_;
  if (queue_.size() == 1) work_cv_.NotifyAll();
}

Result<void> AuditLog::Flush() {
  MutexLock lock(mu_);
  const uint64_t seq = queued_seq_;
  if (seq > flush_wanted_) flush_wanted_ = seq;
  work_cv_.NotifyAll();
  while (written_seq_ < seq && !stopped_) written_cv_.Wait(mu_);
  if (last_error_) return std::unexpected(*last_error_);
  return {};
}

Result<std::vector<api::AuditEntry>> AuditLog::Query(const store::AuditQuery& q) {
  if (auto flushed = Flush(); !flushed) LOG_WARN("audit log: {}", flushed.error().message);
  return store_.QueryAudit(q);
}

Result<int64_t> AuditLog::Trim() {
  const int64_t before = options_.retention_ms > 0 ? std::max<int64_t>(0, NowMs() - options_.retention_ms) : 0;
  if (before == 0 && options_.max_rows <= 0) return 0;
  const int64_t trimmed = COHORT_TRY(store_.TrimAudit(before, options_.max_rows));
  if (trimmed > 0) {
    LOG_INFO("audit log: trimmed {} rows (older than {}{})", trimmed, before > 0 ? FormatTimestamp(before) : "-",
             options_.max_rows > 0 ? fmt::format(", or beyond the newest {}", options_.max_rows) : "");
    MutexLock lock(mu_);
    stats_.trimmed += static_cast<uint64_t>(trimmed);
  }
  return trimmed;
}

void AuditLog::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    work_cv_.NotifyAll();
  }
  if (writer_.joinable()) writer_.join();
}

AuditLog::Stats AuditLog::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void AuditLog::Loop() {
  auto next_trim = SteadyClock::now();  // trims at start: the head may have been down a while
  MutexLock lock(mu_);
  while (true) {
    // Sleep until rows wait or a trim is due; then gather rows for a flush interval,
    // unless a Flush or Stop wants them now.
    work_cv_.WaitUntil(mu_, next_trim, [&] {
      mu_.AssertHeld();
      return stop_ || !queue_.empty();
    });
    if (!queue_.empty()) {
      work_cv_.WaitFor(mu_, options_.flush_interval, [&] {
        mu_.AssertHeld();
        return stop_ || flush_wanted_ > written_seq_;
      });
    }
    std::vector<api::AuditEntry> batch;
    batch.swap(queue_);
    const uint64_t end_seq = queued_seq_;
    const bool stop = stop_;
    const bool trim = SteadyClock::now() >= next_trim;

    lock.Unlock();
    Result<void> wrote = batch.empty() ? Result<void>() : store_.AppendAudit(batch);
    if (trim) {
      if (auto trimmed = Trim(); !trimmed) LOG_WARN("audit log: cannot trim: {}", trimmed.error().message);
    }
    lock.Lock();

    if (trim) next_trim = SteadyClock::now() + options_.trim_interval;
    if (batch.empty()) {
      // Only a trim: the latest write's outcome stands.
    } else if (wrote) {
      stats_.written += batch.size();
      last_error_.reset();
    } else {
      stats_.dropped_write_failed += batch.size();
      LOG_ERROR("audit log: {} rows lost: {}", batch.size(), wrote.error().message);
      last_error_ = wrote.error();
    }
    written_seq_ = end_seq;
    written_cv_.NotifyAll();
    if (stop && queue_.empty()) break;
  }
  stopped_ = true;
  written_cv_.NotifyAll();
}

}  // namespace cohort::head
