// `cohort token create|ls|revoke` (admins: API tokens, head/auth.h) and `cohort login`
// (keeps a head's URL and a token in the client config, common/client_config.h).
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <iostream>

#include <httplib.h>

#include "cli/client.h"
#include "cli/context.h"
#include "cli/table.h"
#include "common/client_config.h"
#include "common/clock.h"
#include "common/file_modes.h"
#include "common/http.h"
#include "common/signals.h"
#include "common/tls.h"

#include <filesystem>

namespace cohort::cli {

// "30d", "12h", "90m", "3600" (seconds), or "never"/"0"; in seconds (0: never).
Result<int64_t> ParseTokenExpiry(std::string_view text) {
  if (text == "never" || text == "0") return 0;
  const int64_t ms = COHORT_TRY(ParseDurationMs(text, "--expires"));
  if (ms < 1000) return FieldError("--expires", "must be at least one second, got '{}'", text);
  if (ms > int64_t{3650} * 86'400'000) return FieldError("--expires", "must be at most 3650 days, got '{}'", text);
  return ms / 1000;
}

namespace {

std::string TokenState(const json& t, int64_t now_ms) {
  if (t.value("revoked_ms", int64_t{0}) != 0) return "revoked";
  const int64_t exp = t.value("expires_ms", int64_t{0});
  if (exp != 0 && exp <= now_ms) return "expired";
  return "active";
}

int RunCreate(const GlobalOptions& global, const std::string& user, const std::string& role,
              const std::string& expires, const std::string& description) {
  auto secs = ParseTokenExpiry(expires);
  if (!secs) return ReportError(secs.error());
  auto reply = HeadClient(global).Post(api::routes::kTokens, json{{"user", user},
                                                                  {"role", role},
                                                                  {"expires_s", *secs},
                                                                  {"description", description}});
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
  } else {
    std::printf("%s\n", reply->value("token", "").c_str());
    std::fprintf(stderr, "token %s for %s (%s)%s: shown once, keep it secret\n", reply->value("id", "").c_str(),
                 user.c_str(), role.c_str(),
                 *secs ? (", expires " + FormatTimestamp(reply->value("expires_ms", int64_t{0}))).c_str() : "");
  }
  return 0;
}

int RunList(const GlobalOptions& global) {
  auto reply = HeadClient(global).Get(api::routes::kTokens);
  if (!reply) return ReportError(reply.error());
  if (global.json) {
    PrintJson(*reply);
    return 0;
  }
  const int64_t now = NowUnixMs();
  Table table({"ID", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "BY", "DESCRIPTION"});
  for (const auto& t : reply->value("tokens", json::array())) {
    const int64_t exp = t.value("expires_ms", int64_t{0});
    table.AddRow({t.value("id", ""), t.value("user", ""), t.value("role", ""), TokenState(t, now),
                  FormatTimestamp(t.value("created_ms", int64_t{0})), exp ? FormatTimestamp(exp) : "never",
                  t.value("created_by", ""), t.value("description", "")});
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

int RunRevoke(const GlobalOptions& global, const std::vector<std::string>& ids) {
  HttpClient head = HeadClient(global);
  return ForEachName(
      ids, [&](const std::string& id) { return head.Post(api::routes::TokenRevoke(id), json::object()); },
      [&](const std::string& id, json reply) {
        if (global.json) {
          PrintJson(reply);
        } else {
          std::printf("Revoked token %s (%s)\n", id.c_str(), reply.value("user", "").c_str());
        }
        return 0;
      });
}

// --ca-fingerprint: "sha256:" and the certificate's 32-byte SHA-256 in hex (colons between
// bytes allowed, either case), as the head logs it at start; 64 lowercase hex digits.
Result<std::string> ParseCaFingerprint(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("sha256:") || rest.starts_with("SHA256:")) rest.remove_prefix(7);
  std::string hex;
  for (char c : rest) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      hex.clear();
      break;
    }
    hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (hex.size() != 64) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "--ca-fingerprint: expected sha256: and 64 hex digits (the authority's fingerprint the "
                     "head logs when it starts), got '" + std::string(text.substr(0, 100)) + "'");
  }
  return hex;
}

// The head's certificate authority (PEM), read from its public GET /v1/ca before anything
// is trusted, and returned only when its SHA-256 is `want` (as kubeadm pins a cluster's CA
// by hash): whoever is in between cannot make another authority with that fingerprint.
Result<std::string> FetchPinnedCa(const std::string& url, const std::string& want) {
  const UrlParts parts = COHORT_TRY(ParseHttpUrl(url));
  if (!parts.tls) {
    return MakeError(ErrorCode::kInvalidArgument, "--ca-fingerprint is for an https head; " + url + " is plain HTTP");
  }
  IgnoreSigpipeIfDefault();  // OpenSSL writes with write(2): a closed head is an error, not a SIGPIPE
  httplib::SSLClient cli(parts.host, parts.port);
  cli.enable_server_certificate_verification(false);  // the fingerprint decides, below
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(15, 0);
  auto res = cli.Get(api::routes::kCa);
  if (!res) {
    return Errorf(ErrorCode::kUnavailable, "cannot read {}{}: {}", url, api::routes::kCa, httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    return Errorf(ErrorCode::kUnavailable, "{}{} answered {} (a head that predates it, or no TLS): {}", url,
                  api::routes::kCa, res->status, res->body.substr(0, 200));
  }
  auto info = tls::Inspect(res->body);
  if (!info) return Errorf(ErrorCode::kUnavailable, "{}{} is not a certificate: {}", url, api::routes::kCa, info.error().message);
  if (info->sha256 != want) {
    return Errorf(ErrorCode::kUnauthenticated,
                  "the authority {} presents is sha256:{}, not the --ca-fingerprint given (sha256:{}): not trusting it "
                  "(a mistyped fingerprint, another head, or someone in between)",
                  url, info->sha256, want);
  }
  return std::move(res->body);
}

// Where a pinned authority is kept: beside the client config, one file per head.
Result<std::string> KeepPinnedCa(const std::string& url, const std::string& pem, const std::string& config_path) {
  const UrlParts parts = COHORT_TRY(ParseHttpUrl(url));
  namespace fs = std::filesystem;
  const std::string file =
      (fs::path(config_path).parent_path() / fmt::format("ca-{}-{}.crt", parts.host, parts.port)).string();
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  if (auto w = WritePrivateFileAtomically(file, pem); !w) return std::unexpected(w.error());
  return file;
}

int RunLogin(const GlobalOptions& global, std::string token, std::string ca_file, const std::string& ca_fingerprint) {
  const std::string url = ResolveHeadUrl(global);
  std::string pinned;  // the fingerprint's 64 hex digits
  if (!ca_fingerprint.empty()) {
    if (!ca_file.empty()) {
      return ReportError(Error{ErrorCode::kInvalidArgument, "--ca and --ca-fingerprint: give one (the file, or the "
                                                            "fingerprint to fetch it by)"});
    }
    auto p = ParseCaFingerprint(ca_fingerprint);
    if (!p) return ReportError(p.error());
    pinned = *p;
  }
  if (token.empty()) {
    if (isatty(STDIN_FILENO)) std::fprintf(stderr, "Token for %s: ", url.c_str());
    std::getline(std::cin, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  }
  if (token.empty()) return ReportError(Error{ErrorCode::kInvalidArgument, "no token given (--token, or on stdin)"});
  HttpClient head(url, Millis(15000));
  head.set_bearer_token(token);
  // The client config, or the context --context or $COHORT_CONTEXT names (made here if new).
  auto login_path = LoginConfigPath(global.context);
  if (!login_path) return ReportError(login_path.error());
  const std::string path = *login_path;
  if (path.empty()) return ReportError(Error{ErrorCode::kInvalidArgument, "no home directory for the client config"});
  std::string pinned_pem;  // kept beside the config once the head has accepted the token
  if (!pinned.empty()) {
    auto fetched = FetchPinnedCa(url, pinned);
    if (!fetched) return ReportError(fetched.error());
    pinned_pem = std::move(*fetched);
    head.set_tls(tls::ClientOptions{pinned_pem, nullptr});
  }
  if (pinned_pem.empty() && ca_file.empty()) ca_file = ResolveCaFile(url);
  if (pinned_pem.empty() && !ca_file.empty()) {
    auto pem = tls::ReadCaFile(ca_file);
    if (!pem) return ReportError(WithContext(pem.error(), "--ca"));
    ca_file = std::filesystem::absolute(ca_file).string();
    head.set_tls(tls::ClientOptions{*pem, nullptr});
  }
  auto who = head.Get(api::routes::kWhoAmI);
  if (!who) return ReportError(WithContext(who.error(), "the head did not accept the token"));
  if (!pinned_pem.empty()) {
    auto kept = KeepPinnedCa(url, pinned_pem, path);
    if (!kept) return ReportError(kept.error());
    ca_file = *kept;
  }
  if (auto w = WriteClientConfig(path, ClientConfig{url, token, ca_file}); !w) return ReportError(w.error());
  if (global.json) {
    PrintJson(*who);
  } else {
    std::printf("Logged in to %s as %s (%s); saved in %s\n", url.c_str(), who->value("user", "").c_str(),
                who->value("role", "").c_str(), path.c_str());
  }
  return 0;
}

// `cohort whoami` (kubectl auth whoami): who the head takes this client for, through
// which head and token (its id, never its secret).
int RunWhoAmI(const GlobalOptions& global) {
  HttpClient head = HeadClient(global);
  auto who = head.Get(api::routes::kWhoAmI);
  if (!who) return ReportError(who.error());
  if (global.json) {
    PrintJson(*who);
    return 0;
  }
  const std::string id = who->value("token_id", "");
  std::printf("%s (%s) at %s%s\n", who->value("user", "").c_str(), who->value("role", "").c_str(),
              head.base_url().c_str(), id.empty() ? "" : (", token " + id).c_str());
  return 0;
}

}  // namespace

void AddTokenCommands(CommandContext& ctx) {
  GlobalOptions& global = ctx.global;
  auto* token = ctx.app.add_subcommand("token", "API tokens (admins): create, ls, revoke");
  token->require_subcommand(1);

  struct CreateFlags {
    std::string user;
    std::string role = "user";
    std::string expires = "never";
    std::string description;
  };
  auto cf = std::make_shared<CreateFlags>();
  auto* create = token->add_subcommand("create", "Make a token; it is printed once");
  create->add_option("--user", cf->user, "Whose token it is")->required();
  create->add_option("--role", cf->role, "viewer (reads), user (runs jobs), admin (everything), agent (joins nodes)");
  create->add_option("--expires", cf->expires, "Lifetime: 30d, 12h, 90m, seconds, or never (default)");
  create->add_option("--description", cf->description, "What it is for");
  AddClientOptions(create, global);
  ctx.on_run(create, [cf, &global] { return RunCreate(global, cf->user, cf->role, cf->expires, cf->description); });

  auto* ls = token->add_subcommand("ls", "List tokens (never their secrets)");
  AddClientOptions(ls, global);
  ctx.on_run(ls, [&global] { return RunList(global); });

  auto ids = std::make_shared<std::vector<std::string>>();
  auto* revoke = token->add_subcommand("revoke", "Revoke tokens by id; they stop working at once");
  revoke->add_option("ID", *ids, "Token ids (cohort token ls)")->required();
  AddClientOptions(revoke, global);
  ctx.on_run(revoke, [ids, &global] { return RunRevoke(global, *ids); });

  auto* whoami = ctx.app.add_subcommand("whoami", "Who the head takes you for: your user and role (kubectl auth whoami)");
  AddClientOptions(whoami, global);
  ctx.on_run(whoami, [&global] { return RunWhoAmI(global); });

  auto login_token = std::make_shared<std::string>();
  auto login_ca = std::make_shared<std::string>();
  auto login_fingerprint = std::make_shared<std::string>();
  auto* login = ctx.app.add_subcommand("login", "Keep a head's URL and your token in the client config");
  login->add_option("--token", *login_token, "The token (default: read from stdin)");
  login->add_option("--ca", *login_ca,
                    "The head's certificate authority (its state_dir/tls/ca.crt), for an https head; kept in the "
                    "config");
  login->add_option("--ca-fingerprint", *login_fingerprint,
                    "Instead of --ca: fetch the head's authority from it and trust it only if its SHA-256 is this "
                    "(sha256:..., which the head logs when it starts)");
  AddClientOptions(login, global);
  ctx.on_run(login, [login_token, login_ca, login_fingerprint, &global] {
    return RunLogin(global, *login_token, *login_ca, *login_fingerprint);
  });
}

}  // namespace cohort::cli
