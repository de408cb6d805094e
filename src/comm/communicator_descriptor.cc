#include "comm/communicator_descriptor.h"

#include <fmt/format.h>

namespace cohort::comm {

namespace {

// FNV-1a over the counts: the same on every rank for the same layout.
uint64_t HashCounts(std::span<const size_t> counts) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(counts.size());
  for (size_t c : counts) mix(c);
  return h;
}

uint64_t Sum(std::span<const size_t> counts) {
  uint64_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

CollectiveDescriptor Make(CollectiveKind kind, uint64_t count, DataType type) {
  CollectiveDescriptor d;
  d.kind = static_cast<uint32_t>(kind);
  d.count = count;
  d.dtype = static_cast<uint32_t>(type);
  return d;
}

std::string_view DtypeName(uint32_t dtype) {
  if (dtype > static_cast<uint32_t>(DataType::kInt64)) return "?";
  return DataTypeName(static_cast<DataType>(dtype));
}

std::string_view ReduceName(uint32_t reduce) {
  if (reduce > static_cast<uint32_t>(ReduceOp::kMin)) return "?";
  return ReduceOpName(static_cast<ReduceOp>(reduce));
}

std::string_view KindName(uint32_t kind) {
  if (kind < 1 || kind > static_cast<uint32_t>(CollectiveKind::kBarrier)) return "unknown";
  return CollectiveName(static_cast<CollectiveKind>(kind));
}

}  // namespace

std::string_view CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "allreduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

CollectiveDescriptor DescribeAllReduce(size_t count, DataType type, ReduceOp op) {
  CollectiveDescriptor d = Make(CollectiveKind::kAllReduce, count, type);
  d.reduce = static_cast<uint32_t>(op);
  return d;
}

CollectiveDescriptor DescribeReduceScatter(std::span<const size_t> counts, DataType type,
                                           ReduceOp op) {
  CollectiveDescriptor d = Make(CollectiveKind::kReduceScatter, Sum(counts), type);
  d.layout = HashCounts(counts);
  d.reduce = static_cast<uint32_t>(op);
  return d;
}

CollectiveDescriptor DescribeAllGather(std::span<const size_t> counts, DataType type) {
  CollectiveDescriptor d = Make(CollectiveKind::kAllGather, Sum(counts), type);
  d.layout = HashCounts(counts);
  return d;
}

CollectiveDescriptor DescribeBroadcast(size_t count, DataType type, int root) {
  CollectiveDescriptor d = Make(CollectiveKind::kBroadcast, count, type);
  d.root = root;
  return d;
}

CollectiveDescriptor DescribeBarrier() { return Make(CollectiveKind::kBarrier, 0, DataType::kFloat32); }

std::string DescribeCall(const CollectiveDescriptor& d, bool with_seq) {
  std::string name(KindName(d.kind));
  if (with_seq) name += fmt::format(" #{}", d.seq);
  if (d.magic != CollectiveDescriptor::kMagic) return name + "(<corrupt descriptor>)";
  switch (static_cast<CollectiveKind>(d.kind)) {
    case CollectiveKind::kAllReduce:
      return fmt::format("{}({}, {}, {})", name, DtypeName(d.dtype), d.count, ReduceName(d.reduce));
    case CollectiveKind::kReduceScatter:
      return fmt::format("{}({}, {} in layout {:08x}, {})", name, DtypeName(d.dtype), d.count,
                         static_cast<uint32_t>(d.layout), ReduceName(d.reduce));
    case CollectiveKind::kAllGather:
      return fmt::format("{}({}, {} in layout {:08x})", name, DtypeName(d.dtype), d.count,
                         static_cast<uint32_t>(d.layout));
    case CollectiveKind::kBroadcast:
      return fmt::format("{}({}, {}, root {})", name, DtypeName(d.dtype), d.count, d.root);
    case CollectiveKind::kBarrier:
      return name + "()";
  }
  return name + "(?)";
}

std::string DescribeOp(const CollectiveDescriptor& d) {
  std::string head = fmt::format("{} #{}", KindName(d.kind), d.seq);
  switch (static_cast<CollectiveKind>(d.kind)) {
    case CollectiveKind::kBarrier:
      return head;
    case CollectiveKind::kBroadcast:
      return fmt::format("{} ({}, {} elements, root {})", head, DtypeName(d.dtype), d.count, d.root);
    default:
      return fmt::format("{} ({}, {} elements)", head, DtypeName(d.dtype), d.count);
  }
}

std::string RankName(int rank, int world_rank) {
  if (rank == world_rank) return fmt::format("rank {}", rank);
  return fmt::format("rank {} (world rank {})", rank, world_rank);
}

std::string JoinRankNames(std::span<const std::string> names) {
  if (names.empty()) return "no rank";
  if (names.size() == 1) return names[0];
  // "ranks 2, 3 and 5": drop the repeated word "rank " from all but the first.
  std::string out = "ranks " + names[0].substr(names[0].rfind("rank ", 0) == 0 ? 5 : 0);
  for (size_t i = 1; i < names.size(); ++i) {
    out += i + 1 == names.size() ? " and " : ", ";
    out += names[i].rfind("rank ", 0) == 0 ? names[i].substr(5) : names[i];
  }
  return out;
}

Result<void> CheckDescriptors(std::span<const CollectiveDescriptor> all,
                              std::span<const std::string> rank_names) {
  auto name = [&](size_t r) {
    return r < rank_names.size() ? rank_names[r] : fmt::format("rank {}", r);
  };
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const bool seq_differs = all[r].seq != all[0].seq;
    return Errorf(ErrorCode::kInvalidArgument,
                  "collective mismatch at #{}: {} called {}, {} called {}", all[0].seq, name(0),
                  DescribeCall(all[0], seq_differs), name(r), DescribeCall(all[r], seq_differs));
  }
  return {};
}

}  // namespace cohort::comm
