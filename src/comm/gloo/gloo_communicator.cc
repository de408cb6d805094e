#include "comm/gloo/gloo_communicator.h"

#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/communicator_base.h"
#include "comm/communicator_descriptor.h"
#include "comm/gloo/gloo_errors.h"
#include "comm/gloo/gloo_mesh.h"
#include "comm/gloo/gloo_reduce.h"
#include "comm/gloo/gloo_store.h"
#include "comm/shm/shm_communicator.h"
#include "common/signals.h"

namespace cohort::comm {

namespace {

using gloo_backend::CleanGlooMessage;
using gloo_backend::ConnectMesh;
using gloo_backend::DivideInPlace;
using gloo_backend::GlooStore;
using gloo_backend::IsGlooTimeout;
using gloo_backend::PeerDirectory;
using gloo_backend::ReduceFunction;
using gloo_backend::StoreFailure;
using UnboundBuffer = ::gloo::transport::UnboundBuffer;

// With check_consistency, every collective starts with one message to each peer: an
// ExchangeHeader (the descriptor, and how long a payload follows on its own) and, behind
// it, a payload of up to kMergedPayloadLimit bytes (an allreduce that fuses its first data
// round into the exchange). A longer payload follows in a second message, sent from the
// caller's buffer. Each Gloo message is itself three (a send notice, a receive notice, the
// data), handed between the device thread and the caller's: one message per peer instead
// of a descriptor message and a payload message (empty for most collectives) halves that
// traffic. Whether a second message comes is a function of the descriptor
// (SeparateBytes), so a rank posts that receive up front, as for the header, when its own
// descriptor says one comes. Peers whose descriptors differ (the mismatch the exchange is
// there to catch) may disagree: a header announcing a payload the receiver did not expect
// gets its receive then, and a sender that sees from a peer's header that the peer
// expected a payload it did not send sends an empty one, so every posted receive meets
// exactly one message and the next collective pairs correctly. Every receive has the same
// capacity everywhere (the header's, and kFusedBudget / (size - 1) bytes for a payload,
// which the sender checks against the same constant), so a mismatched peer's message lands
// harmlessly and the communicator stays usable; a longer message would trip an assertion
// on Gloo's device thread. The scratch is reserved, not touched, until payloads use it.
constexpr size_t kFusedBudget = size_t{16} << 20;
constexpr size_t kMergedPayloadLimit = size_t{64} << 10;
struct ExchangeHeader {
  CollectiveDescriptor desc;
  uint64_t separate_bytes = 0;  // the payload's length when it follows on its own, else 0
  uint64_t reserved = 0;
};
static_assert(sizeof(ExchangeHeader) == 64);
// Up to this many payload bytes arrive at a rank (from all peers together), an allreduce
// travels whole inside the exchange and every rank folds it locally: one message round,
// but each rank receives (size - 1) x the payload where the ring receives 2 (size - 1) /
// size x. With two ranks those are equal, so the limit is higher there (measured on 2
// ranks: whole payloads of 2-4 MiB beat both the ring and the split path; from 16 MiB
// the split path, which reduces half as much per rank, wins). Above it (while a chunk
// fits the capacity above) the exchange carries the first round of a two-round reduce-scatter + allgather,
// which moves the ring's bytes in 2 rounds instead of 2 (size - 1).
constexpr size_t kInlineBudget = size_t{1} << 20;
constexpr size_t kInlineLimitPair = size_t{4} << 20;

// Slot prefixes for our own unbound-buffer traffic, clear of Gloo's (0x01..0x08).
constexpr uint8_t kDescriptorSlotPrefix = 0xC0;
constexpr uint8_t kReduceScatterSlotPrefix = 0xC1;
constexpr uint8_t kPointToPointSlotPrefix = 0xC2;
constexpr uint8_t kSplitAllGatherSlotPrefix = 0xC3;

// What a communicator and the sub-groups split from it share.
struct GlooShared {
  GroupConfig group;
  std::shared_ptr<::gloo::transport::Device> device;
};

// Calls f.template operator()<T>() with T an element type of `type`'s size.
template <typename F>
void WithElementType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32: f.template operator()<float>(); return;
    case DataType::kBFloat16:
    case DataType::kFloat16: f.template operator()<uint16_t>(); return;
    case DataType::kInt32: f.template operator()<int32_t>(); return;
    case DataType::kInt64: f.template operator()<int64_t>(); return;
  }
}

Result<std::shared_ptr<::gloo::transport::Device>> OpenDevice(const std::string& iface_host) {
  ::gloo::transport::tcp::attr attr;
  if (!iface_host.empty() && if_nametoindex(iface_host.c_str()) != 0) {
    attr.iface = iface_host;  // an interface name ("eth0") binds that interface's address
  } else {
    std::string host = iface_host;
    if (host.empty()) {
      char name[HOST_NAME_MAX + 1] = {};
      if (gethostname(name, sizeof(name) - 1) != 0) {
        return Errorf(ErrorCode::kUnavailable, "gethostname failed: {}", std::strerror(errno));
      }
      host = name;
    }
    // Debian's Gloo (2022) walks an uninitialized list when getaddrinfo fails (a crash,
    // not an exception): resolve the name here first.
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rv = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (rv != 0) {
      return Errorf(ErrorCode::kUnavailable,
                    "cannot resolve '{}' for gloo's TCP transport: {} (set "
                    "CommOptions.iface_host to an address or interface of this machine)",
                    host, gai_strerror(rv));
    }
    freeaddrinfo(found);
    attr.hostname = host;
  }
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return Errorf(ErrorCode::kUnavailable,
                  "cannot open gloo's TCP transport on '{}': {} (set CommOptions.iface_host to "
                  "an address or interface of this machine)",
                  iface_host.empty() ? "<hostname>" : iface_host, CleanGlooMessage(e.what()));
  }
}

// Whether a Gloo assertion message is about a broken or closed connection.
bool LooksLikeConnectionFailure(std::string_view what) {
  for (std::string_view word : {"connect", "Connect", "closed", "Socket", "socket", "peer",
                                "Pair", "pair", "Read error", "Write error", "state_"}) {
    if (what.find(word) != std::string_view::npos) return true;
  }
  return IsGlooTimeout(what);
}

class GlooCommunicator final : public CommunicatorBase {
 public:
  // Rendezvous of `world_ranks.size()` ranks under group `group_id`; this is `rank`.
  static Result<std::unique_ptr<GlooCommunicator>> Connect(std::shared_ptr<const GlooShared> shared,
                                                           std::string group_id,
                                                           std::vector<int> world_ranks, int rank);

  std::string_view backend() const override { return "gloo"; }

 private:
  // CommunicatorBase: the transfers over Gloo.
  Result<void> RunAllReduce(const CollectiveDescriptor& d, const void* send, void* recv,
                            size_t count, DataType type, ReduceOp op) override;
  Result<void> RunReduceScatter(const CollectiveDescriptor& d, const void* send, void* recv,
                                std::span<const size_t> recv_counts, DataType type,
                                ReduceOp op) override;
  Result<void> RunAllGather(const CollectiveDescriptor& d, const void* send, void* recv,
                            std::span<const size_t> counts, DataType type) override;
  Result<void> RunBroadcast(const CollectiveDescriptor& d, void* buf, size_t count, DataType type,
                            int root) override;
  Result<void> RunBarrier(const CollectiveDescriptor& d) override;
  Result<void> RunPointToPoint(const PointToPointCall& call) override;
  Result<std::unique_ptr<Communicator>> ConnectGroup(std::string group_id,
                                                     std::vector<int> world_ranks,
                                                     int rank) override;
  // Closes every connection of this group, so that peers still waiting on this rank fail
  // now instead of at their timeout (like ncclCommAbort).
  void OnBroken() override;

  GlooCommunicator(std::shared_ptr<const GlooShared> shared, std::string group_id,
                   std::vector<int> world_ranks, int rank,
                   std::shared_ptr<::gloo::rendezvous::Context> context, PeerDirectory peers);

  // An allreduce that may fuse its data movement with the descriptor exchange.
  struct FusedAllReduce {
    const void* send;
    void* recv;
    size_t count;
    DataType type;
    ReduceOp op;
  };
  // How an allreduce with check_consistency moves its data. Every rank picks the same
  // mode for the same descriptor (it depends on count, dtype and size only).
  enum class FusedMode {
    kNone,    // the exchange carries no data; Gloo's ring runs after it
    kInline,  // every rank sends its whole payload to every peer inside the exchange
    kSplit,   // the exchange sends chunk p to rank p; rank p reduces it, then an
              // all-to-all allgather of the reduced chunks (2 rounds in all)
  };
  FusedMode PickMode(const FusedAllReduce& f) const;
  // The bytes of a fused allreduce's send buffer ([offset, offset + length)) that the
  // exchange carries to rank `to` in `mode`: all of it inline, chunk `to` split, none else.
  std::pair<size_t, size_t> Piece(FusedMode mode, size_t count, DataType type, int to) const;
  // Of collective `d`'s payload to rank `to`, what travels in a message of its own
  // (kFusedBudget's comment): its length, or 0 when it rides behind the header or there is
  // none. A function of the descriptor, so sender and receiver compute it alike.
  size_t SeparateBytes(const CollectiveDescriptor& d, int to) const;
  // Elements before chunk `c` when `count` elements are split into size() chunks.
  size_t ChunkBegin(size_t count, int c) const;

  // Runs one collective `d` (already numbered): descriptor exchange, then `body(tag)`,
  // turning Gloo exceptions into Errors. Any failure but a mismatch breaks the communicator.
  // With `fused` (an allreduce) the data may ride in the exchange (PickMode): kInline is
  // reduced here instead of running `body` (one message round in place of the exchange
  // plus Gloo's 2(size-1) ring steps); kSplit finishes with SplitAllGather (two rounds).
  template <typename Body>
  Result<void> RunCollective(const CollectiveDescriptor& d, Body&& body,
                             const FusedAllReduce* fused = nullptr);
  // Runs `f` (a data phase of collective `d`), turning Gloo exceptions into Errors; any
  // failure breaks the communicator.
  template <typename F>
  Result<void> Guarded(const CollectiveDescriptor& d, F&& f);
  // All-to-all exchange of descriptors, each with its payload (kFusedBudget's comment): for
  // `fused` in mode kInline its whole `send`, in mode kSplit chunk p of it for peer p, else
  // none. Sets payload_in_. Names ranks that did not answer; checks that the descriptors
  // agree.
  Result<void> ExchangeDescriptors(const CollectiveDescriptor& mine,
                                   const FusedAllReduce* fused = nullptr,
                                   FusedMode mode = FusedMode::kNone);
  // Folds contributions of ranks 0..size-1 in rank order into `out` (`n` elements):
  // rank r's is `mine` for this rank, else the payload that arrived from r (payload_in_).
  // `out` may alias `mine`: on ranks other than 0, scratch_[0] serves as the accumulator
  // until the last step, so that `mine` is read before `out` is written. Every rank
  // folding the same inputs computes the same bits.
  void FoldInRankOrder(void* out, const void* mine, size_t n, DataType type, ReduceOp op);
  // kSplit's second round: this rank's reduced chunk to every peer, theirs into recv.
  Result<void> SplitAllGather(const CollectiveDescriptor& d, const FusedAllReduce& f);
  Result<void> RingReduceScatter(const CollectiveDescriptor& d, const void* send, void* recv,
                                 std::span<const size_t> counts, DataType type, ReduceOp op,
                                 uint32_t tag);
  // The error for a Gloo exception text during `op`; `peer` is the rank waited on, if known.
  Error TransportError(const std::string& op, std::string_view what,
                       std::optional<int> peer) const;

  const std::shared_ptr<const GlooShared> shared_;
  std::shared_ptr<::gloo::rendezvous::Context> context_;
  PeerDirectory peers_;

  // Descriptor exchange buffers, reused by every collective (kFusedBudget's comment): per
  // peer a first message (header, and up to merged_limit_ payload bytes behind it; a
  // receive accepts any shorter message) and a payload of up to payload_capacity_ bytes.
  // inline_limit_: the largest allreduce (bytes) that travels whole (kInline).
  size_t payload_capacity_ = 0;
  size_t inline_limit_ = 0;
  size_t merged_limit_ = 0;
  size_t first_bytes() const { return sizeof(ExchangeHeader) + merged_limit_; }
  std::vector<CollectiveDescriptor> desc_in_;
  std::unique_ptr<std::byte[]> staging_;  // per peer, first_bytes(): the message we send it
  std::unique_ptr<UnboundBuffer> staging_buf_;
  std::vector<std::unique_ptr<std::byte[]>> first_;  // per peer, first_bytes(): what it sent
  std::vector<std::unique_ptr<UnboundBuffer>> first_bufs_;
  std::vector<std::unique_ptr<std::byte[]>> scratch_;  // per peer, payload_capacity_ bytes
  std::vector<std::unique_ptr<UnboundBuffer>> scratch_bufs_;
  // Where each peer's payload of the current collective is: behind its header in first_,
  // or in scratch_ when it came on its own.
  std::vector<const std::byte*> payload_in_;
};

GlooCommunicator::GlooCommunicator(std::shared_ptr<const GlooShared> shared,
                                   std::string group_id, std::vector<int> world_ranks, int rank,
                                   std::shared_ptr<::gloo::rendezvous::Context> context,
                                   PeerDirectory peers)
    : CommunicatorBase(shared->group, std::move(group_id), std::move(world_ranks), rank),
      shared_(std::move(shared)),
      context_(std::move(context)),
      peers_(std::move(peers)),
      desc_in_(static_cast<size_t>(size())) {
  if (config().check_consistency && size() > 1) {
    payload_capacity_ = (kFusedBudget / static_cast<size_t>(size() - 1)) & ~size_t{63};
    inline_limit_ = size() == 2 ? kInlineLimitPair
                               : (kInlineBudget / static_cast<size_t>(size() - 1)) & ~size_t{7};
    inline_limit_ = std::min(inline_limit_, payload_capacity_);
    merged_limit_ = std::min(kMergedPayloadLimit, payload_capacity_);
  }
  const size_t n = static_cast<size_t>(size());
  staging_.reset(new std::byte[n * first_bytes()]);
  staging_buf_ = context_->createUnboundBuffer(staging_.get(), n * first_bytes());
  first_.resize(n);
  first_bufs_.resize(n);
  scratch_.resize(n);
  scratch_bufs_.resize(n);
  payload_in_.resize(n, nullptr);
  for (int r = 0; r < size(); ++r) {
    if (r == rank) continue;
    first_[r].reset(new std::byte[first_bytes()]);
    first_bufs_[r] = context_->createUnboundBuffer(first_[r].get(), first_bytes());
    if (payload_capacity_ > 0) {
      scratch_[r].reset(new std::byte[payload_capacity_]);  // uninitialized: not touched
      scratch_bufs_[r] = context_->createUnboundBuffer(scratch_[r].get(), payload_capacity_);
    }
  }
}

Result<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    std::shared_ptr<const GlooShared> shared, std::string group_id, std::vector<int> world_ranks,
    int rank) {
  const int size = static_cast<int>(world_ranks.size());
  const std::string what = RendezvousName("gloo", group_id, rank, size);
  const GroupConfig& group = shared->group;
  const std::string key_prefix = GroupKeyPrefix(group, "", group_id);
  // Two processes claiming one rank would race for its address key.
  COHORT_TRY_VOID(ClaimRank(group.store, key_prefix, rank, what));
  if (size == 1) {  // no connection to make (and maybe no store)
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
    GlooStore store(group.store, key_prefix, group.timeout, size);
    try {
      context->setTimeout(group.timeout);
      std::shared_ptr<::gloo::transport::Device> device = shared->device;
      context->connectFullMesh(store, device);
    } catch (const StoreFailure& e) {
      return std::unexpected(WithContext(e.error, what));
    } catch (const std::exception& e) {
      return Errorf(ErrorCode::kUnavailable, "{}: {}", what, CleanGlooMessage(e.what()));
    }
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(
        std::move(shared), std::move(group_id), std::move(world_ranks), rank, std::move(context),
        PeerDirectory()));
  }
  // gloo_mesh.h: Gloo's full mesh, each connection checked and the mesh retried.
  auto mesh = ConnectMesh({group.store, key_prefix, group.timeout, shared->device, rank, size, what,
                           [&](int r) { return RankName(r, world_ranks[static_cast<size_t>(r)]); }});
  if (!mesh) return std::unexpected(mesh.error());
  return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(
      std::move(shared), std::move(group_id), std::move(world_ranks), rank,
      std::move(mesh->context), std::move(mesh->peers)));
}

void GlooCommunicator::OnBroken() {
  try {
    context_->closeConnections();
  } catch (const std::exception&) {
    // Already closed or half-closed: nothing more to do.
  }
}

Error GlooCommunicator::TransportError(const std::string& op, std::string_view what,
                                       std::optional<int> peer) const {
  std::string msg = CleanGlooMessage(what);
  if (!peer) peer = peers_.FindRank(msg);
  if (IsGlooTimeout(msg)) {
    if (peer) {
      return Error(ErrorCode::kDeadlineExceeded,
                   fmt::format("{} timed out after {} waiting for {} ({})", op, Timeout(),
                               Name(*peer), msg));
    }
    std::string checked_in = config().check_consistency
                                 ? fmt::format("all {} ranks had started it, so one stalled or "
                                               "died mid-transfer",
                                               size())
                                 : "enable check_consistency to learn which rank is missing";
    return Error(ErrorCode::kDeadlineExceeded,
                 fmt::format("{} timed out after {}; {} ({})", op, Timeout(), checked_in, msg));
  }
  if (peer) {
    return Error(ErrorCode::kUnavailable,
                 fmt::format("{} failed: lost connection to {} ({})", op, Name(*peer), msg));
  }
  return Error(ErrorCode::kUnavailable, fmt::format("{} failed: {}", op, msg));
}

GlooCommunicator::FusedMode GlooCommunicator::PickMode(const FusedAllReduce& f) const {
  if (payload_capacity_ == 0 || f.count == 0) return FusedMode::kNone;
  const size_t esz = SizeOf(f.type);
  if (f.count * esz <= inline_limit_) return FusedMode::kInline;
  const size_t n = static_cast<size_t>(size());
  const size_t largest_chunk = (f.count / n + (f.count % n != 0 ? 1 : 0)) * esz;
  return largest_chunk <= payload_capacity_ ? FusedMode::kSplit : FusedMode::kNone;
}

size_t GlooCommunicator::SeparateBytes(const CollectiveDescriptor& d, int to) const {
  if (d.magic != CollectiveDescriptor::kMagic ||
      d.kind != static_cast<uint32_t>(CollectiveKind::kAllReduce) ||
      d.dtype > static_cast<uint32_t>(DataType::kInt64)) {
    return 0;
  }
  const FusedAllReduce f{nullptr, nullptr, d.count, static_cast<DataType>(d.dtype), ReduceOp::kSum};
  const size_t length = Piece(PickMode(f), f.count, f.type, to).second;
  return length > merged_limit_ ? length : 0;
}

std::pair<size_t, size_t> GlooCommunicator::Piece(FusedMode mode, size_t count, DataType type,
                                                  int to) const {
  const size_t esz = SizeOf(type);
  if (mode == FusedMode::kInline) return {0, count * esz};
  if (mode == FusedMode::kSplit) {
    const size_t b = ChunkBegin(count, to);
    return {b * esz, (ChunkBegin(count, to + 1) - b) * esz};
  }
  return {0, 0};
}

size_t GlooCommunicator::ChunkBegin(size_t count, int c) const {
  const size_t n = static_cast<size_t>(size());
  const size_t uc = static_cast<size_t>(c);
  return uc * (count / n) + std::min(uc, count % n);
}

template <typename F>
Result<void> GlooCommunicator::Guarded(const CollectiveDescriptor& d, F&& f) {
  Result<void> result;
  try {
    result = f();
  } catch (const ::gloo::Exception& e) {  // IoException and friends: the transport failed
    result = std::unexpected(TransportError(DescribeOp(d), e.what(), std::nullopt));
  } catch (const std::exception& e) {
    // EnforceNotMet: Gloo's assertions. On a closed pair they fire too ("state_ >=
    // CONNECTED"); anything else is a bug on our side.
    if (LooksLikeConnectionFailure(e.what())) {
      result = std::unexpected(TransportError(DescribeOp(d), e.what(), std::nullopt));
    } else {
      result = Errorf(ErrorCode::kInternal, "{}: gloo failed: {}", DescribeOp(d),
                      CleanGlooMessage(e.what()));
    }
  } catch (...) {
    result = Errorf(ErrorCode::kInternal, "{}: gloo threw an unknown exception", DescribeOp(d));
  }
  if (!result) MarkBroken(result.error());
  return result;
}

template <typename Body>
Result<void> GlooCommunicator::RunCollective(const CollectiveDescriptor& d, Body&& body,
                                             const FusedAllReduce* fused) {
  if (config().check_consistency && size() > 1) {
    // Every rank decides alike: matching descriptors mean the same mode everywhere (and a
    // mismatched peer's payload still fits the receive, see kFusedBudget).
    const FusedMode mode = fused != nullptr ? PickMode(*fused) : FusedMode::kNone;
    COHORT_TRY_VOID(ExchangeDescriptors(d, fused, mode));
    // Every rank has heard from every other rank: that is a barrier already.
    if (d.kind == static_cast<uint32_t>(CollectiveKind::kBarrier)) return {};
    if (mode == FusedMode::kInline) {
      FoldInRankOrder(fused->recv, fused->send, fused->count, fused->type, fused->op);
      if (fused->op == ReduceOp::kAvg) {
        DivideInPlace(fused->recv, fused->count, fused->type, size());
      }
      return {};
    }
    if (mode == FusedMode::kSplit) {
      return Guarded(d, [&] { return SplitAllGather(d, *fused); });
    }
  }
  return Guarded(d, [&] { return body(static_cast<uint32_t>(d.seq)); });
}

void GlooCommunicator::FoldInRankOrder(void* out, const void* mine, size_t n, DataType type,
                                       ReduceOp op) {
  if (n == 0) return;
  auto contribution = [&](int r) -> const void* {
    return r == rank() ? mine : static_cast<const void*>(payload_in_[r]);
  };
  const auto reduce = ReduceFunction(type, op);
  // Rank 0 may accumulate in `out` (its own contribution is read first); any other rank
  // accumulates in rank 0's scratch until the last step, so `mine` is intact when read.
  void* acc = rank() == 0 ? out : static_cast<void*>(scratch_[0].get());
  for (int r = 1; r < size(); ++r) {
    reduce(r == size() - 1 ? out : acc, r == 1 ? contribution(0) : acc, contribution(r), n);
  }
}

Result<void> GlooCommunicator::SplitAllGather(const CollectiveDescriptor& d,
                                              const FusedAllReduce& f) {
  const size_t esz = SizeOf(f.type);
  const size_t begin = ChunkBegin(f.count, rank());
  const size_t mine = ChunkBegin(f.count, rank() + 1) - begin;
  auto* recv = static_cast<std::byte*>(f.recv);
  FoldInRankOrder(recv + begin * esz, static_cast<const std::byte*>(f.send) + begin * esz, mine,
                  f.type, f.op);
  if (f.op == ReduceOp::kAvg) DivideInPlace(recv + begin * esz, mine, f.type, size());
  const uint64_t slot = ::gloo::Slot::build(kSplitAllGatherSlotPrefix, static_cast<uint32_t>(d.seq));
  const std::string op_name = DescribeOp(d);
  // One buffer per peer, so that a wait that fails names the peer it waited on.
  std::vector<std::unique_ptr<UnboundBuffer>> in(static_cast<size_t>(size()));
  for (int i = 1; i < size(); ++i) {
    const int p = (rank() + i) % size();
    const size_t b = ChunkBegin(f.count, p);
    const size_t bytes = (ChunkBegin(f.count, p + 1) - b) * esz;
    if (bytes == 0) continue;
    try {
      in[p] = context_->createUnboundBuffer(recv + b * esz, bytes);
      in[p]->recv(p, slot);
    } catch (const std::exception& e) {
      return std::unexpected(TransportError(op_name, e.what(), p));
    }
  }
  std::unique_ptr<UnboundBuffer> out;
  int sends = 0;
  if (mine > 0) {
    out = context_->createUnboundBuffer(recv + begin * esz, mine * esz);
    for (int i = 1; i < size(); ++i) {
      const int p = (rank() + i) % size();
      try {
        out->send(p, slot);
        ++sends;
      } catch (const std::exception& e) {
        return std::unexpected(TransportError(op_name, e.what(), p));
      }
    }
  }
  for (int i = 1; i < size(); ++i) {
    const int p = (rank() + i) % size();
    if (in[p] == nullptr) continue;
    try {
      if (!in[p]->waitRecv(config().timeout)) throw ::gloo::IoException("wait aborted");
    } catch (const std::exception& e) {
      return std::unexpected(TransportError(op_name, e.what(), p));
    }
  }
  for (int i = 0; i < sends; ++i) {
    int to = -1;
    try {
      if (!out->waitSend(&to, config().timeout)) throw ::gloo::IoException("wait aborted");
    } catch (const std::exception& e) {
      return std::unexpected(TransportError(op_name, e.what(), std::nullopt));
    }
  }
  return {};
}

Result<void> GlooCommunicator::ExchangeDescriptors(const CollectiveDescriptor& mine,
                                                   const FusedAllReduce* fused, FusedMode mode) {
  const uint64_t slot = ::gloo::Slot::build(kDescriptorSlotPrefix, 0);
  const SteadyTime deadline = SteadyClock::now() + config().timeout;
  auto time_left = [&] {
    return std::max(Millis(0),
                    std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()));
  };
  std::unique_ptr<UnboundBuffer> payload;  // over the caller's send buffer (only read)
  if (mode != FusedMode::kNone) {
    payload = context_->createUnboundBuffer(const_cast<void*>(fused->send),
                                            fused->count * SizeOf(fused->type));
  }
  // Per peer: why it did not answer (empty: it did).
  std::vector<std::string> failure(static_cast<size_t>(size()));
  auto note = [&](int p, const char* what) {
    failure[p] = CleanGlooMessage(what);
    if (failure[p].empty()) failure[p] = "unknown failure";
  };
  // One Slot for all headers and payloads: Gloo matches sends and receives of a slot in
  // order, and every receive a rank posts for a peer meets exactly one message of it
  // (kFusedBudget's comment), so a rank that is a collective behind is paired with the
  // others' current one. The payload receives this rank's descriptor predicts are posted
  // with the headers'.
  std::vector<bool> payload_posted(static_cast<size_t>(size()), false);
  const bool payloads_come = SeparateBytes(mine, rank()) > 0;
  for (int i = 1; i < size(); ++i) {
    const int p = (rank() + i) % size();
    try {
      first_bufs_[p]->recv(p, slot, 0, first_bytes());
      if (payloads_come) {
        scratch_bufs_[p]->recv(p, slot, 0, payload_capacity_);
        payload_posted[p] = true;
      }
    } catch (const std::exception& e) {
      note(p, e.what());
    }
  }
  int first_sends = 0;
  int payload_sends = 0;
  for (int i = 1; i < size(); ++i) {
    const int p = (rank() + i) % size();
    if (!failure[p].empty()) continue;
    const auto [offset, length] =
        fused != nullptr ? Piece(mode, fused->count, fused->type, p) : std::pair<size_t, size_t>{};
    const size_t separate = SeparateBytes(mine, p);
    std::byte* message = staging_.get() + static_cast<size_t>(p) * first_bytes();
    const ExchangeHeader header{mine, separate, 0};
    std::memcpy(message, &header, sizeof header);
    const size_t merged = separate == 0 ? length : 0;
    if (merged > 0) {
      std::memcpy(message + sizeof header, static_cast<const std::byte*>(fused->send) + offset,
                  merged);
    }
    try {
      staging_buf_->send(p, slot, static_cast<size_t>(p) * first_bytes(), sizeof header + merged);
      ++first_sends;
      if (separate > 0) {
        payload->send(p, slot, offset, length);
        ++payload_sends;
      }
    } catch (const std::exception& e) {
      note(p, e.what());
    }
  }
  // Wait for every peer's header, then for the payloads that come on their own. After a
  // timeout Gloo fails every pending wait at once, and a wait on a message that already
  // arrived still succeeds: so the peers noted below are exactly those that had not
  // checked in by the deadline. A peer whose header came has started the collective; once
  // one has not, the collective fails naming those, and nothing more is posted or waited
  // for (a receive posted after a timeout throws: Gloo closed every pair).
  bool headers_failed = false;
  int filler_sends = 0;
  for (int i = 1; i < size(); ++i) {
    const int p = (rank() + i) % size();
    if (!failure[p].empty()) {
      headers_failed = true;
      continue;
    }
    try {
      if (!first_bufs_[p]->waitRecv(time_left())) {
        note(p, "wait aborted");
        headers_failed = true;
        continue;
      }
      ExchangeHeader header;
      std::memcpy(&header, first_[p].get(), sizeof header);
      desc_in_[p] = header.desc;
      payload_in_[p] =
          header.separate_bytes > 0 ? scratch_[p].get() : first_[p].get() + sizeof header;
      if (header.separate_bytes > payload_capacity_) {
        // Not a Cohort peer of this version: its payload would overrun the receive.
        note(p, "announced a payload longer than the exchange takes");
        headers_failed = true;
        continue;
      }
      if (headers_failed) continue;
      // A mismatch: the peer sends a payload this rank did not expect (receive it), or
      // expects one this rank did not send (send it an empty one).
      if (header.separate_bytes > 0 && !payload_posted[p]) {
        scratch_bufs_[p]->recv(p, slot, 0, payload_capacity_);
        payload_posted[p] = true;
      }
      if (SeparateBytes(header.desc, p) > 0 && SeparateBytes(mine, p) == 0) {
        staging_buf_->send(p, slot, 0, 0);
        ++filler_sends;
      }
    } catch (const std::exception& e) {
      note(p, e.what());
      headers_failed = true;
    }
  }
  for (int i = 1; i < size() && !headers_failed; ++i) {
    const int p = (rank() + i) % size();
    if (!payload_posted[p]) continue;
    try {
      if (!scratch_bufs_[p]->waitRecv(time_left())) note(p, "wait aborted");
    } catch (const std::exception& e) {
      note(p, e.what());
    }
  }
  bool any_failed = std::any_of(failure.begin(), failure.end(),
                                [](const std::string& f) { return !f.empty(); });
  if (!any_failed) {
    try {
      for (int i = 0; i < first_sends + filler_sends; ++i) {
        if (!staging_buf_->waitSend(time_left())) throw ::gloo::IoException("wait aborted");
      }
      for (int i = 0; i < payload_sends; ++i) {
        if (!payload->waitSend(time_left())) throw ::gloo::IoException("wait aborted");
      }
    } catch (const std::exception& e) {
      Error err = TransportError(DescribeOp(mine), e.what(), std::nullopt);
      MarkBroken(err);
      return std::unexpected(err);
    }
  }
  if (any_failed) {
    std::vector<std::string> silent;  // timed out: never checked in
    std::vector<std::string> lost;    // connection broke
    std::string first_lost_reason;
    for (int p = 0; p < size(); ++p) {
      if (failure[p].empty()) continue;
      if (IsGlooTimeout(failure[p])) {
        silent.push_back(Name(p));
      } else {
        lost.push_back(Name(p));
        if (first_lost_reason.empty()) first_lost_reason = failure[p];
      }
    }
    Error err;
    if (lost.empty()) {
      err = NeverStarted(DescribeOp(mine), silent);
    } else {
      std::string also = silent.empty() ? ""
                                        : fmt::format("; no answer from {} within {}",
                                                      JoinRankNames(silent), Timeout());
      err = Error(ErrorCode::kUnavailable,
                  fmt::format("{} failed: lost connection to {} ({}){}", DescribeOp(mine),
                              JoinRankNames(lost), first_lost_reason, also));
    }
    MarkBroken(err);
    return std::unexpected(err);
  }
  std::vector<CollectiveDescriptor> all(static_cast<size_t>(size()));
  for (int p = 0; p < size(); ++p) {
    if (p != rank()) all[p] = desc_in_[p];
  }
  all[static_cast<size_t>(rank())] = mine;
  return CheckDescriptors(all, rank_names());
}

Result<void> GlooCommunicator::RunAllReduce(const CollectiveDescriptor& d, const void* send,
                                            void* recv, size_t count, DataType type,
                                            ReduceOp op) {
  const FusedAllReduce fused{send, recv, count, type, op};
  return RunCollective(d, [&](uint32_t tag) -> Result<void> {
    if (count == 0) return {};
    ::gloo::AllreduceOptions opts(context_);
    WithElementType(type, [&]<typename T>() {
      if (send != recv) opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count);
    });
    opts.setReduceFunction(ReduceFunction(type, op));
    opts.setTag(tag);
    opts.setTimeout(config().timeout);
    ::gloo::allreduce(opts);
    if (op == ReduceOp::kAvg) DivideInPlace(recv, count, type, size());
    return {};
  }, &fused);
}

Result<void> GlooCommunicator::RunReduceScatter(const CollectiveDescriptor& d, const void* send,
                                                void* recv, std::span<const size_t> recv_counts,
                                                DataType type, ReduceOp op) {
  return RunCollective(d, [&](uint32_t tag) {
    return RingReduceScatter(d, send, recv, recv_counts, type, op, tag);
  });
}

// Ring reduce-scatter: in step s rank r sends its partial sum of chunk r-s-1 to r+1 and
// adds the partial sum of chunk r-s-2 from r-1 into its own; after size-1 steps chunk r
// holds every rank's contribution. Each wait names the neighbour it waits on.
Result<void> GlooCommunicator::RingReduceScatter(const CollectiveDescriptor& d, const void* send,
                                                 void* recv, std::span<const size_t> counts,
                                                 DataType type, ReduceOp op, uint32_t tag) {
  const size_t esz = SizeOf(type);
  std::vector<size_t> offset(counts.size() + 1, 0);  // in elements
  for (size_t i = 0; i < counts.size(); ++i) offset[i + 1] = offset[i] + counts[i];
  const size_t mine = counts[rank()];
  if (size() == 1) {
    if (mine > 0 && send != recv) std::memmove(recv, send, mine * esz);
    if (op == ReduceOp::kAvg) DivideInPlace(recv, mine, type, size());
    return {};
  }
  std::vector<std::byte> work(offset.back() * esz);
  if (!work.empty()) std::memcpy(work.data(), send, work.size());
  const size_t max_count = *std::max_element(counts.begin(), counts.end());
  std::vector<std::byte> tmp(max_count * esz);
  auto work_buf = context_->createUnboundBuffer(work.data(), work.size());
  auto tmp_buf = context_->createUnboundBuffer(tmp.data(), tmp.size());
  const uint64_t slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const int left = (rank() + size() - 1) % size();
  const int right = (rank() + 1) % size();
  const auto reduce = ReduceFunction(type, op);
  const std::string op_name = DescribeOp(d);
  auto chunk = [&](int i) { return static_cast<size_t>(((i % size()) + size()) % size()); };
  for (int s = 0; s < size() - 1; ++s) {
    const size_t cs = chunk(rank() - s - 1);  // the chunk we pass on
    const size_t cr = chunk(rank() - s - 2);  // the chunk we add to
    try {
      if (counts[cr] > 0) tmp_buf->recv(left, slot, 0, counts[cr] * esz);
    } catch (const std::exception& e) {
      return std::unexpected(TransportError(op_name, e.what(), left));
    }
    try {
      if (counts[cs] > 0) work_buf->send(right, slot, offset[cs] * esz, counts[cs] * esz);
    } catch (const std::exception& e) {
      return std::unexpected(TransportError(op_name, e.what(), right));
    }
    if (counts[cr] > 0) {
      try {
        if (!tmp_buf->waitRecv(config().timeout)) throw ::gloo::IoException("wait aborted");
      } catch (const std::exception& e) {
        return std::unexpected(TransportError(op_name, e.what(), left));
      }
      std::byte* dst = work.data() + offset[cr] * esz;
      reduce(dst, dst, tmp.data(), counts[cr]);
    }
    if (counts[cs] > 0) {
      try {
        if (!work_buf->waitSend(config().timeout)) throw ::gloo::IoException("wait aborted");
      } catch (const std::exception& e) {
        return std::unexpected(TransportError(op_name, e.what(), right));
      }
    }
  }
  if (mine > 0) std::memcpy(recv, work.data() + offset[rank()] * esz, mine * esz);
  if (op == ReduceOp::kAvg) DivideInPlace(recv, mine, type, size());
  return {};
}

Result<void> GlooCommunicator::RunAllGather(const CollectiveDescriptor& d, const void* send,
                                            void* recv, std::span<const size_t> counts,
                                            DataType type) {
  return RunCollective(d, [&](uint32_t tag) -> Result<void> {
    if (d.count == 0) return {};  // sum(counts)
    const size_t esz = SizeOf(type);
    const size_t my_offset =
        std::accumulate(counts.begin(), counts.begin() + rank(), size_t{0}) * esz;
    const bool in_place = static_cast<const std::byte*>(send) ==
                          static_cast<const std::byte*>(recv) + my_offset;
    ::gloo::AllgathervOptions opts(context_);
    WithElementType(type, [&]<typename T>() {
      if (!in_place) opts.setInput(static_cast<T*>(const_cast<void*>(send)), counts[rank()]);
      opts.setOutput(static_cast<T*>(recv), std::vector<size_t>(counts.begin(), counts.end()));
    });
    opts.setTag(tag);
    opts.setTimeout(config().timeout);
    ::gloo::allgatherv(opts);
    return {};
  });
}

Result<void> GlooCommunicator::RunBroadcast(const CollectiveDescriptor& d, void* buf,
                                            size_t count, DataType type, int root) {
  return RunCollective(d, [&](uint32_t tag) -> Result<void> {
    if (count == 0) return {};
    ::gloo::BroadcastOptions opts(context_);
    WithElementType(type, [&]<typename T>() { opts.setOutput(static_cast<T*>(buf), count); });
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(config().timeout);
    ::gloo::broadcast(opts);
    return {};
  });
}

Result<void> GlooCommunicator::RunBarrier(const CollectiveDescriptor& d) {
  return RunCollective(d, [&](uint32_t tag) -> Result<void> {
    if (size() == 1) return {};
    ::gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(config().timeout);
    ::gloo::barrier(opts);
    return {};
  });
}

Result<void> GlooCommunicator::RunPointToPoint(const PointToPointCall& call) {
  try {
    auto ub = context_->createUnboundBuffer(call.buf, call.count * SizeOf(call.type));
    const uint64_t slot =
        ::gloo::Slot::build(kPointToPointSlotPrefix, static_cast<uint32_t>(call.tag));
    bool done;
    if (call.is_send) {
      ub->send(call.peer, slot);
      done = ub->waitSend(config().timeout);
    } else {
      ub->recv(call.peer, slot);
      done = ub->waitRecv(config().timeout);
    }
    if (!done) throw ::gloo::IoException("wait aborted");
  } catch (const std::exception& e) {
    Error err = TransportError(call.op, e.what(), call.peer);
    MarkBroken(err);
    return std::unexpected(err);
  }
  return {};
}

Result<std::unique_ptr<Communicator>> GlooCommunicator::ConnectGroup(
    std::string group_id, std::vector<int> world_ranks, int rank) {
  const std::vector<std::string>& keys = shared_->group.host_keys;
  if (!keys.empty()) {
    const std::string& first = keys[static_cast<size_t>(world_ranks.front())];
    const bool one_host =
        !first.empty() && std::all_of(world_ranks.begin(), world_ranks.end(), [&](int w) {
          return keys[static_cast<size_t>(w)] == first;
        });
    if (one_host) return ConnectShmGroup(shared_->group, std::move(group_id), std::move(world_ranks), rank);
  }
  auto child = Connect(shared_, std::move(group_id), std::move(world_ranks), rank);
  if (!child) return std::unexpected(child.error());
  return std::unique_ptr<Communicator>(std::move(*child));
}

}  // namespace

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommOptions& options,
                                                             std::vector<std::string> host_keys) {
  // Gloo writes with writev: without this, a peer killed mid-collective raises SIGPIPE here
  // and kills this rank instead of failing the collective (seen in CI).
  IgnoreSigpipeIfDefault();
  auto device = COHORT_TRY(OpenDevice(options.iface_host));
  GroupConfig group = GroupConfig::From(options);
  group.host_keys = std::move(host_keys);
  auto shared = std::make_shared<GlooShared>(GlooShared{std::move(group), std::move(device)});
  auto comm = GlooCommunicator::Connect(std::move(shared), "world",
                                        WorldRanks(options.world_size), options.rank);
  if (!comm) return std::unexpected(comm.error());
  return std::unique_ptr<Communicator>(std::move(*comm));
}

}  // namespace cohort::comm
