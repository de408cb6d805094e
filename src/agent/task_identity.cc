#include "agent/task_identity.h"

#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <limits>

namespace cohort::agent {
namespace {

// A uid or gid in decimal; the all-ones value means "unchanged" to the set*id calls.
bool ParseId(std::string_view s, uint32_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty() && out != std::numeric_limits<uint32_t>::max();
}

}  // namespace

std::string FormatTaskIdentity(const TaskIdentity& id) {
  std::string s = fmt::format("{}:{}:{}:", id.user, id.uid, id.gid);
  for (size_t i = 0; i < id.groups.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(id.groups[i]);
  }
  return s;
}

Result<TaskIdentity> ParseTaskIdentity(std::string_view text) {
  auto bad = [&](std::string_view what) {
    return Errorf(ErrorCode::kInvalidArgument, "--user needs NAME:UID:GID:GROUP,... ({}), got '{}'", what, text);
  };
  size_t a = text.find(':');
  size_t b = a == std::string_view::npos ? a : text.find(':', a + 1);
  size_t c = b == std::string_view::npos ? b : text.find(':', b + 1);
  if (c == std::string_view::npos) return bad("four fields separated by ':'");
  TaskIdentity id;
  id.user = std::string(text.substr(0, a));
  if (id.user.empty()) return bad("an empty name");
  uint32_t v = 0;
  if (!ParseId(text.substr(a + 1, b - a - 1), v)) return bad("a bad uid");
  id.uid = v;
  if (!ParseId(text.substr(b + 1, c - b - 1), v)) return bad("a bad gid");
  id.gid = v;
  std::string_view groups = text.substr(c + 1);
  while (!groups.empty()) {
    size_t comma = groups.find(',');
    if (!ParseId(groups.substr(0, comma), v)) return bad("a bad group");
    id.groups.push_back(v);
    groups = comma == std::string_view::npos ? std::string_view() : groups.substr(comma + 1);
  }
  return id;
}

int AssumeTaskIdentity(const TaskIdentity& id) {
  if (setgroups(id.groups.size(), id.groups.data()) != 0) return errno;
  if (setgid(id.gid) != 0) return errno;
  if (setuid(id.uid) != 0) return errno;
  // setuid by a privileged process sets the real, effective and saved ids; make sure, and
  // that root's cannot come back.
  if (getuid() != id.uid || geteuid() != id.uid || getgid() != id.gid || getegid() != id.gid) return EPERM;
  if (id.uid != 0 && setuid(0) == 0) return EPERM;
  return 0;
}

}  // namespace cohort::agent
