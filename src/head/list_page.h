// Paging of the head's list endpoints, GET /v1/jobs and GET /v1/nodes, so that a list
// costs the head (and its clients) one page however much the cluster holds:
//   ?limit=N     items per page: default 1000, at most 10000
//   ?cursor=C    the previous reply's "next_cursor": the page after it
//   ?fields=a,b  only these top-level keys of each item (and its key: "id" or "name");
//                a name that no item can have is a 400 that lists the known ones
// A reply carries "next_cursor" while more items follow. Jobs are paged newest first
// (the cursor is a job id: the next page holds the older ones) and listed oldest first
// within a page, so `limit=N` alone keeps meaning "the newest N"; nodes are paged by name.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "common/error.h"
#include "common/json.h"

namespace cohort::head {

inline constexpr size_t kDefaultPageLimit = 1000;
inline constexpr size_t kMaxPageLimit = 10'000;

struct PageParams {
  size_t limit = kDefaultPageLimit;
  std::string cursor;               // empty: the first page
  std::vector<std::string> fields;  // empty: every field
};

// Reads limit, cursor and fields; `known` are the item's possible top-level keys.
Result<PageParams> ParsePageParams(const httplib::Request& req, const std::set<std::string>& known);

// `item` with only `fields` and `key` kept; all of it when `fields` is empty.
json Project(json item, const std::vector<std::string>& fields, std::string_view key);

// The top-level keys of a serialized item (for ParsePageParams' `known`).
std::set<std::string> KeysOf(const json& item);

}  // namespace cohort::head
