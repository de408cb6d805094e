// /v1/teams (admins change them, anyone with a token reads them), /v1/shares and
// /v1/priorities: teams, fair share and the queue's priority factors (core/teams.h,
// core/shares.h).
#include "head/routes.h"

namespace cohort::head {

void RegisterTeamRoutes(Router& router, Cluster& cluster) {
  router.Get(api::routes::kTeams, Access::kViewer, [&](const httplib::Request&, httplib::Response& res) {
    SendJson(res, api::TeamsToJson(cluster.ListTeams()));
  });

  // api::TeamFromJson: {"name", "quota": {"gpus"}, "borrow_limit": {"gpus"}, "weight", "users"}.
  router.Post(api::routes::kTeams, Access::kAdmin, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    if (body->is_object() && body->contains("created_ms")) {
      return SendError(res, Error{ErrorCode::kInvalidArgument, "created_ms: is set by the head", "created_ms"});
    }
    auto team = api::TeamFromJson(*body);
    if (!team) return SendError(res, team.error());
    Reply(res, cluster.CreateTeam(std::move(*team)), [](const api::Team& t) { return api::ToJson(t); }, 201);
  });

  router.Get(api::routes::kTeamPattern, Access::kViewer, [&](const httplib::Request& req, httplib::Response& res) {
    Reply(res, cluster.GetTeam(req.matches[1].str()), [](const api::Team& t) { return api::ToJson(t); });
  });

  // api::TeamPatchFromJson: any of quota, borrow_limit ("unlimited" too), weight, users,
  // add_users, remove_users.
  router.Put(api::routes::kTeamPattern, Access::kAdmin, [&](const httplib::Request& req, httplib::Response& res) {
    auto body = BodyJson(req);
    if (!body) return SendError(res, body.error());
    auto patch = api::TeamPatchFromJson(*body);
    if (!patch) return SendError(res, patch.error());
    Reply(res, cluster.UpdateTeam(req.matches[1].str(), *patch), [](const api::Team& t) { return api::ToJson(t); });
  });

  router.Delete(api::routes::kTeamPattern, Access::kAdmin, [&](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1].str();
    auto removed = cluster.RemoveTeam(name);
    if (!removed) return SendError(res, removed.error());
    SendJson(res, json{{"removed", name}});
  });

  router.Get(api::routes::kShares, Access::kViewer, [&](const httplib::Request&, httplib::Response& res) {
    SendJson(res, api::ToJson(cluster.Shares()));
  });

  router.Get(api::routes::kPriorities, Access::kViewer, [&](const httplib::Request&, httplib::Response& res) {
    SendJson(res, api::ToJson(cluster.Priorities()));
  });
}

}  // namespace cohort::head
