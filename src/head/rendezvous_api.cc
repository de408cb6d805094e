// /v1/rendezvous/{token}: the per-job key-value store tasks reach at COHORT_RENDEZVOUS.
//
//   PUT  .../keys/{key}            raw body = value
//   GET  .../keys/{key}?wait_ms=N  raw value; 404 if still absent after the wait (≤ 1000 ms;
//                                  clients poll again until their own deadline)
//   POST .../add/{key}             {"delta": N} → {"value": SUM}
// Keys are percent-encoded in the path; any bytes are allowed once decoded. A 404 for a
// key that is not set yet carries "field": "key"; other 404s (bad token, ended attempt)
// do not, so clients know to stop polling.
#include "head/routes.h"

namespace cohort::head {
namespace {

constexpr size_t kMaxKeyBytes = 4096;

Result<RendezvousScope> ScopeOf(Cluster& cluster, const httplib::Request& req, const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("key: must be 1 to {} bytes", kMaxKeyBytes), "key");
  }
  return cluster.RendezvousFor(req.matches[1].str());
}

}  // namespace

void RegisterRendezvousRoutes(Router& router, Cluster& cluster) {
  router.Put(api::routes::kRendezvousKeyPattern, Access::kTask, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key = req.matches[2].str();
    auto scope = ScopeOf(cluster, req, key);
    if (!scope) return SendError(res, scope.error());
    if (auto ok = cluster.rendezvous().Set(*scope, key, req.body); !ok) return SendError(res, ok.error());
    SendJson(res, json{{"ok", true}});
  });

  router.Get(api::routes::kRendezvousKeyPattern, Access::kTask, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key = req.matches[2].str();
    auto scope = ScopeOf(cluster, req, key);
    if (!scope) return SendError(res, scope.error());
    auto wait = QueryIntParam(req, "wait_ms", 0, 0, 3'600'000);
    if (!wait) return SendError(res, wait.error());
    auto value = cluster.rendezvous().Get(*scope, key, Millis(std::min<int64_t>(*wait, 1000)));
    // field "key" tells clients this 404 means "not yet": they poll again; any other 404
    // (a bad token, an ended attempt) is final.
    if (!value) return SendError(res, Error{ErrorCode::kNotFound, fmt::format("key '{}' is not set", key), "key"});
    res.set_content(std::move(*value), "application/octet-stream");
  });

  router.Post(api::routes::kRendezvousAddPattern, Access::kTask, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key = req.matches[2].str();
    auto scope = ScopeOf(cluster, req, key);
    if (!scope) return SendError(res, scope.error());
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto r = ObjectReader::Open(*body);
    if (!r) return SendError(res, r.error());
    auto delta = r->Int("delta", std::nullopt, INT64_MIN / 2, INT64_MAX / 2);
    if (!delta) return SendError(res, delta.error());
    if (auto fin = r->Finish(); !fin) return SendError(res, fin.error());
    auto sum = cluster.rendezvous().Add(*scope, key, *delta);
    if (!sum) return SendError(res, sum.error());
    SendJson(res, json{{"value", *sum}});
  });
}

}  // namespace cohort::head
