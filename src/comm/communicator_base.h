// CommunicatorBase: what every Communicator backend shares, between the Communicator
// interface (communicator.h) and the backends (gloo/, nccl/), which implement only the
// transfers and their own rendezvous.
//
// The base owns the group (id, members' world ranks, this rank, names for messages) and
// implements the public calls: it validates their arguments (kInvalidArgument naming the
// op: "allgather: counts has 3 entries, the group has 4 ranks"), refuses every call once
// the communicator is broken (kFailedPrecondition carrying the original cause), numbers the
// collectives (#1, #2, ... per communicator) and then hands a sequenced
// CollectiveDescriptor (or a named point-to-point call) to the backend's Run* hook. Split
// is done here too: it checks the member list, names the sub-group in the store
// ("<group>/s0-2-4.<n>") and asks the backend to connect it (ConnectGroup). A backend
// reports a failure with MarkBroken, which keeps the first cause and calls the backend's
// OnBroken to drop its connections (so that peers waiting on this rank fail promptly).
//
// Store layout helpers (GroupKeyPrefix, ClaimRank) keep both backends' rendezvous keys and
// messages alike. Threading: as Communicator (one thread at a time per communicator); the
// free functions are pure or touch only their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/communicator_descriptor.h"
#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

// What a communicator and every sub-group split from it share, whatever the backend.
struct GroupConfig {
  std::shared_ptr<Store> store;  // null only for a world of one without a store
  std::string prefix;            // CommOptions::prefix
  Millis timeout{0};             // bound on every wait
  bool check_consistency = true;
  // Per world rank, its host key (ShmHostKey) when backend auto made the world, else
  // empty: a gloo group splits a sub-group whose members share one host over shm.
  std::vector<std::string> host_keys;

  static GroupConfig From(const CommOptions& options) {
    return {options.store, options.prefix, options.timeout, options.check_consistency, {}};
  }
};

// One Send or Recv, validated: `op` names it for errors ("send to rank 1 (tag 3, float32,
// 8 elements)"). `buf` is the caller's buffer (only read for a send).
struct PointToPointCall {
  bool is_send = false;
  void* buf = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  int peer = 0;
  int tag = 0;
  std::string op;
};

// Checks a Split member list (non-empty, in [0, size), sorted, unique, containing `rank`)
// and returns this rank's index in it; kInvalidArgument "split: ..." otherwise.
Result<int> CheckSplitMembers(std::span<const int> ranks, int size, int rank);

// A short, store-safe name for a member list: "s0-2-4-6", or "s<n>x<hash>" for lists of
// more than 16 ranks.
std::string MemberKey(std::span<const int> members);

// "<prefix>/<backend_dir><group_id>/": where a group's rendezvous keys live. Gloo's
// backend_dir is "" and NCCL's "nccl/" (the layout predates this helper; keep it).
std::string GroupKeyPrefix(const GroupConfig& config, std::string_view backend_dir,
                           std::string_view group_id);

// "rendezvous of <backend> group '<group_id>' (rank <rank> of <size>)": the context of
// every rendezvous error.
std::string RendezvousName(std::string_view backend, std::string_view group_id, int rank,
                           int size);

// Counts a claim of `rank` under `key_prefix` ("<key_prefix>claims/<rank>"), so that two
// processes with the same rank (or a prefix reused from an earlier communicator) fail
// with kInvalidArgument instead of racing or waiting. No store: nothing to claim. Store
// errors keep their code, with `what` (RendezvousName) in front.
Result<void> ClaimRank(const std::shared_ptr<Store>& store, const std::string& key_prefix,
                       int rank, const std::string& what);

// 0, 1, ..., n - 1: the world ranks of the first communicator.
std::vector<int> WorldRanks(int n);

class CommunicatorBase : public Communicator {
 public:
  CommunicatorBase(const CommunicatorBase&) = delete;
  CommunicatorBase& operator=(const CommunicatorBase&) = delete;

  int rank() const final { return rank_; }
  int size() const final { return size_; }

  // The Communicator calls: validation, broken state and sequence numbers here, the
  // transfer in the backend's Run* hook.
  Result<void> AllReduce(const void* send, void* recv, size_t count, DataType type,
                         ReduceOp op) final;
  Result<void> ReduceScatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                             DataType type, ReduceOp op) final;
  Result<void> AllGather(const void* send, void* recv, std::span<const size_t> counts,
                         DataType type) final;
  Result<void> Broadcast(void* buf, size_t count, DataType type, int root) final;
  Result<void> Barrier() final;
  Result<void> Send(const void* buf, size_t count, DataType type, int peer, int tag) final;
  Result<void> Recv(void* buf, size_t count, DataType type, int peer, int tag) final;
  Result<std::unique_ptr<Communicator>> Split(std::span<const int> ranks) final;

 protected:
  // The group `group_id` of `world_ranks.size()` ranks (world rank of each member, in
  // order); this is `rank`.
  CommunicatorBase(GroupConfig config, std::string group_id, std::vector<int> world_ranks,
                   int rank);

  // The transfers. Each is called with valid arguments on a usable communicator; `d`
  // carries the collective's sequence number. A transport failure must MarkBroken (a
  // collective mismatch must not).
  virtual Result<void> RunAllReduce(const CollectiveDescriptor& d, const void* send, void* recv,
                                    size_t count, DataType type, ReduceOp op) = 0;
  // `d.count` is sum(recv_counts).
  virtual Result<void> RunReduceScatter(const CollectiveDescriptor& d, const void* send,
                                        void* recv, std::span<const size_t> recv_counts,
                                        DataType type, ReduceOp op) = 0;
  // `d.count` is sum(counts).
  virtual Result<void> RunAllGather(const CollectiveDescriptor& d, const void* send, void* recv,
                                    std::span<const size_t> counts, DataType type) = 0;
  virtual Result<void> RunBroadcast(const CollectiveDescriptor& d, void* buf, size_t count,
                                    DataType type, int root) = 0;
  virtual Result<void> RunBarrier(const CollectiveDescriptor& d) = 0;
  virtual Result<void> RunPointToPoint(const PointToPointCall& call) = 0;
  // Rendezvous of the sub-group `group_id` (members' world ranks `world_ranks`) in which
  // this is `rank`; errors as CreateCommunicator's.
  virtual Result<std::unique_ptr<Communicator>> ConnectGroup(std::string group_id,
                                                             std::vector<int> world_ranks,
                                                             int rank) = 0;
  // Called by MarkBroken (possibly more than once): release the transport.
  virtual void OnBroken() = 0;

  // kFailedPrecondition "communicator unusable after an earlier failure; create a new one
  // (<first cause>)" once broken.
  Result<void> CheckUsable() const;
  // Records `e` as the cause unless one is recorded, then calls OnBroken.
  void MarkBroken(const Error& e);

  // kDeadlineExceeded "<op> timed out after <timeout> waiting for <ranks>, which never
  // started it": the ranks `absent` never reached collective `op`.
  Error NeverStarted(const std::string& op, std::span<const std::string> absent) const;

  const GroupConfig& config() const { return config_; }
  const std::string& group_id() const { return group_id_; }
  // "rank 1 (world rank 3)"; every rank's name, indexed by rank.
  const std::string& Name(int r) const { return rank_names_[static_cast<size_t>(r)]; }
  const std::vector<std::string>& rank_names() const { return rank_names_; }
  // The timeout as messages show it ("5.0s").
  std::string Timeout() const { return FormatDuration(config_.timeout.count()); }

 private:
  // CheckUsable, then the next sequence number into `d`.
  Result<CollectiveDescriptor> Sequence(CollectiveDescriptor d);
  Result<void> PointToPoint(bool is_send, void* buf, size_t count, DataType type, int peer,
                            int tag);

  const GroupConfig config_;
  const std::string group_id_;
  const std::vector<int> world_ranks_;  // world rank of each member
  const int rank_;
  const int size_;
  std::vector<std::string> rank_names_;  // "rank 1 (world rank 3)"

  uint64_t seq_ = 0;                              // collectives started so far
  std::map<std::vector<int>, int> split_counts_;  // member list -> splits so far
  std::optional<Error> broken_;                   // the failure that broke it
};

}  // namespace cohort::comm
