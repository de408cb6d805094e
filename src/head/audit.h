// AuditLog: the head's record of the requests that would change state (POST, PUT, DELETE):
// who made each (the Caller: user and token, or node, and the client's address), what it
// asked (method, path, the job it submitted or acted on), when, and what the head answered
// (status, and the error's message for a failure). Rows are api::AuditEntry, kept in the
// StateStore and read by GET /v1/audit (admins) and `cohort audit`.
//
// Which requests get a row (AuditEntryFor): every POST, PUT and DELETE the Router sees,
// refused ones included (401, 403, 400, ...: refused attempts are what an auditor looks
// for), except the successful ones of routes for agents and tasks (Access::kNode and
// kTask: heartbeats, rendezvous keys, progress reports), which come many a second on a big
// cluster and repeat what the state already shows; their failures get a row. A join
// (registering a node) is recorded like any API request.
//
// Write-behind: Record never waits for the disk. Rows go to a bounded queue that one writer
// thread appends to the store in batches, one transaction each, at most every flush
// interval, so a request pays no fsync of its own for its row; when the queue is full a row
// is dropped and counted (dropped_queue_full, cohort_audit_dropped_total). A row is durable
// within about a flush interval after its reply, not before it: a crash of the head can
// lose the last interval's rows. A batch the store refuses is dropped and counted
// (dropped_write_failed) and logged. The writer also trims the log (rows older than the
// retention, and all but the newest max_rows) when it starts and every trim interval, so
// the log stays bounded.
//
// Threads: Record, Flush, Query, Trim and stats from any thread, also concurrently. Stop
// (and the destructor) from one thread; after Stop, Record drops nothing but writes nothing
// more either (rows are counted as dropped), and Flush returns at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "api/audit.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"
#include "head/auth.h"
#include "head/router.h"
#include "store/state_store.h"

namespace cohort::head {

// The row for a request the Router answered, at `now_ms`, or nullopt when it gets none:
// a GET, or a successful (status < 400) request of a kNode or kTask route. The path is
// cut at 1,024 bytes and the error's message at 1,024; job_id is the job the path names
// (/v1/jobs/{id}/...) or the one the answer's Location header names (a submission).
std::optional<api::AuditEntry> AuditEntryFor(const Router::Route& route, const Caller& caller,
                                             const httplib::Request& req, const httplib::Response& res,
                                             int64_t now_ms);

class AuditLog {
 public:
  struct Options {
    size_t max_queued = 10'000;        // rows waiting for the writer; more are dropped
    Millis flush_interval{100};        // the writer gathers rows this long before a write
    int64_t retention_ms = int64_t{90} * 24 * 3600 * 1000;  // 0: keep rows however old
    int64_t max_rows = 10'000'000;     // 0: no cap on the number of rows
    Millis trim_interval{3'600'000};   // how often the writer trims
    std::function<int64_t()> now_ms;   // the wall clock trims use; NowUnixMs when empty
  };

  // Starts the writer thread. `store` must outlive the AuditLog.
  AuditLog(store::StateStore& store, Options options);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Queues `entry` for the writer; never blocks on the store. Drops it (counted) when the
  // queue is full or the log is stopped.
  void Record(api::AuditEntry entry) EXCLUDES(mu_);
  // Returns once every row queued before the call is written or dropped; the writer writes
  // at once instead of waiting for the flush interval. The error of the writer's latest
  // batch if the store refused it (rows were lost and no batch has been written since).
  Result<void> Flush() EXCLUDES(mu_);
  // Flush, then the store's rows for `q` (newest first): a query sees every row recorded
  // before it.
  Result<std::vector<api::AuditEntry>> Query(const store::AuditQuery& q) EXCLUDES(mu_);
  // Deletes rows past the retention and the row cap now; returns how many went.
  Result<int64_t> Trim();
  // Writes what is queued, then ends the writer. Idempotent.
  void Stop() EXCLUDES(mu_);

  struct Stats {
    uint64_t written = 0;               // rows stored
    uint64_t dropped_queue_full = 0;    // rows dropped: the queue was full (or stopped)
    uint64_t dropped_write_failed = 0;  // rows dropped: the store refused their batch
    uint64_t trimmed = 0;               // rows deleted by trims
  };
  Stats stats() const EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);
  int64_t NowMs() const { return options_.now_ms ? options_.now_ms() : NowUnixMs(); }

  store::StateStore& store_;
  const Options options_;
  mutable Mutex mu_;
  CondVar work_cv_;     // signalled when rows arrive, a flush is asked for, or on Stop
  CondVar written_cv_;  // signalled when the writer finishes a batch
  std::vector<api::AuditEntry> queue_ GUARDED_BY(mu_);
  uint64_t queued_seq_ GUARDED_BY(mu_) = 0;   // rows ever queued
  uint64_t written_seq_ GUARDED_BY(mu_) = 0;  // of them, those the writer has finished with
  uint64_t flush_wanted_ GUARDED_BY(mu_) = 0;  // a Flush waits for rows up to this seq
  std::optional<Error> last_error_ GUARDED_BY(mu_);  // of the latest batch written; none if it was
  bool stop_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;  // the writer has ended
  Stats stats_ GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace cohort::head
