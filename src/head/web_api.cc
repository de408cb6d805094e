// The dashboard's static files at the head's root URL: GET / (index.html), GET /app.js,
// GET /style.css, ... from the table embedded at build time (head/web_assets.h).
//
// Every reply carries a strong ETag and "Cache-Control: no-cache", so a browser
// revalidates on each load and gets 304 Not Modified until the binary changes. The page
// gets a Content-Security-Policy that allows only this origin's scripts, styles and
// fetches. Unknown paths are 404 with the usual JSON error body.
#include <algorithm>

#include "head/routes.h"
#include "head/web_assets.h"

namespace cohort::head {
namespace {

constexpr const char* kPageCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// True when an If-None-Match header value names `etag` (or is "*").
bool EtagMatches(std::string_view header, std::string_view etag) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t comma = header.find(',', pos);
    if (comma == std::string_view::npos) comma = header.size();
    std::string_view tag = header.substr(pos, comma - pos);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);  // weak comparison, as RFC 9110 asks for GET
    if (tag == "*" || tag == etag) return true;
    pos = comma + 1;
  }
  return false;
}

void ServeAsset(const httplib::Request& req, httplib::Response& res) {
  const WebAsset* a = FindWebAsset(req.path);
  if (!a) return SendError(res, Error{ErrorCode::kNotFound, fmt::format("no such page: {}", req.path)});
  res.set_header("ETag", std::string(a->etag));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (a->content_type.starts_with("text/html")) {
    res.set_header("Content-Security-Policy", kPageCsp);
    res.set_header("Referrer-Policy", "no-referrer");
  }
  if (req.has_header("If-None-Match") && EtagMatches(req.get_header_value("If-None-Match"), a->etag)) {
    res.status = 304;
    return;
  }
  res.set_content(std::string(a->bytes), std::string(a->content_type));
}

}  // namespace

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == "/") path = "/index.html";
  const auto& assets = WebAssets();
  auto it = std::lower_bound(assets.begin(), assets.end(), path,
                             [](const WebAsset& a, std::string_view p) { return a.path < p; });
  return it != assets.end() && it->path == path ? &*it : nullptr;
}

void PreferGzipOverBrotli(httplib::Server& server) {
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    auto it = req.headers.find("Accept-Encoding");
    if (it == req.headers.end() || it->second.find("br") == std::string::npos) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string kept;
    std::string_view list = it->second;
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      std::string_view name = item.substr(0, item.find(';'));
      while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      if (name == "br") continue;
      if (!kept.empty()) kept += ",";
      kept += item;
    }
    // The server owns the request; handlers only see it const.
    const_cast<httplib::Request&>(req).headers.find("Accept-Encoding")->second = kept;
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

void RegisterWebRoutes(Router& router) {
  router.Get("/", Access::kPublic, ServeAsset);
  // One path segment of plain characters: never a /v1/... route, never a directory walk.
  router.Get(R"(/[A-Za-z0-9._-]+)", Access::kPublic, ServeAsset);
}

}  // namespace cohort::head
