// The audit view: one row of the head's audit log, as stored (store/state_store.h) and as
// GET /v1/audit sends it; `cohort audit` decodes and renders it. A row records one request
// that would change state (POST, PUT, DELETE): who made it, what it asked, when, and what
// the head answered (head/audit.h says which requests get a row). FromJson checks what
// views.h says views check. Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/types.h"
#include "common/error.h"
#include "common/json.h"

namespace cohort::api {

struct AuditEntry {
  int64_t id = 0;        // given by the store: increases with every row
  int64_t time_ms = 0;   // Unix ms the head answered
  std::string caller;    // head::Caller::Describe(): "alice (admin, token 1a2b..)", "node gpu-3", "anonymous"
  std::string user;      // the token's user; "" for a node, an anonymous caller or --insecure
  std::string token_id;  // the token's id; ""
  std::string node;      // a node credential's node; ""
  std::string client;    // the client's address
  std::string method;    // POST, PUT or DELETE
  std::string path;      // without the query
  int status = 0;        // the HTTP status of the answer
  std::string error;     // the error's message when status >= 400; "" otherwise
  JobId job_id = 0;      // the job submitted or acted on; 0: none
};

// {"id", "time_ms", "caller", "user", "token_id", "node", "client", "method", "path",
//  "status", "error", "job_id" (null when none)}
json ToJson(const AuditEntry& e);
Result<AuditEntry> AuditEntryFromJson(const json& j, const std::string& path = {});

// GET /v1/audit's reply: {"entries": [...], "next_cursor": "ID" (while older rows match)}.
// Entries are oldest first within a page; pages go from the newest back.
struct AuditPage {
  std::vector<AuditEntry> entries;
  std::string next_cursor;  // "" on the last page
};
json ToJson(const AuditPage& p);
Result<AuditPage> AuditPageFromJson(const json& j);

}  // namespace cohort::api
