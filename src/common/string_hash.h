// StringHash: std::hash of a string_view, marked transparent, for unordered maps keyed by
// std::string that are looked up with a string_view (or a const char*) without copying
// the key: std::unordered_map<std::string, V, StringHash, std::equal_to<>>.
//
// Threads: stateless; any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace cohort {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace cohort
