// /v1/tokens: API tokens (auth.h), for admins only: list, create, revoke.
#include "head/routes.h"

namespace cohort::head {

void RegisterTokenRoutes(Router& router, TokenBook& tokens) {
  router.Get(api::routes::kWhoAmI, Access::kViewer, [](const Caller& caller, const httplib::Request&,
                                                       httplib::Response& res) {
    SendJson(res, json{{"user", caller.kind == Caller::Kind::kToken ? caller.user : caller.Describe()},
                       {"role", caller.kind == Caller::Kind::kToken ? RoleName(caller.role) : "admin"},
                       {"token_id", caller.token_id}});
  });

  router.Get(api::routes::kTokens, Access::kAdmin, [&](const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const auto& t : tokens.List()) list.push_back(ToJson(t));
    SendJson(res, json{{"tokens", std::move(list)}});
  });

  // {"user": name, "role": viewer|user|admin|agent, "expires_s": N (0 or absent: never),
  //  "description": text}
  router.Post(api::routes::kTokens, Access::kAdmin, [&](const Caller& caller, const httplib::Request& req,
                                                        httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto r = ObjectReader::Open(*body);
    if (!r) return SendError(res, r.error());
    auto user = r->String("user");
    if (!user) return SendError(res, user.error());
    auto role_name = r->String("role", "user");
    if (!role_name) return SendError(res, role_name.error());
    auto expires_s = r->Int("expires_s", 0, 0, int64_t{10} * 365 * 24 * 3600);
    if (!expires_s) return SendError(res, expires_s.error());
    auto description = r->String("description", "");
    if (!description) return SendError(res, description.error());
    if (auto fin = r->Finish(); !fin) return SendError(res, fin.error());
    auto role = ParseRole(*role_name);
    if (!role) return SendError(res, role.error());
    const int64_t now = NowUnixMs();
    auto made = tokens.Create(*user, *role, *expires_s ? now + *expires_s * 1000 : 0,
                              caller.kind == Caller::Kind::kToken ? caller.user : caller.Describe(), *description, now);
    if (!made) return SendError(res, made.error());
    json out = ToJson(made->info);
    out["token"] = made->token;
    SendJson(res, out, 201);
  });

  router.Post(api::routes::kTokenRevokePattern, Access::kAdmin, [&](const httplib::Request& req, httplib::Response& res) {
    Reply(res, tokens.Revoke(req.matches[1].str(), NowUnixMs()), [](const TokenInfo& t) { return ToJson(t); });
  });
}

}  // namespace cohort::head
