#include "head/list_page.h"

#include "common/http.h"

namespace cohort::head {

namespace {

Result<std::vector<std::string>> ParseFields(std::string_view text, const std::set<std::string>& known) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string name(text.substr(start, end - start));
    start = end + 1;
    if (name.empty()) continue;
    if (!known.contains(name)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return MakeError(ErrorCode::kInvalidArgument, fmt::format("fields: unknown field '{}' (known: {})",
                                                                name.substr(0, 64), list), "fields");
    }
    out.push_back(std::move(name));
  }
  return out;
}

}  // namespace

Result<PageParams> ParsePageParams(const httplib::Request& req, const std::set<std::string>& known) {
  PageParams p;
  p.limit = static_cast<size_t>(COHORT_TRY(
      QueryIntParam(req, "limit", static_cast<int64_t>(kDefaultPageLimit), 1, static_cast<int64_t>(kMaxPageLimit))));
  if (req.has_param("cursor")) {
    p.cursor = req.get_param_value("cursor");
    if (p.cursor.empty() || p.cursor.size() > 256) {
      return MakeError(ErrorCode::kInvalidArgument, "cursor: must be the next_cursor of a previous reply", "cursor");
    }
  }
  if (req.has_param("fields")) p.fields = COHORT_TRY(ParseFields(req.get_param_value("fields"), known));
  return p;
}

json Project(json item, const std::vector<std::string>& fields, std::string_view key) {
  if (fields.empty() || !item.is_object()) return item;
  json out = json::object();
  if (item.contains(key)) out[std::string(key)] = std::move(item[std::string(key)]);
  for (const auto& f : fields) {
    if (f != key && item.contains(f)) out[f] = std::move(item[f]);  // the key is moved already
  }
  return out;
}

std::set<std::string> KeysOf(const json& item) {
  std::set<std::string> keys;
  for (const auto& [k, v] : item.items()) keys.insert(k);
  return keys;
}

}  // namespace cohort::head
