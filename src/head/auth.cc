#include "head/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cctype>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "api/types.h"


namespace cohort::head {

namespace {

constexpr std::string_view kTokenPrefix = "cohort_";
constexpr std::string_view kNodePrefix = "cohortnode_";
constexpr size_t kIdHexDigits = 12;
constexpr size_t kSecretHexDigits = 64;

std::string Hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

bool IsHex(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string Sha256Hex(std::string_view salt_hex, std::string_view secret) {
  std::string input(salt_hex);
  input += ':';
  input += secret;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), md);
  return Hex(md, sizeof md);
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Caller NodeCaller(std::string_view node) {
  Caller c;
  c.kind = Caller::Kind::kNode;
  c.node = std::string(node);
  return c;
}


}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kUser: return "user";
    case Role::kAdmin: return "admin";
    case Role::kAgent: return "agent";
  }
  return "viewer";
}

Result<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kViewer, Role::kUser, Role::kAdmin, Role::kAgent}) {
    if (RoleName(r) == name) return r;
  }
  return FieldError("role", "must be viewer, user, admin or agent, got '{}'", name.substr(0, 40));
}

std::string_view AccessName(Access access) {
  switch (access) {
    case Access::kPublic: return "public";
    case Access::kViewer: return "viewer";
    case Access::kUser: return "user";
    case Access::kAdmin: return "admin";
    case Access::kAgentJoin: return "agent-join";
    case Access::kNode: return "node";
    case Access::kTask: return "task";
  }
  return "admin";
}

json ToJson(const TokenInfo& t) {
  json j = {{"id", t.id},         {"user", t.user},           {"role", RoleName(t.role)},
            {"created_ms", t.created_ms}, {"expires_ms", t.expires_ms}, {"revoked_ms", t.revoked_ms},
            {"created_by", t.created_by}, {"description", t.description}};
  return j;
}

std::string Caller::Describe() const {
  switch (kind) {
    case Kind::kAnonymous: return "anonymous";
    case Kind::kInsecure: return "anyone (--insecure)";
    case Kind::kNode: return "node " + node;
    case Kind::kToken: return fmt::format("{} ({}, token {})", user, RoleName(role), token_id);
    case Kind::kJob: return fmt::format("job {} ({})", job, user);
  }
  return "anonymous";
}

Result<void> Authorize(Access access, const Caller& caller, JobScope scope) {
  if (access == Access::kPublic || access == Access::kTask || caller.kind == Caller::Kind::kInsecure) return {};
  if (caller.kind == Caller::Kind::kAnonymous) {
    return MakeError(ErrorCode::kUnauthenticated,
                     "this request needs a token: send \"Authorization: Bearer <token>\" (cohort login, or "
                     "COHORT_TOKEN; an admin makes tokens with `cohort token create`)");
  }
  if (caller.kind == Caller::Kind::kJob) {
    if (scope == JobScope::kOwnJob) return {};
    return Errorf(ErrorCode::kPermissionDenied,
                  "{} may not do this: a job's token acts only on its own job (reads its state, logs and progress, "
                  "requeues it, runs steps in it)",
                  caller.Describe());
  }
  const bool node = caller.kind == Caller::Kind::kNode;
  const Role role = caller.role;
  bool ok = false;
  switch (access) {
    case Access::kNode: ok = node; break;
    case Access::kAgentJoin: ok = !node && (role == Role::kAgent || role == Role::kAdmin); break;
    case Access::kViewer: ok = !node && role != Role::kAgent; break;
    case Access::kUser: ok = !node && (role == Role::kUser || role == Role::kAdmin); break;
    case Access::kAdmin: ok = !node && role == Role::kAdmin; break;
    default: ok = true;
  }
  if (ok) return {};
  return Errorf(ErrorCode::kPermissionDenied, "{} may not do this: it needs {}", caller.Describe(),
                access == Access::kNode        ? "a node credential"
                : access == Access::kAgentJoin ? "a join token (role agent) or an admin token"
                                               : fmt::format("a token of role {}{}", AccessName(access),
                                                             access == Access::kAdmin ? "" : " or above"));
}

std::string_view BearerOf(std::string_view authorization) {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) !=
        std::tolower(static_cast<unsigned char>(kScheme[i]))) {
      return {};
    }
  }
  std::string_view v = authorization.substr(kScheme.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
  return v;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    // OpenSSL's generator failed: nothing safe to hand out.
    std::abort();
  }
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), bytes);
}

Result<std::unique_ptr<TokenBook>> TokenBook::Open(const std::optional<std::string>& stored, std::string node_secret,
                                                   Persist persist, const std::optional<std::string>& generations) {
  if (node_secret.size() < 16) return MakeError(ErrorCode::kInvalidArgument, "node secret: at least 16 bytes");
  std::map<std::string, Record> records;
  if (stored) {
    auto doc = ParseJson(*stored, kTokensMeta);
    if (!doc) return std::unexpected(doc.error());
    if (!doc->is_array()) return MakeError(ErrorCode::kInvalidArgument, "auth/tokens: not a JSON array");
    for (const auto& j : *doc) {
      auto r = ObjectReader::Open(j);
      if (!r) return std::unexpected(r.error());
      Record rec;
      auto id = r->String("id");
      auto user = r->String("user");
      auto role = r->String("role");
      auto salt = r->String("salt");
      auto hash = r->String("hash");
      auto created = r->Int("created_ms", 0, 0, INT64_MAX);
      auto expires = r->Int("expires_ms", 0, 0, INT64_MAX);
      auto revoked = r->Int("revoked_ms", 0, 0, INT64_MAX);
      auto by = r->String("created_by", "");
      auto desc = r->String("description", "");
      if (!id || !user || !role || !salt || !hash || !created || !expires || !revoked || !by || !desc) {
        return MakeError(ErrorCode::kInvalidArgument, "auth/tokens: a record lacks a field or has a wrong type");
      }
      if (auto fin = r->Finish(); !fin) return std::unexpected(fin.error());
      auto parsed_role = ParseRole(*role);
      if (!parsed_role) return std::unexpected(parsed_role.error());
      if (id->size() != kIdHexDigits || !IsHex(*id) || !IsHex(*salt) || hash->size() != 64 || !IsHex(*hash)) {
        return Errorf(ErrorCode::kInvalidArgument, "auth/tokens: record '{}' is malformed", *id);
      }
      rec.info = TokenInfo{*id, *user, *parsed_role, *created, *expires, *revoked, *by, *desc};
      rec.salt = *salt;
      rec.hash = *hash;
      records[*id] = std::move(rec);
    }
  }
  std::map<std::string, int64_t, std::less<>> gens;
  if (generations) {
    auto doc = ParseJson(*generations, kNodeGenerationsMeta);
    if (!doc) return std::unexpected(doc.error());
    if (!doc->is_object()) return MakeError(ErrorCode::kInvalidArgument, "auth/node_generations: not a JSON object");
    for (const auto& [name, gen] : doc->items()) {
      if (!gen.is_number_integer() || gen.get<int64_t>() < 1) {
        return Errorf(ErrorCode::kInvalidArgument, "auth/node_generations: '{}' is not a positive integer",
                      name.substr(0, 80));
      }
      gens[name] = gen.get<int64_t>();
    }
  }
  return std::unique_ptr<TokenBook>(
      new TokenBook(std::move(records), std::move(gens), std::move(node_secret), std::move(persist)));
}

Result<void> TokenBook::SaveLocked() {
  json list = json::array();
  for (const auto& [id, rec] : records_) {
    json j = ToJson(rec.info);
    j["salt"] = rec.salt;
    j["hash"] = rec.hash;
    list.push_back(std::move(j));
  }
  return persist_(kTokensMeta, list.dump());
}

Result<TokenBook::Created> TokenBook::Create(const std::string& user, Role role, int64_t expires_ms,
                                             const std::string& created_by, const std::string& description,
                                             int64_t now_ms) {
  if (!api::ValidUserName(user)) {
    return FieldError("user", "must be 1-64 characters of letters, digits, '.', '_' or '-', got '{}'",
                      user.substr(0, 80));
  }
  if (expires_ms < 0 || (expires_ms > 0 && expires_ms <= now_ms)) {
    return FieldError("expires", "must be in the future");
  }
  if (description.size() > 256) {
    return FieldError("description", "at most 256 characters");
  }
  MutexLock lock(mu_);
  std::string id;
  do {
    id = RandomHex(kIdHexDigits / 2);
  } while (records_.contains(id));
  const std::string secret = RandomHex(kSecretHexDigits / 2);
  Record rec;
  rec.info = TokenInfo{id, user, role, now_ms, expires_ms, 0, created_by, description};
  rec.salt = RandomHex(16);
  rec.hash = Sha256Hex(rec.salt, secret);
  records_[id] = rec;
  if (auto saved = SaveLocked(); !saved) {
    records_.erase(id);
    return std::unexpected(saved.error());
  }
  return Created{std::string(kTokenPrefix) + id + "_" + secret, rec.info};
}

Result<TokenInfo> TokenBook::Revoke(const std::string& id, int64_t now_ms) {
  MutexLock lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return Errorf(ErrorCode::kNotFound, "no token has id '{}'", id.substr(0, 80));
  if (it->second.info.revoked_ms != 0) return it->second.info;
  it->second.info.revoked_ms = now_ms;
  if (auto saved = SaveLocked(); !saved) {
    it->second.info.revoked_ms = 0;
    return std::unexpected(saved.error());
  }
  return it->second.info;
}

std::vector<TokenInfo> TokenBook::List() const {
  MutexLock lock(mu_);
  std::vector<TokenInfo> out;
  out.reserve(records_.size());
  for (const auto& [id, rec] : records_) out.push_back(rec.info);
  return out;
}

bool TokenBook::Empty() const {
  MutexLock lock(mu_);
  return records_.empty();
}

int64_t TokenBook::GenerationLocked(std::string_view node) const {
  auto it = generations_.find(node);
  return it == generations_.end() ? 0 : it->second;
}

std::string TokenBook::NodeCredential(std::string_view node) const {
  int64_t generation = 0;
  {
    MutexLock lock(mu_);
    generation = GenerationLocked(node);
  }
  return NodeCredentialAt(node, generation);
}

Result<void> TokenBook::RetireNodeCredentials(const std::string& node) {
  MutexLock lock(mu_);
  const int64_t before = GenerationLocked(node);
  generations_[node] = before + 1;
  known_credentials_.erase(node);
  json saved = json::object();
  for (const auto& [name, gen] : generations_) saved[name] = gen;
  if (auto r = persist_(kNodeGenerationsMeta, saved.dump()); !r) {
    if (before == 0) {
      generations_.erase(node);
    } else {
      generations_[node] = before;
    }
    return r;
  }
  return {};
}

std::string TokenBook::NodeCredentialAt(std::string_view node, int64_t generation) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // Generation 0 is the name alone: credentials given before generations existed hold.
  std::string input = "node\n" + std::string(node);
  if (generation > 0) input += "\n" + std::to_string(generation);
  HMAC(EVP_sha256(), node_secret_.data(), static_cast<int>(node_secret_.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &len);
  return std::string(kNodePrefix) + Hex(mac, len) + "_" + std::string(node);
}

Result<Caller> TokenBook::Authenticate(std::string_view bearer, int64_t now_ms) const {
  auto unknown = [] {
    return MakeError(ErrorCode::kUnauthenticated, "the token is not one this head knows (mistyped, or another head's)");
  };
  if (bearer.starts_with(kNodePrefix)) {
    std::string_view rest = bearer.substr(kNodePrefix.size());
    const size_t us = rest.find('_');
    if (us == std::string_view::npos || us + 1 >= rest.size()) return unknown();
    const std::string_view node = rest.substr(us + 1);
    int64_t generation = 0;
    {
      // The usual case, a credential presented before: compared where it is kept, no copy.
      MutexLock lock(mu_);
      generation = GenerationLocked(node);
      if (auto it = known_credentials_.find(node); it != known_credentials_.end() && it->second.generation == generation &&
                                                   ConstantTimeEqual(it->second.credential, bearer)) {
        return NodeCaller(node);
      }
    }
    const std::string expected = NodeCredentialAt(node, generation);
    if (!ConstantTimeEqual(expected, bearer)) {
      // One of the name's retired credentials (the last few): say so, so its agent's
      // operator knows to register it again.
      for (int64_t g = generation - 1; g >= 0 && g >= generation - 8; --g) {
        if (ConstantTimeEqual(NodeCredentialAt(node, g), bearer)) {
          return Errorf(ErrorCode::kUnauthenticated,
                        "the credential of node {} was retired when the node was removed; restart its agent to "
                        "register again with a join token",
                        node.substr(0, 200));
        }
      }
      return unknown();
    }
    {
      MutexLock lock(mu_);
      if (GenerationLocked(node) == generation) known_credentials_[std::string(node)] = {generation, expected};
    }
    return NodeCaller(node);
  }
  if (!bearer.starts_with(kTokenPrefix)) return unknown();
  std::string_view rest = bearer.substr(kTokenPrefix.size());
  if (rest.size() != kIdHexDigits + 1 + kSecretHexDigits || rest[kIdHexDigits] != '_') return unknown();
  const std::string id(rest.substr(0, kIdHexDigits));
  const std::string_view secret = rest.substr(kIdHexDigits + 1);
  Record rec;
  {
    MutexLock lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) return unknown();
    rec = it->second;
  }
  if (!ConstantTimeEqual(Sha256Hex(rec.salt, secret), rec.hash)) return unknown();
  if (rec.info.revoked_ms != 0) {
    return Errorf(ErrorCode::kUnauthenticated, "token {} was revoked", id);
  }
  if (rec.info.expires_ms != 0 && now_ms >= rec.info.expires_ms) {
    return Errorf(ErrorCode::kUnauthenticated, "token {} expired", id);
  }
  Caller c;
  c.kind = Caller::Kind::kToken;
  c.user = rec.info.user;
  c.role = rec.info.role;
  c.token_id = id;
  return c;
}

}  // namespace cohort::head
