#include "comm/communicator_base.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cohort::comm {

namespace {

Result<void> CheckPointer(std::string_view op, std::string_view what, const void* p,
                          size_t count) {
  if (p == nullptr && count > 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: {} is null for {} elements", op, what, count);
  }
  return {};
}

// kInvalidArgument unless `counts` has one entry per rank of a group of `size`.
Result<void> CheckCounts(std::string_view op, std::string_view what,
                         std::span<const size_t> counts, int size) {
  if (counts.size() != static_cast<size_t>(size)) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: {} has {} entries, the group has {} ranks",
                  op, what, counts.size(), size);
  }
  return {};
}

size_t Sum(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

}  // namespace

Result<int> CheckSplitMembers(std::span<const int> ranks, int size, int rank) {
  if (ranks.empty()) return Errorf(ErrorCode::kInvalidArgument, "split: the member list is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return Errorf(ErrorCode::kInvalidArgument, "split: rank {} is not in a group of {}", ranks[i],
                    size);
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return Errorf(ErrorCode::kInvalidArgument,
                    "split: ranks must be sorted and unique, got {} after {}", ranks[i],
                    ranks[i - 1]);
    }
  }
  auto self = std::find(ranks.begin(), ranks.end(), rank);
  if (self == ranks.end()) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "split: rank {} called Split for a group it is not in ([{}])", rank,
                  fmt::join(ranks, ", "));
  }
  return static_cast<int>(self - ranks.begin());
}

std::string MemberKey(std::span<const int> members) {
  if (members.size() <= 16) return fmt::format("s{}", fmt::join(members, "-"));
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (int m : members) {
    h ^= static_cast<uint32_t>(m);
    h *= 0x100000001b3ull;
  }
  return fmt::format("s{}x{:016x}", members.size(), h);
}

std::string GroupKeyPrefix(const GroupConfig& config, std::string_view backend_dir,
                           std::string_view group_id) {
  return fmt::format("{}/{}{}/", config.prefix, backend_dir, group_id);
}

std::string RendezvousName(std::string_view backend, std::string_view group_id, int rank,
                           int size) {
  return fmt::format("rendezvous of {} group '{}' (rank {} of {})", backend, group_id, rank, size);
}

Result<void> ClaimRank(const std::shared_ptr<Store>& store, const std::string& key_prefix,
                       int rank, const std::string& what) {
  if (store == nullptr) return {};
  auto claims = store->Add(fmt::format("{}claims/{}", key_prefix, rank), 1);
  if (!claims) return std::unexpected(WithContext(claims.error(), what));
  if (*claims > 1) {
    return Errorf(ErrorCode::kInvalidArgument,
                  "{}: rank {} was claimed {} times (two processes with the same rank, or a "
                  "prefix reused from an earlier communicator: make CommOptions.prefix unique)",
                  what, rank, *claims);
  }
  return {};
}

std::vector<int> WorldRanks(int n) {
  std::vector<int> world(static_cast<size_t>(n));
  std::iota(world.begin(), world.end(), 0);
  return world;
}

CommunicatorBase::CommunicatorBase(GroupConfig config, std::string group_id,
                                   std::vector<int> world_ranks, int rank)
    : config_(std::move(config)),
      group_id_(std::move(group_id)),
      world_ranks_(std::move(world_ranks)),
      rank_(rank),
      size_(static_cast<int>(world_ranks_.size())) {
  for (int r = 0; r < size_; ++r) rank_names_.push_back(RankName(r, world_ranks_[r]));
}

Result<void> CommunicatorBase::CheckUsable() const {
  if (!broken_) return {};
  return Errorf(ErrorCode::kFailedPrecondition,
                "communicator unusable after an earlier failure; create a new one ({})",
                broken_->message);
}

void CommunicatorBase::MarkBroken(const Error& e) {
  if (!broken_) broken_ = e;
  OnBroken();
}

Error CommunicatorBase::NeverStarted(const std::string& op,
                                     std::span<const std::string> absent) const {
  return Error(ErrorCode::kDeadlineExceeded,
               fmt::format("{} timed out after {} waiting for {}, which never started it", op,
                           Timeout(), JoinRankNames(absent)));
}

Result<CollectiveDescriptor> CommunicatorBase::Sequence(CollectiveDescriptor d) {
  COHORT_TRY_VOID(CheckUsable());
  d.seq = ++seq_;
  return d;
}

Result<void> CommunicatorBase::AllReduce(const void* send, void* recv, size_t count,
                                         DataType type, ReduceOp op) {
  COHORT_TRY_VOID(CheckPointer("allreduce", "send", send, count));
  COHORT_TRY_VOID(CheckPointer("allreduce", "recv", recv, count));
  const CollectiveDescriptor d = COHORT_TRY(Sequence(DescribeAllReduce(count, type, op)));
  return RunAllReduce(d, send, recv, count, type, op);
}

Result<void> CommunicatorBase::ReduceScatter(const void* send, void* recv,
                                             std::span<const size_t> recv_counts, DataType type,
                                             ReduceOp op) {
  COHORT_TRY_VOID(CheckCounts("reduce_scatter", "recv_counts", recv_counts, size_));
  COHORT_TRY_VOID(CheckPointer("reduce_scatter", "send", send, Sum(recv_counts)));
  COHORT_TRY_VOID(CheckPointer("reduce_scatter", "recv", recv, recv_counts[rank_]));
  const CollectiveDescriptor d =
      COHORT_TRY(Sequence(DescribeReduceScatter(recv_counts, type, op)));
  return RunReduceScatter(d, send, recv, recv_counts, type, op);
}

Result<void> CommunicatorBase::AllGather(const void* send, void* recv,
                                         std::span<const size_t> counts, DataType type) {
  COHORT_TRY_VOID(CheckCounts("allgather", "counts", counts, size_));
  COHORT_TRY_VOID(CheckPointer("allgather", "send", send, counts[rank_]));
  COHORT_TRY_VOID(CheckPointer("allgather", "recv", recv, Sum(counts)));
  const CollectiveDescriptor d = COHORT_TRY(Sequence(DescribeAllGather(counts, type)));
  return RunAllGather(d, send, recv, counts, type);
}

Result<void> CommunicatorBase::Broadcast(void* buf, size_t count, DataType type, int root) {
  if (root < 0 || root >= size_) {
    return Errorf(ErrorCode::kInvalidArgument, "broadcast: root {} is not a rank of a group of {}",
                  root, size_);
  }
  COHORT_TRY_VOID(CheckPointer("broadcast", "buf", buf, count));
  const CollectiveDescriptor d = COHORT_TRY(Sequence(DescribeBroadcast(count, type, root)));
  return RunBroadcast(d, buf, count, type, root);
}

Result<void> CommunicatorBase::Barrier() {
  const CollectiveDescriptor d = COHORT_TRY(Sequence(DescribeBarrier()));
  return RunBarrier(d);
}

Result<void> CommunicatorBase::Send(const void* buf, size_t count, DataType type, int peer,
                                    int tag) {
  return PointToPoint(true, const_cast<void*>(buf), count, type, peer, tag);
}

Result<void> CommunicatorBase::Recv(void* buf, size_t count, DataType type, int peer, int tag) {
  return PointToPoint(false, buf, count, type, peer, tag);
}

Result<void> CommunicatorBase::PointToPoint(bool is_send, void* buf, size_t count, DataType type,
                                            int peer, int tag) {
  const char* verb = is_send ? "send" : "recv";
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: peer {} must be another rank of a group of {}",
                  verb, peer, size_);
  }
  if (tag < 0) {
    return Errorf(ErrorCode::kInvalidArgument, "{}: tag must be >= 0, got {}", verb, tag);
  }
  COHORT_TRY_VOID(CheckPointer(verb, "buf", buf, count));
  COHORT_TRY_VOID(CheckUsable());
  PointToPointCall call{is_send, buf, count, type, peer, tag, ""};
  call.op = fmt::format("{} {} {} (tag {}, {}, {} elements)", verb, is_send ? "to" : "from",
                        Name(peer), tag, DataTypeName(type), count);
  return RunPointToPoint(call);
}

Result<std::unique_ptr<Communicator>> CommunicatorBase::Split(std::span<const int> ranks) {
  const int self_index = COHORT_TRY(CheckSplitMembers(ranks, size_, rank_));
  COHORT_TRY_VOID(CheckUsable());
  std::vector<int> members(ranks.begin(), ranks.end());
  const int nth = split_counts_[members]++;
  std::string child_id = fmt::format("{}/{}.{}", group_id_, MemberKey(members), nth);
  std::vector<int> child_world;
  for (int r : members) child_world.push_back(world_ranks_[r]);
  auto child = ConnectGroup(std::move(child_id), std::move(child_world), self_index);
  if (!child) {
    return std::unexpected(WithContext(
        child.error(), fmt::format("split into [{}] (every member must call Split with this list)",
                                   fmt::join(members, ", "))));
  }
  return child;
}

}  // namespace cohort::comm
