// CollectiveDescriptor: a fixed-size summary of one collective call (kind, dtype, counts,
// reduce op, root, sequence number) that backends exchange among ranks before moving
// data, to catch mismatched calls and to learn which ranks have checked in. The layout is
// plain bytes (48, host byte order: every host of a job has the same) so any backend can
// send it as-is. Also the names used in every communicator error message. Plain values:
// thread-safe. Shared by all backends; no backend headers here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::comm {

enum class CollectiveKind : uint32_t {
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kBroadcast = 4,
  kBarrier = 5,
};

// "allreduce", "reduce_scatter", "allgather", "broadcast", "barrier".
std::string_view CollectiveName(CollectiveKind kind);

struct CollectiveDescriptor {
  uint64_t seq = 0;     // the n-th collective on the communicator, from 1
  uint64_t count = 0;   // elements: the count, or sum(counts) for reduce_scatter/allgather
  uint64_t layout = 0;  // hash of the per-rank counts (reduce_scatter/allgather), else 0
  uint32_t magic = kMagic;
  uint32_t kind = 0;    // CollectiveKind
  uint32_t dtype = 0;   // DataType
  uint32_t reduce = 0;  // ReduceOp (reductions only)
  int32_t root = -1;    // broadcast only
  uint32_t reserved = 0;

  static constexpr uint32_t kMagic = 0xC0C0'0001;
  bool operator==(const CollectiveDescriptor&) const = default;
};
static_assert(sizeof(CollectiveDescriptor) == 48);
static_assert(std::is_trivially_copyable_v<CollectiveDescriptor>);

// Descriptors of each collective (seq is filled in by the backend).
CollectiveDescriptor DescribeAllReduce(size_t count, DataType type, ReduceOp op);
CollectiveDescriptor DescribeReduceScatter(std::span<const size_t> counts, DataType type,
                                           ReduceOp op);
CollectiveDescriptor DescribeAllGather(std::span<const size_t> counts, DataType type);
CollectiveDescriptor DescribeBroadcast(size_t count, DataType type, int root);
CollectiveDescriptor DescribeBarrier();

// The call as written: "allreduce(float32, 1024, sum)", "broadcast(int32, 8, root 2)",
// "reduce_scatter(bfloat16, 1000 in layout 3f2a9c1e, avg)", "barrier()". With
// `with_seq`, the sequence number follows the name: "allreduce #5(float32, 1024, sum)".
std::string DescribeCall(const CollectiveDescriptor& d, bool with_seq = false);

// The operation for error messages: "allreduce #17 (float32, 1048576 elements)",
// "broadcast #3 (int32, 8 elements, root 2)", "barrier #4".
std::string DescribeOp(const CollectiveDescriptor& d);

// Checks that every rank's descriptor (all[r] from rank r) equals all[0]. On mismatch
// returns kInvalidArgument "collective mismatch at #5: rank 0 called allreduce(float32,
// 1024, sum), rank 2 called allreduce(float32, 2048, sum)" — the same text on every rank
// since every rank sees the same descriptors. `rank_names[r]` names rank r ("rank 2", or
// "rank 1 (world rank 5)" in a sub-group); empty: "rank r".
Result<void> CheckDescriptors(std::span<const CollectiveDescriptor> all,
                              std::span<const std::string> rank_names = {});

// "rank 3"; "rank 1 (world rank 3)" when the rank in a sub-group differs from its world rank.
std::string RankName(int rank, int world_rank);

// "rank 3", "ranks 2, 3 and 5".
std::string JoinRankNames(std::span<const std::string> names);

}  // namespace cohort::comm
