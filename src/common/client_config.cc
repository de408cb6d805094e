#include "common/client_config.h"

#include "common/file_modes.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace cohort {

namespace {

std::string Trim(std::string s) {
  const char* ws = " \t\r";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

}  // namespace

std::string ClientConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg == '/') {
    return std::string(xdg) + "/cohort/config";
  }
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h == '/') {
    home = h;
  } else if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_dir && *pw->pw_dir == '/') {
    home = pw->pw_dir;
  }
  return home.empty() ? "" : home + "/.config/cohort/config";
}

Result<std::optional<ClientConfig>> ReadClientConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<ClientConfig>();
  std::ifstream in(path);
  if (!in) return Errorf(ErrorCode::kInvalidArgument, "cannot read {}: {}", path, std::strerror(errno));
  ClientConfig c;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n > 1000 || line.size() > 8192) return Errorf(ErrorCode::kInvalidArgument, "{}: too large", path);
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    line = Trim(line);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      return Errorf(ErrorCode::kInvalidArgument, "{}:{}: expected \"key: value\", got '{}'", path, n,
                    line.substr(0, 80));
    }
    const std::string key = Trim(line.substr(0, colon));
    std::string value = Trim(line.substr(colon + 1));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (key == "head") {
      c.head = value;
    } else if (key == "token") {
      c.token = value;
    } else if (key == "ca") {
      c.ca = value;
    } else {
      return Errorf(ErrorCode::kInvalidArgument, "{}:{}: unknown key '{}' (known: head, token, ca)", path, n,
                    key.substr(0, 80));
    }
  }
  return std::optional<ClientConfig>(c);
}

Result<void> WriteClientConfig(const std::string& path, const ClientConfig& config) {
  namespace fs = std::filesystem;
  for (const std::string* v : {&config.head, &config.token, &config.ca}) {
    if (v->find_first_of("\n\r#") != std::string::npos) {
      return MakeError(ErrorCode::kInvalidArgument, "client config values may not hold newlines or '#'");
    }
  }
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return Errorf(ErrorCode::kInvalidArgument, "cannot create {}: {}", dir.string(), ec.message());
    chmod(dir.c_str(), 0700);
  }
  std::ostringstream text;
  text << "# Written by cohort (cohort login, or a head's first start). Keep it private.\n";
  if (!config.head.empty()) text << "head: " << config.head << "\n";
  if (!config.token.empty()) text << "token: " << config.token << "\n";
  if (!config.ca.empty()) text << "ca: " << config.ca << "\n";
  if (auto w = WritePrivateFileAtomically(path, text.str()); !w) {
    return MakeError(ErrorCode::kInvalidArgument, w.error().message);  // a path the user chose
  }
  return {};
}

}  // namespace cohort
