#include "api/container_spec.h"

#include <algorithm>
#include <cctype>

namespace cohort::api {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One path component: [a-z0-9]+ ((. | _ | __ | -+) [a-z0-9]+)*
bool IsPathComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size();) {
    if (IsLowerAlnum(c[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < c.size() && !IsLowerAlnum(c[j])) ++j;
    std::string_view sep = c.substr(i, j - i);
    const bool dashes = std::all_of(sep.begin(), sep.end(), [](char ch) { return ch == '-'; });
    if (sep != "." && sep != "_" && sep != "__" && !dashes) return false;
    i = j;
  }
  return true;
}

// A registry host: DNS labels (letters, digits, '-') joined by '.', then an optional :port.
bool IsHost(std::string_view h) {
  std::string_view port;
  if (auto colon = h.rfind(':'); colon != std::string_view::npos) {
    port = h.substr(colon + 1);
    h = h.substr(0, colon);
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return false;
  }
  if (h.empty()) return false;
  size_t start = 0;
  while (start <= h.size()) {
    size_t dot = h.find('.', start);
    std::string_view label = h.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

bool IsTag(std::string_view t) {
  if (t.empty() || t.size() > 128) return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (!word(t.front())) return false;
  return std::all_of(t.begin(), t.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
}

bool IsDigest(std::string_view d) {
  auto colon = d.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::string_view algo = d.substr(0, colon), hex = d.substr(colon + 1);
  if (!std::all_of(algo.begin(), algo.end(), [](char c) { return IsLowerAlnum(c) || c == '+' || c == '.' || c == '_' || c == '-'; })) {
    return false;
  }
  return hex.size() >= 32 && std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

Result<void> ValidateImageReference(std::string_view image, const std::string& field) {
  if (image.empty()) return FieldError(field, "is empty; name an image, e.g. 'localhost/trainer:1.0'");
  if (image.size() > 512) return FieldError(field, "is {} bytes long; an image reference has at most 512", image.size());
  std::string_view rest = image;
  std::string_view digest;
  if (auto at = rest.find('@'); at != std::string_view::npos) {
    digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (!IsDigest(digest)) {
      return FieldError(field, "'{}': the digest after '@' must be ALGORITHM:HEX (e.g. sha256: and 64 hex digits)", image);
    }
  }
  std::string_view tag;
  const size_t last_slash = rest.rfind('/');
  if (auto colon = rest.rfind(':'); colon != std::string_view::npos && (last_slash == std::string_view::npos || colon > last_slash)) {
    tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!IsTag(tag)) {
      return FieldError(field, "'{}': the tag '{}' must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
                        image, tag);
    }
  }
  if (rest.size() > 255) return FieldError(field, "'{}': the name is {} bytes; at most 255", image, rest.size());
  // The first component is a registry host when it has a '.' or a ':' or is "localhost".
  std::string_view path = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, slash);
    if (first == "localhost" || first.find_first_of(".:") != std::string_view::npos) {
      if (!IsHost(first)) return FieldError(field, "'{}': '{}' is not a registry host[:port]", image, first);
      path = rest.substr(slash + 1);
    }
  }
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string_view component = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!IsPathComponent(component)) {
      return FieldError(field,
                        "'{}': the name part '{}' must be lowercase letters and digits, joined by '.', '_', '__' or '-'",
                        image, component);
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return {};
}

Result<ContainerSpec> ContainerSpecFromJson(const json& j, const std::string& field, UnknownFields unknown) {
  auto r = COHORT_TRY(ObjectReader::Open(j, field));
  ContainerSpec c;
  c.image = COHORT_TRY(r.String("image", std::nullopt, 1024));
  c.runtime = COHORT_TRY(r.String("runtime", "podman", 64));
  COHORT_TRY_VOID(r.Finish(unknown));
  COHORT_TRY_VOID(ValidateImageReference(c.image, r.FieldName("image")));
  if (std::find(std::begin(kContainerRuntimes), std::end(kContainerRuntimes), c.runtime) == std::end(kContainerRuntimes)) {
    return FieldError(r.FieldName("runtime"), "must be 'podman' or 'docker', got '{}'", c.runtime);
  }
  return c;
}

json ToJson(const ContainerSpec& c) { return json{{"image", c.image}, {"runtime", c.runtime}}; }

}  // namespace cohort::api
