// Codec of the audit view (audit.h).
#include "api/audit.h"

#include "api/view_reader.h"

namespace cohort::api {

namespace vr = view_reader;

json ToJson(const AuditEntry& e) {
  return json{{"id", e.id},
              {"time_ms", e.time_ms},
              {"caller", e.caller},
              {"user", e.user},
              {"token_id", e.token_id},
              {"node", e.node},
              {"client", e.client},
              {"method", e.method},
              {"path", e.path},
              {"status", e.status},
              {"error", e.error},
              {"job_id", e.job_id > 0 ? json(e.job_id) : json(nullptr)}};
}

Result<AuditEntry> AuditEntryFromJson(const json& j, const std::string& path) {
  auto r = COHORT_TRY(ObjectReader::Open(j, path));
  AuditEntry e;
  e.id = COHORT_TRY(r.Int("id", std::nullopt, 1, INT64_MAX));
  e.time_ms = COHORT_TRY(r.Int("time_ms", std::nullopt, 0, INT64_MAX));
  e.caller = COHORT_TRY(r.String("caller"));
  e.user = COHORT_TRY(r.String("user", ""));
  e.token_id = COHORT_TRY(r.String("token_id", ""));
  e.node = COHORT_TRY(r.String("node", ""));
  e.client = COHORT_TRY(r.String("client", ""));
  e.method = COHORT_TRY(r.String("method"));
  e.path = COHORT_TRY(r.String("path"));
  e.status = static_cast<int>(COHORT_TRY(r.Int("status", std::nullopt, 100, 599)));
  e.error = COHORT_TRY(r.String("error", ""));
  e.job_id = COHORT_TRY(vr::OptionalInt(r, "job_id", 1, INT64_MAX)).value_or(0);
  return e;
}

json ToJson(const AuditPage& p) {
  json entries = json::array();
  for (const auto& e : p.entries) entries.push_back(ToJson(e));
  json out = {{"entries", std::move(entries)}};
  if (!p.next_cursor.empty()) out["next_cursor"] = p.next_cursor;
  return out;
}

Result<AuditPage> AuditPageFromJson(const json& j) {
  auto r = COHORT_TRY(ObjectReader::Open(j));
  AuditPage p;
  p.entries = COHORT_TRY(vr::List<AuditEntry>(r, "entries", true, AuditEntryFromJson));
  p.next_cursor = COHORT_TRY(r.String("next_cursor", ""));
  return p;
}

}  // namespace cohort::api
