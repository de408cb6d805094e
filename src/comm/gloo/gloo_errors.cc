#include "comm/gloo/gloo_errors.h"

#include <algorithm>
#include <cctype>
#include <exception>

#include <gloo/transport/tcp/address.h>

namespace cohort::comm::gloo_backend {

namespace {

bool ContainsNoCase(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) ==
                                 std::tolower(static_cast<unsigned char>(b));
                        });
  return it != haystack.end();
}

}  // namespace

std::string CleanGlooMessage(std::string_view what) {
  std::string out;
  size_t i = 0;
  while (i < what.size()) {
    // A "[...file.cc:123] " or "[...file.h:123] " location prefix: drop it.
    if (what[i] == '[') {
      const size_t close = what.find(']', i);
      if (close != std::string_view::npos) {
        std::string_view inside = what.substr(i + 1, close - i - 1);
        const size_t colon = inside.rfind(':');
        const bool is_location =
            colon != std::string_view::npos && colon + 1 < inside.size() &&
            std::all_of(inside.begin() + colon + 1, inside.end(),
                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) &&
            (inside.substr(0, colon).ends_with(".cc") || inside.substr(0, colon).ends_with(".h") ||
             inside.substr(0, colon).ends_with(".cpp"));
        if (is_location) {
          i = close + 1;
          while (i < what.size() && what[i] == ' ') ++i;
          continue;
        }
      }
    }
    out += what[i++];
  }
  return out;
}

bool IsGlooTimeout(std::string_view what) {
  return ContainsNoCase(what, "timed out") || ContainsNoCase(what, "timeout");
}

PeerDirectory PeerDirectory::FromRendezvous(
    const std::map<std::string, std::vector<char>>& values, int rank, int size) {
  PeerDirectory dir;
  if (size < 2) return dir;
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    auto it = values.find(std::to_string(i));
    if (it == values.end() || it->second.empty()) continue;
    const std::vector<char>& all = it->second;
    const size_t addr_size = all.size() / static_cast<size_t>(size - 1);
    const size_t index = static_cast<size_t>(rank > i ? rank - 1 : rank);  // Gloo's layout
    if (addr_size == 0 || (index + 1) * addr_size > all.size()) continue;
    try {
      ::gloo::transport::tcp::Address addr(std::vector<char>(
          all.begin() + static_cast<long>(index * addr_size),
          all.begin() + static_cast<long>((index + 1) * addr_size)));
      std::string text = addr.str();  // "[127.0.0.1]:41234"
      dir.exact_.emplace_back(text, i);
      const size_t colon = text.rfind("]:");
      if (colon != std::string::npos) dir.by_host_[text.substr(0, colon + 1)].push_back(i);
    } catch (const std::exception&) {
      // Not a tcp address (another transport): leave this peer unnamed.
    }
  }
  return dir;
}

std::optional<int> PeerDirectory::FindRank(std::string_view message) const {
  // `addr` must not continue with another digit ("...:4567" is not "...:45678").
  auto contains = [&](const std::string& addr) {
    for (size_t pos = message.find(addr); pos != std::string_view::npos;
         pos = message.find(addr, pos + 1)) {
      const size_t end = pos + addr.size();
      if (end == message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) {
        return true;
      }
    }
    return false;
  };
  for (const auto& [addr, rank] : exact_) {
    if (contains(addr)) return rank;
  }
  for (const auto& [host, ranks] : by_host_) {
    if (ranks.size() == 1 && message.find(host + ":") != std::string_view::npos) return ranks[0];
  }
  return std::nullopt;
}

}  // namespace cohort::comm::gloo_backend
