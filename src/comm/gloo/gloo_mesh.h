// ConnectMesh: a Gloo group's rendezvous (every pair of ranks connected), each connection
// checked to reach the peer it was made for, and the whole mesh made again when one did
// not.
//
// Why. Debian 12's Gloo (2022) gives every pair its own listening socket on an ephemeral
// port, publishes it, and takes the first connection that arrives there for the peer's.
// Anything else that connects to that port while the pair listens is accepted in the
// peer's place: a client that outlived its server and keeps retrying a port the kernel has
// since handed to the pair (a scraper, a heartbeat, a store client). The peer is then
// refused or reset, and Gloo's connectFullMesh fails on one rank and leaves the others
// waiting until the group timeout (seen in CI: "connecting failed: Connection closed by
// peer" on one rank, "Connect timeout" on two others). Newer Gloo has one listener per
// device and names each connection by a number the initiator writes first; Debian 12
// does not ship it.
//
// How. Attempt k (at most kMeshAttempts):
//  1. every rank creates its pairs (Gloo's, listening), publishes their addresses under
//     "mesh<k>/<rank>" and waits for every peer's (this wait absorbs the ranks' skew in
//     reaching the rendezvous);
//  2. it connects every pair in Gloo's order and with Gloo's roles, then sends each peer a
//     token (attempt, its rank, the peer's rank) and receives the peer's over the same
//     connection: a pair that reached something else fails here, not at the first
//     collective;
//  3. a rank that checked every pair adds one to "mesh<k>/ok", and the one that brings it
//     to the group size sets "mesh<k>/outcome" to "ok"; a rank that failed sets it to
//     "retry: <its error>". A watcher thread of every rank waits for the outcome while the
//     rank connects and checks, and on "retry" abandons the attempt at once (the pairs
//     closed, the token waits aborted), so no rank waits out the timeout for a peer that
//     has moved on; every rank then reads the outcome and, on "retry", starts attempt k+1
//     with new pairs (new ports).
// Each wait is bounded by the group timeout. A rank that dies leaves the others waiting
// for it until the timeout, as Gloo's own rendezvous does. The token exchange costs one
// small message each way per pair, once per group.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include "comm/gloo/gloo_errors.h"
#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm::gloo_backend {

inline constexpr int kMeshAttempts = 3;

// The key (under the group's key prefix) where `rank` publishes its pairs' addresses in
// attempt `attempt`: one Gloo tcp::Address per other rank, in rank order.
std::string MeshAddressKey(int attempt, int rank);

struct Mesh {
  std::shared_ptr<::gloo::rendezvous::Context> context;  // connected, checked
  PeerDirectory peers;                                   // the addresses the ranks published
};

// Connects `rank` of a group of `size` > 1 ranks over `device`, its keys under
// `key_prefix` in `store` (non-null), every wait bounded by `timeout`. `what` names the
// rendezvous in errors ("rendezvous of gloo group 'world' (rank 0 of 4)") and `rank_name`
// a rank of the group ("rank 1 (world rank 3)").
struct MeshOptions {
  std::shared_ptr<Store> store;
  std::string key_prefix;
  Millis timeout{0};
  std::shared_ptr<::gloo::transport::Device> device;
  int rank = 0;
  int size = 0;
  std::string what;
  std::function<std::string(int)> rank_name;
};
Result<Mesh> ConnectMesh(const MeshOptions& options);

}  // namespace cohort::comm::gloo_backend
