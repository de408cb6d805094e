// RendezvousStore: the per-job key-value store on the head (COHORT_RENDEZVOUS).
//
// A job's tasks reach it at {head}/v1/rendezvous/{token}. The token names the job and
// attempt and carries an HMAC-SHA256 of both under a secret the head keeps in its state
// store, so it survives head restarts and cannot be guessed: jobs cannot read each
// other's keys. The same secret makes each attempt's job token (COHORT_JOB_TOKEN,
// "cohortjob_<job>-<attempt>-<MAC>", the MAC over another purpose so neither token can be
// made from the other): the bearer credential with which a task reads its own job's state
// through the API (auth.h, Caller::Kind::kJob). Keys live in memory, per (job, attempt); they go when the attempt ends
// (the gang finished, failed or was requeued) and are lost if the head restarts.
//
// Threads: every method may be called from any thread; one mutex guards the keys and a
// condition variable wakes waiters. It never calls into Cluster (lock order: the
// cluster's mutex may be held when calling DropJob, never the reverse).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "api/types.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/mutex.h"

namespace cohort::head {

struct RendezvousScope {
  api::JobId job = 0;
  int attempt = 0;
  auto operator<=>(const RendezvousScope&) const = default;
};

class RendezvousStore {
 public:
  // `secret` keys the token MAC; at least 16 bytes.
  explicit RendezvousStore(std::string secret);

  // The token for a job's attempt: "<job>-<attempt>-<hex MAC>". Kept once made (every
  // heartbeat reply carries it in each task's environment) until DropJob.
  std::string Token(api::JobId job, int attempt) const EXCLUDES(tokens_mu_);
  // Checks a token's MAC; kNotFound (deliberately vague) when it is not one of ours.
  Result<RendezvousScope> Verify(const std::string& token) const;
  // The job token of a job's attempt, kept as Token is.
  std::string JobToken(api::JobId job, int attempt) const EXCLUDES(tokens_mu_);
  // Checks a job token; kUnauthenticated when it is not one of ours. Whether its attempt
  // still runs is the caller's to check (Cluster::JobTokenOwner).
  Result<RendezvousScope> VerifyJobToken(std::string_view token) const;
  static constexpr std::string_view kJobTokenPrefix = "cohortjob_";

  // What one attempt's keys and values may take of the head's memory together, each key
  // counted with kEntryOverheadBytes for the map. Rendezvous data is addresses, ids and
  // counters: kilobytes per rank.
  static constexpr size_t kMaxBytesPerAttempt = 64 << 20;
  static constexpr size_t kEntryOverheadBytes = 64;

  // kResourceExhausted when the attempt's keys would pass kMaxBytesPerAttempt.
  Result<void> Set(const RendezvousScope& scope, const std::string& key, std::string value);
  // The value, waiting up to `wait` for it; nullopt if still absent (or the scope dropped).
  std::optional<std::string> Get(const RendezvousScope& scope, const std::string& key, Millis wait);
  // kFailedPrecondition if the key holds something other than an integer; kInvalidArgument
  // (field "delta") if the sum would overflow 64 bits; kResourceExhausted as Set.
  Result<int64_t> Add(const RendezvousScope& scope, const std::string& key, int64_t delta);
  // Forgets every key of every attempt of `job` and wakes its waiters.
  void DropJob(api::JobId job) EXCLUDES(mu_, tokens_mu_);
  size_t KeyCount() const;

 private:
  struct Keys {
    std::map<std::string, std::string> values;
    size_t bytes = 0;  // of values and their keys, with kEntryOverheadBytes each
  };

  struct Tokens {
    std::string rendezvous;
    std::string job;
  };
  Tokens TokensOf(api::JobId job, int attempt) const EXCLUDES(tokens_mu_);
  // Sets `key` in `scope` unless that passes kMaxBytesPerAttempt.
  Result<void> StoreLocked(const RendezvousScope& scope, const std::string& key, std::string value) REQUIRES(mu_);

  const std::string secret_;
  mutable Mutex mu_;
  CondVar cv_;  // signalled after every Set, Add and DropJob
  std::map<RendezvousScope, Keys> keys_ GUARDED_BY(mu_);
  // Tokens made so far (an HMAC each), at most kMaxKeptTokens; a lock of their own, so
  // heartbeats never wait on rendezvous traffic.
  static constexpr size_t kMaxKeptTokens = 100'000;
  mutable Mutex tokens_mu_;
  mutable std::map<RendezvousScope, Tokens> tokens_ GUARDED_BY(tokens_mu_);
};

// A new random secret (32 bytes, hex) for a fresh state store.
std::string NewRendezvousSecret();

}  // namespace cohort::head
