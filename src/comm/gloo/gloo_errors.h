// Helpers that turn what Gloo throws into cohort error text: strip Gloo's source-location
// prefixes, tell timeouts from broken connections, and find which rank a Gloo message is
// about. Gloo names peers by socket address ("Connection closed by peer
// [10.0.0.3]:41234"); PeerDirectory maps those back to ranks using the addresses the
// ranks published at rendezvous. Plain values: any thread may read a PeerDirectory.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::comm::gloo_backend {

// "[/build/gloo/transport/tcp/pair.cc:589] Connection closed by peer [::1]:4" →
// "Connection closed by peer [::1]:4".
std::string CleanGlooMessage(std::string_view what);

// True for Gloo's timeout messages ("Timed out waiting 2000ms for recv operation",
// "Read timeout", "Connect timeout", "Application timeout caused pair closure").
bool IsGlooTimeout(std::string_view what);

class PeerDirectory {
 public:
  PeerDirectory() = default;

  // From the values connectFullMesh read at rendezvous: key "<i>" holds rank i's pair
  // addresses (one per other rank, Gloo's tcp::Address bytes).
  static PeerDirectory FromRendezvous(const std::map<std::string, std::vector<char>>& values,
                                      int rank, int size);

  // The rank whose address appears in `message`: an exact host:port match first (the
  // side that connected knows its peer's port), then the host alone when only one peer
  // lives there (the side that accepted sees an ephemeral port). nullopt otherwise.
  std::optional<int> FindRank(std::string_view message) const;

 private:
  std::vector<std::pair<std::string, int>> exact_;   // "[10.0.0.3]:41234" -> rank
  std::map<std::string, std::vector<int>> by_host_;  // "[10.0.0.3]" -> ranks there
};

}  // namespace cohort::comm::gloo_backend
