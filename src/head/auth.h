// Who is calling, and what they may do (issue 13): API tokens, node credentials, roles.
//
// Users' tokens: "cohort_<id>_<secret>", where id (12 hex digits) names the token and the
// secret (64 hex digits, 256 random bits) proves it. The head keeps only a salted
// SHA-256 of each secret, with its user, role, expiry and revocation, as one JSON record
// list under the state store's meta key kTokensMeta; a token is shown once, when made.
// Roles: viewer (reads), user (also submits, and cancels and reads the logs of its own
// jobs), admin (everything: other users' jobs, nodes, tokens), agent (a join token: it
// only registers nodes).
//
// Nodes: an agent that registers with a join token gets its node credential,
// "cohortnode_<mac>_<node>", an HMAC-SHA256 of the node name (and, once the name has been
// removed, its generation) under the head's secret. It is not stored (the head recomputes
// it, so it survives restarts) and it names its node: an agent can act only for the node
// it registered. The head also presents it to that agent when it calls it (wake, logs).
// Removing a node (`cohort node rm`) retires its credentials: the name's generation goes
// up (kept under meta kNodeGenerationsMeta, only for names ever removed), so every
// credential given before stops working, and the name needs a join token to register
// again.
//
// Jobs: each attempt of a job has a job token (COHORT_JOB_TOKEN in its tasks' environment;
// RendezvousStore::JobToken makes and checks it), a Caller of kind kJob while that attempt
// runs. It reads only its own job (its state, logs and progress), may requeue it (a
// task that got its checkpoint signal before the time limit: `cohort requeue
// $COHORT_JOB_ID`) and may run steps in it (a batch script's `cohort run`, which starts
// a step and reads and closes its sessions): the routes registered with
// JobScope::kOwnJob, whose path names the job. It does nothing else; rendezvous and progress reports keep their capability URLs.
//
// Threads: every method may be called from any thread (one mutex; Create and Revoke
// hold it while they persist, so book changes are written in order).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "common/mutex.h"
#include "common/string_hash.h"

namespace cohort::head {

enum class Role { kViewer, kUser, kAdmin, kAgent };
std::string_view RoleName(Role role);
// "viewer", "user", "admin" or "agent"; kInvalidArgument naming field "role" otherwise.
Result<Role> ParseRole(std::string_view name);

// The meta key of the token list.
inline constexpr char kTokensMeta[] = "auth/tokens";
// The meta key of the secret that keys node credentials.
inline constexpr char kNodeSecretMeta[] = "auth/node_secret";
// The meta key of the credential generations of removed node names: {"name": N, ...}.
inline constexpr char kNodeGenerationsMeta[] = "auth/node_generations";

// A token as listed (never its secret).
struct TokenInfo {
  std::string id;
  std::string user;
  Role role = Role::kViewer;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;  // 0: never
  int64_t revoked_ms = 0;  // 0: not revoked
  std::string created_by;
  std::string description;
};
json ToJson(const TokenInfo& t);

// Who made a request.
struct Caller {
  enum class Kind {
    kAnonymous,  // no credentials
    kToken,      // a user's (or a join) token: user and role
    kNode,       // an agent's node credential: node
    kInsecure,   // the head runs with --insecure: anyone, as admin
    kJob,        // a job's token (COHORT_JOB_TOKEN): job, attempt, and the job's owner as user
  };
  Kind kind = Kind::kAnonymous;
  std::string user;  // kToken
  Role role = Role::kViewer;
  std::string token_id;  // kToken
  std::string node;      // kNode
  int64_t job = 0;       // kJob
  int attempt = 0;       // kJob

  bool IsAdmin() const { return kind == Kind::kInsecure || (kind == Kind::kToken && role == Role::kAdmin); }
  // May act on job `id`, owned by `owner`: its owner, an admin, or the job's own token.
  bool MayActOn(int64_t id, std::string_view owner) const {
    return IsAdmin() || (kind == Kind::kToken && user == owner) || (kind == Kind::kJob && job == id);
  }
  // For logs and the audit trail: "alice (admin, token 1a2b..)", "node gpu-3", "job 42
  // (alice)", "anonymous".
  std::string Describe() const;
};

// What a route asks of its caller.
enum class Access {
  kPublic,     // anyone (health, the dashboard's page)
  kViewer,     // any user token
  kUser,       // a token of role user or admin
  kAdmin,      // an admin token
  kAgentJoin,  // a join token (role agent) or an admin token: registers a node
  kNode,       // a node credential (the handler checks it is the path's node)
  kTask,       // the path carries its own capability (rendezvous and report tokens)
};
std::string_view AccessName(Access access);

// Whether a job's token may call a route (besides its Access, which job tokens never meet).
enum class JobScope {
  kNone,    // no job token
  kOwnJob,  // a job token, for its own job: the path's first capture is the job id
};

// OK if `caller` may call a route that asks `access` (and `scope`, for a job's token: the
// router checks the path names its job); kUnauthenticated (401) when it brought no valid
// credentials, kPermissionDenied (403) when they are not enough.
Result<void> Authorize(Access access, const Caller& caller, JobScope scope = JobScope::kNone);

class TokenBook {
 public:
  // Writes `value` under meta `key` durably; called with the book's lock held.
  using Persist = std::function<Result<void>(const std::string& key, const std::string& value)>;

  // `stored`: the kTokensMeta value (nullopt: no tokens yet); `node_secret`: at least 16
  // bytes; `generations`: the kNodeGenerationsMeta value (nullopt: no node removed yet).
  // kInvalidArgument if the stored list or generations do not decode.
  static Result<std::unique_ptr<TokenBook>> Open(const std::optional<std::string>& stored, std::string node_secret,
                                                 Persist persist,
                                                 const std::optional<std::string>& generations = std::nullopt);

  struct Created {
    std::string token;  // shown once
    TokenInfo info;
  };
  // A new token for `user` (1-64 characters of [A-Za-z0-9._-]); expires_ms 0: never.
  Result<Created> Create(const std::string& user, Role role, int64_t expires_ms, const std::string& created_by,
                         const std::string& description, int64_t now_ms) EXCLUDES(mu_);
  // Revokes by id (kNotFound if none); revoking twice is not an error.
  Result<TokenInfo> Revoke(const std::string& id, int64_t now_ms) EXCLUDES(mu_);
  std::vector<TokenInfo> List() const EXCLUDES(mu_);
  bool Empty() const EXCLUDES(mu_);

  // The caller a bearer credential names: kUnauthenticated for a malformed, unknown,
  // expired or revoked one (the message says which, never the secret).
  Result<Caller> Authenticate(std::string_view bearer, int64_t now_ms) const EXCLUDES(mu_);

  // The credential of `node` as of now (its current generation).
  std::string NodeCredential(std::string_view node) const EXCLUDES(mu_);
  // Retires every credential `node` was given (it was removed): they stop working at once;
  // the next registration of the name gets a new one. Persisted before it returns (on
  // failure nothing changes).
  Result<void> RetireNodeCredentials(const std::string& node) EXCLUDES(mu_);

 private:
  struct Record {
    TokenInfo info;
    std::string salt;  // hex
    std::string hash;  // hex SHA-256 of salt bytes + secret text
  };
  TokenBook(std::map<std::string, Record> records, std::map<std::string, int64_t, std::less<>> generations,
            std::string node_secret, Persist persist)
      : records_(std::move(records)),
        generations_(std::move(generations)),
        node_secret_(std::move(node_secret)),
        persist_(std::move(persist)) {}
  Result<void> SaveLocked() REQUIRES(mu_);
  // The credential of `node` at `generation`.
  std::string NodeCredentialAt(std::string_view node, int64_t generation) const;
  int64_t GenerationLocked(std::string_view node) const REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Record> records_ GUARDED_BY(mu_);  // by id
  // Node names ever removed → their credentials' generation (absent: 0).
  std::map<std::string, int64_t, std::less<>> generations_ GUARDED_BY(mu_);
  // A node's current credential once it has been presented (an HMAC each heartbeat was
  // 4% of the head's CPU at 1,000 nodes), with the generation it was made for. Only
  // credentials that matched enter it, so made-up node names cannot grow it. A hash map:
  // every heartbeat looks its node up here, and the walk down a 1,000-node std::map
  // (one cache miss a level) was the one hot instruction of Authenticate in `perf` of the
  // head at 1,000 agents.
  struct KnownCredential {
    int64_t generation = 0;
    std::string credential;
  };
  mutable std::unordered_map<std::string, KnownCredential, StringHash, std::equal_to<>> known_credentials_
      GUARDED_BY(mu_);
  const std::string node_secret_;
  const Persist persist_;
};

// The credential of an "Authorization: Bearer ..." header value; empty if none.
std::string_view BearerOf(std::string_view authorization);
// 32 random bytes as 64 hex digits (OpenSSL's RAND_bytes).
std::string RandomHex(size_t bytes);

}  // namespace cohort::head
