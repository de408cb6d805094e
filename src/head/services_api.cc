// /v1/services: deploy (POST a ServiceSpec), list, show, scale and remove inference
// services (head/services.h); replies are api::ServiceStatus views.
#include "head/routes.h"
#include "head/services.h"

namespace cohort::head {

void RegisterServiceRoutes(Router& router, Services& services) {
  router.Post(api::routes::kServices, Access::kUser,
              [&services](const Caller& caller, const httplib::Request& req, httplib::Response& res) {
                auto body = BodyJson(req);
                if (!body) return SendError(res, body.error());
                auto spec = api::ServiceSpecFromJson(*body);
                if (!spec) return SendError(res, spec.error());
                auto user = JobOwner(caller, !spec->user.empty(), spec->user);
                if (!user) return SendError(res, user.error());
                spec->user = *user;
                if (auto allowed = CheckPriority(caller, spec->priority); !allowed) {
                  return SendError(res, allowed.error());
                }
                auto s = services.Deploy(std::move(*spec));
                if (s) res.set_header("Location", api::routes::Service(s->name));
                Reply(res, s, [](const api::ServiceStatus& v) { return api::ToJson(v); }, 201);
              });
  router.Get(api::routes::kServices, Access::kViewer, [&services](const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const auto& s : services.List()) list.push_back(api::ToJson(s));
    SendJson(res, json{{"services", list}});
  });
  router.Get(api::routes::kServicePattern, Access::kViewer,
             [&services](const httplib::Request& req, httplib::Response& res) {
               Reply(res, services.Get(req.matches[1]), [](const api::ServiceStatus& v) { return api::ToJson(v); });
             });
  router.Post(api::routes::kServiceScalePattern, Access::kUser,
              [&services](const Caller& caller, const httplib::Request& req, httplib::Response& res) {
                auto body = BodyJson(req);
                if (!body) return SendError(res, body.error());
                auto r = ObjectReader::Open(*body);
                if (!r) return SendError(res, r.error());
                auto n = r->Int("replicas", std::nullopt, 0, api::kMaxReplicas);
                if (!n) return SendError(res, n.error());
                if (auto f = r->Finish(); !f) return SendError(res, f.error());
                Reply(res, services.Scale(req.matches[1], static_cast<int>(*n), caller),
                      [](const api::ServiceStatus& v) { return api::ToJson(v); });
              });
  router.Delete(api::routes::kServicePattern, Access::kUser,
                [&services](const Caller& caller, const httplib::Request& req, httplib::Response& res) {
                  Reply(res, services.Remove(req.matches[1], caller),
                        [](const api::ServiceStatus& v) { return api::ToJson(v); });
                });
}

}  // namespace cohort::head
