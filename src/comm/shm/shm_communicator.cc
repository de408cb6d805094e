#include "comm/shm/shm_communicator.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator_base.h"
#include "comm/communicator_descriptor.h"
#include "comm/gloo/gloo_reduce.h"

namespace cohort::comm {

namespace {

using gloo_backend::DivideInPlace;
using gloo_backend::ReduceFn;
using gloo_backend::ReduceFunction;

constexpr uint64_t kSegmentMagic = 0x636f686f'72747368;  // "cohortsh"
constexpr uint32_t kLayoutVersion = 1;
// Data area per rank (both halves together): 4 MiB shared among the ranks, each half at
// least 64 KiB and at most 1 MiB.
constexpr size_t kAreaBudget = size_t{4} << 20;
constexpr size_t kMinHalf = size_t{64} << 10;
constexpr size_t kMaxHalf = size_t{1} << 20;
// Send/Recv channels, all n(n-1) together: about 4 MiB, each between 4 KiB and 512 KiB.
constexpr size_t kChannelBudget = size_t{4} << 20;
constexpr size_t kMinChannel = size_t{4} << 10;
constexpr size_t kMaxChannel = size_t{512} << 10;
// A waiter spins this many times before it sleeps, then sleeps in slices of this long
// between its checks of the ranks it waits for.
constexpr int kSpins = 200;
constexpr Millis kSlice{50};
// A segment's name in /dev/shm, followed by "<creator pid>-<random>".
constexpr std::string_view kSegmentPrefix = "cohort-shm-";
// A name older than this whose creator has exited is a leftover (RemoveStaleShmSegments):
// longer than any rendezvous.
constexpr std::chrono::seconds kStaleSegmentAge{3600};

size_t RoundDown(size_t v, size_t to) { return v / to * to; }

// Where each rank's part starts in a buffer of `counts` (prefix sums), and how many rounds
// of up to `piece` elements the largest part takes (at least one: every collective has a
// first phase).
struct PartRounds {
  std::vector<size_t> offset;
  size_t rounds = 1;
};
PartRounds Rounds(std::span<const size_t> counts, size_t piece) {
  PartRounds out;
  out.offset.assign(counts.size(), 0);
  for (size_t j = 1; j < counts.size(); ++j) out.offset[j] = out.offset[j - 1] + counts[j - 1];
  for (size_t c : counts) out.rounds = std::max(out.rounds, (c + piece - 1) / piece);
  return out;
}

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  uint64_t total_bytes;  // Layout(size).total: the halves and channels follow from the size
  // A rank created with another world size: (its rank + 1) << 32 | its world size, set by
  // that rank, which then wakes the others; 0 while none.
  std::atomic<uint64_t> disagreement;
};
static_assert(sizeof(SegmentHeader) == 64);

// "rank r was created with world_size a and this rank with b: ...", the error of a
// group whose ranks disagree on its size (the text Gloo's rendezvous gives too).
std::unexpected<Error> SizeDisagreement(int other_rank, uint64_t other_size, int own_size) {
  return Errorf(ErrorCode::kInvalidArgument,
                "rank {} was created with world_size {} and this rank with {}: every rank must "
                "pass the same world_size",
                other_rank, other_size, own_size);
}

// One rank's control block: what its peers poll (first line) and what they write to wake
// it (second line).
struct RankBlock {
  alignas(64) std::atomic<uint64_t> phase;  // phases published so far
  std::atomic<uint32_t> closed;             // 1: failed or destroyed; peers stop waiting
  int32_t pid;                              // set at attach
  uint64_t reserved;
  CollectiveDescriptor desc[2];  // of the collective whose first phase has this parity
  alignas(64) std::atomic<uint32_t> bell;   // futex word the rank sleeps on
  std::atomic<uint32_t> sleeping;           // 1 while it may be asleep on `bell`
};
static_assert(sizeof(RankBlock) == 192);

// The sender -> receiver channel of one ordered pair.
struct alignas(64) ChannelHeader {
  std::atomic<uint64_t> posted;  // chunks the sender has put in
  std::atomic<uint64_t> taken;   // chunks the receiver has taken out
  int32_t tag;
  uint32_t dtype;
  uint64_t count;        // elements of the whole message
  uint64_t chunk_bytes;  // bytes of this chunk
};
static_assert(sizeof(ChannelHeader) == 64);

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string ErrnoText(int err) { return std::strerror(err); }

// The segment's layout for a group of `n` ranks.
struct Layout {
  size_t half = 0;
  size_t channel = 0;
  size_t blocks_at = 0;
  size_t areas_at = 0;
  size_t channels_at = 0;
  size_t total = 0;

  explicit Layout(int n) {
    const size_t un = static_cast<size_t>(n);
    half = RoundDown(std::clamp(kAreaBudget / 2 / un, kMinHalf, kMaxHalf), 64);
    const size_t pairs = un > 1 ? un * (un - 1) : 1;
    channel = RoundDown(std::clamp(kChannelBudget / pairs, kMinChannel, kMaxChannel), 64);
    blocks_at = sizeof(SegmentHeader);
    areas_at = blocks_at + un * sizeof(RankBlock);
    channels_at = areas_at + un * 2 * half;
    total = channels_at + (un > 1 ? pairs : 0) * (sizeof(ChannelHeader) + channel);
  }
};

class ShmCommunicator final : public CommunicatorBase {
 public:
  static Result<std::unique_ptr<ShmCommunicator>> Connect(GroupConfig group, std::string group_id,
                                                          std::vector<int> world_ranks, int rank);
  ~ShmCommunicator() override;

  std::string_view backend() const override { return "shm"; }

 private:
  ShmCommunicator(GroupConfig group, std::string group_id, std::vector<int> world_ranks, int rank,
                  std::byte* base, size_t bytes);

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
  void OnBroken() override;

  RankBlock& Block(int r) const {
    return reinterpret_cast<RankBlock*>(base_ + layout_.blocks_at)[r];
  }
  // Rank r's half of the current round (uses_ % 2).
  std::byte* Area(int r) const {
    return base_ + layout_.areas_at + (static_cast<size_t>(r) * 2 + uses_ % 2) * layout_.half;
  }
  ChannelHeader& Channel(int from, int to) const;
  std::byte* ChannelData(int from, int to) const {
    return reinterpret_cast<std::byte*>(&Channel(from, to)) + sizeof(ChannelHeader);
  }

  // Wakes rank r if it may be asleep (after something it waits for was published).
  void Wake(int r) const;
  // Waits until `ready()`; `behind()` lists the ranks it still waits for. `op()` names the
  // operation in errors (made only for one); `never_started` makes a timeout say those
  // ranks never started it.
  template <typename Ready, typename Behind, typename Op>
  Result<void> WaitUntil(Ready&& ready, Behind&& behind, Op&& op, bool never_started);
  // Whether rank r has closed its communicator or its process has exited.
  std::optional<std::string> Gone(int r) const;

  // Publishes the next phase and waits for every rank to publish it. With `first`, the
  // phase opens collective `d`: the descriptor goes out with it, and with
  // check_consistency the ranks' descriptors are compared once all arrived. `what` (not
  // null) names a phase that is no collective's (the rendezvous).
  Result<void> Phase(const CollectiveDescriptor& d, bool first, const std::string* what = nullptr);
  // Phase() opening collective d, then the broken-state rule: any failure but a mismatch
  // breaks the communicator.
  Result<void> Step(const CollectiveDescriptor& d, bool first);

  // Rendezvous: attach to the segment, then the first phase.
  Result<void> Attach(const std::string& what);

  // Folds `len` elements at byte `at` of every rank's current half, in rank order, into
  // `dst` (a caller's buffer, or this rank's own half, which is an input too: then through
  // scratch_, so that it is read before it is written); kAvg divides by the group size.
  // Every rank folding the same inputs computes the same bits.
  void FoldAreas(std::byte* dst, size_t at, size_t len, DataType type, ReduceOp op);

  std::byte* base_;
  size_t bytes_;
  Layout layout_;
  uint64_t phase_ = 0;  // phases this rank published
  uint64_t uses_ = 0;   // rounds of data so far (the half in use is uses_ % 2)
  std::vector<int> pidfds_;              // per rank: a pidfd of its process, or -1
  std::unique_ptr<std::byte[]> scratch_;  // FoldAreas' accumulator (one half)
};

ShmCommunicator::ShmCommunicator(GroupConfig group, std::string group_id,
                                 std::vector<int> world_ranks, int rank, std::byte* base,
                                 size_t bytes)
    : CommunicatorBase(std::move(group), std::move(group_id), std::move(world_ranks), rank),
      base_(base),
      bytes_(bytes),
      layout_(size()),
      pidfds_(static_cast<size_t>(size()), -1),
      scratch_(new std::byte[layout_.half]) {}

ShmCommunicator::~ShmCommunicator() {
  OnBroken();  // peers still waiting on this rank fail now
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
  munmap(base_, bytes_);
}

void ShmCommunicator::OnBroken() {
  Block(rank()).closed.store(1, std::memory_order_seq_cst);
  for (int r = 0; r < size(); ++r) {
    if (r != rank()) Wake(r);
  }
}

ChannelHeader& ShmCommunicator::Channel(int from, int to) const {
  // Channels of sender `from` in receiver order, skipping itself.
  const size_t index = static_cast<size_t>(from) * static_cast<size_t>(size() - 1) +
                       static_cast<size_t>(to < from ? to : to - 1);
  return *reinterpret_cast<ChannelHeader*>(base_ + layout_.channels_at +
                                           index * (sizeof(ChannelHeader) + layout_.channel));
}

void ShmCommunicator::Wake(int r) const {
  RankBlock& b = Block(r);
  if (b.sleeping.load(std::memory_order_seq_cst) != 0) {
    b.bell.fetch_add(1, std::memory_order_seq_cst);
    Futex(&b.bell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

std::optional<std::string> ShmCommunicator::Gone(int r) const {
  if (Block(r).closed.load(std::memory_order_acquire) != 0) {
    return "it closed its communicator";
  }
  const int fd = pidfds_[static_cast<size_t>(r)];
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) return fmt::format("its process {} exited", Block(r).pid);
  }
  return std::nullopt;
}

template <typename Ready, typename Behind, typename Op>
Result<void> ShmCommunicator::WaitUntil(Ready&& ready, Behind&& behind, Op&& op,
                                        bool never_started) {
  for (int i = 0; i < kSpins; ++i) {
    if (ready()) return {};
    CpuRelax();
  }
  RankBlock& me = Block(rank());
  const auto& header = *reinterpret_cast<const SegmentHeader*>(base_);
  const auto deadline = SteadyClock::now() + config().timeout;
  while (true) {
    me.sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t bell = me.bell.load(std::memory_order_seq_cst);
    if (ready()) break;
    if (const uint64_t other = header.disagreement.load(std::memory_order_acquire); other != 0) {
      me.sleeping.store(0, std::memory_order_relaxed);
      return SizeDisagreement(static_cast<int>(other >> 32) - 1, other & 0xffffffffu, size());
    }
    const std::vector<int> late = behind();
    for (int r : late) {
      if (auto why = Gone(r)) {
        // A rank publishes before it closes or exits, so once its end is seen, what it
        // published is too: it may have caught up since `late` was read (its last phase,
        // then its communicator destroyed).
        if (ready()) break;
        const std::vector<int> still = behind();
        if (std::find(still.begin(), still.end(), r) == still.end()) continue;
        me.sleeping.store(0, std::memory_order_relaxed);
        return Errorf(ErrorCode::kUnavailable, "{} lost connection to {}: {}", op(), Name(r),
                      *why);
      }
    }
    if (ready()) break;
    const auto now = SteadyClock::now();
    if (now >= deadline) {
      me.sleeping.store(0, std::memory_order_relaxed);
      std::vector<std::string> names;
      for (int r : late) names.push_back(Name(r));
      if (never_started && !names.empty()) return std::unexpected(NeverStarted(op(), names));
      return Errorf(ErrorCode::kDeadlineExceeded, "{} timed out after {}{}", op(), Timeout(),
                    names.empty() ? "" : " waiting for " + JoinRankNames(names));
    }
    const auto left = std::min<SteadyClock::duration>(deadline - now, kSlice);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    Futex(&me.bell, FUTEX_WAIT, bell, &ts);
  }
  me.sleeping.store(0, std::memory_order_relaxed);
  return {};
}

Result<void> ShmCommunicator::Phase(const CollectiveDescriptor& d, bool first,
                                    const std::string* what) {
  const uint64_t phase = phase_ + 1;
  RankBlock& me = Block(rank());
  if (first) me.desc[phase % 2] = d;
  me.phase.store(phase, std::memory_order_seq_cst);
  phase_ = phase;
  for (int r = 0; r < size(); ++r) {
    if (r != rank()) Wake(r);
  }
  auto ready = [&] {
    for (int r = 0; r < size(); ++r) {
      if (Block(r).phase.load(std::memory_order_acquire) < phase) return false;
    }
    return true;
  };
  auto behind = [&] {
    std::vector<int> late;
    for (int r = 0; r < size(); ++r) {
      if (Block(r).phase.load(std::memory_order_acquire) < phase) late.push_back(r);
    }
    return late;
  };
  auto op = [&] { return what != nullptr ? *what : DescribeOp(d); };
  COHORT_TRY_VOID(WaitUntil(ready, behind, op, first && config().check_consistency));
  if (first && config().check_consistency) {
    std::vector<CollectiveDescriptor> all(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) all[static_cast<size_t>(r)] = Block(r).desc[phase % 2];
    return CheckDescriptors(all, rank_names());
  }
  return {};
}

Result<void> ShmCommunicator::Step(const CollectiveDescriptor& d, bool first) {
  auto done = Phase(d, first);
  if (!done && !(first && done.error().code == ErrorCode::kInvalidArgument)) MarkBroken(done.error());
  return done;
}

void ShmCommunicator::FoldAreas(std::byte* dst, size_t at, size_t len, DataType type,
                                ReduceOp op) {
  const int n = size();
  const size_t bytes = len * SizeOf(type);
  if (n == 1) {
    if (dst != Area(0) + at) std::memcpy(dst, Area(0) + at, bytes);
  } else {
    const ReduceFn fn = ReduceFunction(type, op);
    // Through scratch_ when dst is this rank's own half, an input read after the first
    // step; with two ranks both inputs are read before dst is written (fn allows aliasing).
    const bool alias = n > 2 && dst == Area(rank()) + at;
    std::byte* acc = alias ? scratch_.get() : dst;
    fn(acc, Area(0) + at, Area(1) + at, len);
    for (int r = 2; r < n; ++r) fn(r == n - 1 ? dst : acc, acc, Area(r) + at, len);
  }
  if (op == ReduceOp::kAvg) DivideInPlace(dst, len, type, n);
}

Result<void> ShmCommunicator::RunAllReduce(const CollectiveDescriptor& d, const void* send,
                                           void* recv, size_t count, DataType type, ReduceOp op) {
  const size_t es = SizeOf(type);
  const size_t per_round = layout_.half / es;
  const int n = size();
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  size_t done = 0;
  bool first = true;
  do {
    const size_t m = std::min(per_round, count - done);
    ++uses_;
    if (m > 0) std::memcpy(Area(rank()), in + done * es, m * es);
    COHORT_TRY_VOID(Step(d, first));
    first = false;
    // Fold slice `rank()` of this chunk over all ranks, in rank order, into this rank's half.
    const size_t begin = m * static_cast<size_t>(rank()) / static_cast<size_t>(n);
    const size_t end = m * static_cast<size_t>(rank() + 1) / static_cast<size_t>(n);
    if (end > begin && n > 1) FoldAreas(Area(rank()) + begin * es, begin * es, end - begin, type, op);
    if (n > 1) COHORT_TRY_VOID(Step(d, false));
    for (int r = 0; r < n; ++r) {
      const size_t b = m * static_cast<size_t>(r) / static_cast<size_t>(n);
      const size_t e = m * static_cast<size_t>(r + 1) / static_cast<size_t>(n);
      if (e > b) std::memcpy(out + (done + b) * es, Area(r) + b * es, (e - b) * es);
    }
    done += m;
  } while (done < count);
  return {};
}

Result<void> ShmCommunicator::RunReduceScatter(const CollectiveDescriptor& d, const void* send,
                                               void* recv, std::span<const size_t> recv_counts,
                                               DataType type, ReduceOp op) {
  const size_t es = SizeOf(type);
  const int n = size();
  // Per round, `piece` elements of every destination's segment, in slot j of the half.
  const size_t piece = layout_.half / static_cast<size_t>(n) / es;
  const auto [offset, rounds] = Rounds(recv_counts, piece);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const size_t mine = recv_counts[static_cast<size_t>(rank())];
  for (size_t k = 0; k < rounds; ++k) {
    ++uses_;
    const size_t from = k * piece;
    for (int j = 0; j < n; ++j) {
      const size_t c = recv_counts[static_cast<size_t>(j)];
      if (c > from) {
        std::memcpy(Area(rank()) + static_cast<size_t>(j) * piece * es,
                    in + (offset[j] + from) * es, std::min(piece, c - from) * es);
      }
    }
    COHORT_TRY_VOID(Step(d, k == 0));
    if (mine <= from) continue;
    FoldAreas(out + from * es, static_cast<size_t>(rank()) * piece * es,
              std::min(piece, mine - from), type, op);
  }
  return {};
}

Result<void> ShmCommunicator::RunAllGather(const CollectiveDescriptor& d, const void* send,
                                           void* recv, std::span<const size_t> counts,
                                           DataType type) {
  const size_t es = SizeOf(type);
  const int n = size();
  const size_t piece = layout_.half / es;
  const auto [offset, rounds] = Rounds(counts, piece);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const size_t mine = counts[static_cast<size_t>(rank())];
  // This rank's own part, unless it is already in place (send aliases it).
  std::byte* own = out + offset[static_cast<size_t>(rank())] * es;
  if (mine > 0 && own != in) std::memmove(own, in, mine * es);
  for (size_t k = 0; k < rounds; ++k) {
    ++uses_;
    const size_t from = k * piece;
    if (mine > from) std::memcpy(Area(rank()), in + from * es, std::min(piece, mine - from) * es);
    COHORT_TRY_VOID(Step(d, k == 0));
    for (int r = 0; r < n; ++r) {
      const size_t c = counts[static_cast<size_t>(r)];
      if (r == rank() || c <= from) continue;
      std::memcpy(out + (offset[r] + from) * es, Area(r), std::min(piece, c - from) * es);
    }
  }
  return {};
}

Result<void> ShmCommunicator::RunBroadcast(const CollectiveDescriptor& d, void* buf, size_t count,
                                           DataType type, int root) {
  const size_t es = SizeOf(type);
  const size_t piece = layout_.half / es;
  auto* data = static_cast<std::byte*>(buf);
  size_t done = 0;
  bool first = true;
  do {
    const size_t m = std::min(piece, count - done);
    ++uses_;
    if (rank() == root && m > 0) std::memcpy(Area(root), data + done * es, m * es);
    COHORT_TRY_VOID(Step(d, first));
    first = false;
    if (rank() != root && m > 0) std::memcpy(data + done * es, Area(root), m * es);
    done += m;
  } while (done < count);
  return {};
}

Result<void> ShmCommunicator::RunBarrier(const CollectiveDescriptor& d) {
  ++uses_;
  return Step(d, true);
}

Result<void> ShmCommunicator::RunPointToPoint(const PointToPointCall& call) {
  const size_t es = SizeOf(call.type);
  const size_t total = call.count * es;
  const int peer = call.peer;
  auto* data = static_cast<std::byte*>(call.buf);
  const bool check = config().check_consistency;
  auto op = [&] { return call.op; };
  auto fail = [&](Error e) -> Result<void> {
    MarkBroken(e);
    return std::unexpected(std::move(e));
  };
  if (call.is_send) {
    ChannelHeader& ch = Channel(rank(), peer);
    size_t sent = 0;
    do {
      // The channel is free once the receiver took every chunk posted so far.
      auto free = [&] {
        return ch.taken.load(std::memory_order_acquire) == ch.posted.load(std::memory_order_relaxed);
      };
      auto behind = [&] { return std::vector<int>{peer}; };
      if (auto ok = WaitUntil(free, behind, op, false); !ok) return fail(ok.error());
      const size_t m = std::min(layout_.channel, total - sent);
      if (m > 0) std::memcpy(ChannelData(rank(), peer), data + sent, m);
      ch.tag = call.tag;
      ch.dtype = static_cast<uint32_t>(call.type);
      ch.count = call.count;
      ch.chunk_bytes = m;
      ch.posted.fetch_add(1, std::memory_order_seq_cst);
      Wake(peer);
      sent += m;
    } while (sent < total);
    return {};
  }
  ChannelHeader& ch = Channel(peer, rank());
  size_t got = 0;
  std::optional<Error> mismatch;
  bool first = true;
  do {
    auto posted = [&] {
      return ch.posted.load(std::memory_order_acquire) > ch.taken.load(std::memory_order_relaxed);
    };
    auto behind = [&] { return std::vector<int>{peer}; };
    if (auto ok = WaitUntil(posted, behind, op, false); !ok) return fail(ok.error());
    const size_t bytes = static_cast<size_t>(ch.count) * SizeOf(static_cast<DataType>(ch.dtype));
    if (first) {
      const bool differs = ch.count != call.count ||
                           (check && (ch.tag != call.tag || ch.dtype != static_cast<uint32_t>(call.type)));
      if (differs) {
        mismatch = Errorf(ErrorCode::kInvalidArgument,
                          "{}: the message from {} has tag {}, {}, {} elements", call.op,
                          Name(peer), ch.tag, DataTypeName(static_cast<DataType>(ch.dtype)),
                          ch.count)
                       .error();
      }
    }
    first = false;
    const size_t m = static_cast<size_t>(ch.chunk_bytes);
    if (!mismatch && m > 0) std::memcpy(data + got, ChannelData(peer, rank()), m);
    got += m;
    ch.taken.fetch_add(1, std::memory_order_seq_cst);
    Wake(peer);
    if (got >= bytes) break;
  } while (true);
  if (mismatch) return std::unexpected(*mismatch);  // the message is consumed; the channel stays in step
  return {};
}

Result<std::unique_ptr<Communicator>> ShmCommunicator::ConnectGroup(std::string group_id,
                                                                    std::vector<int> world_ranks,
                                                                    int rank) {
  auto child = Connect(config(), std::move(group_id), std::move(world_ranks), rank);
  if (!child) return std::unexpected(child.error());
  return std::unique_ptr<Communicator>(std::move(*child));
}

Result<void> ShmCommunicator::Attach(const std::string& what) {
  RankBlock& me = Block(rank());
  me.pid = static_cast<int32_t>(getpid());
  // The rendezvous phase: every rank has attached (and written its pid) once it is done.
  auto attached = Phase(CollectiveDescriptor{}, false, &what);
  if (!attached) return std::unexpected(attached.error());
  const int self = getpid();
  for (int r = 0; r < size(); ++r) {
    const int pid = Block(r).pid;
    if (r == rank() || pid == self || pid <= 0) continue;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      return Errorf(ErrorCode::kUnavailable, "{}: cannot watch {} (pid {}): {}", what, Name(r),
                    pid, ErrnoText(errno));
    }
    pidfds_[static_cast<size_t>(r)] = fd;
  }
  return {};
}

// A group's segment, mapped.
struct Segment {
  std::byte* base = nullptr;
  size_t bytes = 0;
};

}  // namespace

size_t ShmFreeBytes(const std::string& path) {
  struct statvfs fs {};
  if (statvfs(path.c_str(), &fs) != 0) return 0;
  return static_cast<size_t>(fs.f_bavail) * static_cast<size_t>(fs.f_frsize);
}

size_t RemoveStaleShmSegments(const std::string& dir, std::chrono::seconds older_than) {
  size_t removed = 0;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  const auto now = std::chrono::system_clock::now();
  while (dirent* e = readdir(d)) {
    const std::string_view entry = e->d_name;
    if (!entry.starts_with(kSegmentPrefix)) continue;
    // "cohort-shm-<pid>-<random>": the creator's pid.
    const std::string_view rest = entry.substr(kSegmentPrefix.size());
    int pid = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc() || end == rest.data() || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string path = dir + "/" + std::string(entry);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    const auto modified = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
    if (now - modified < older_than) continue;
    if (unlink(path.c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

namespace {

Result<Segment> CreateSegment(const std::string& name, int n) {
  const Layout layout(n);
  // Names whose creator died during a rendezvous (killed before every rank attached and
  // unlinked it): nothing can use them any more. Once per process, not per group (a
  // pipeline makes a group per channel).
  static std::once_flag swept;
  std::call_once(swept, [] { RemoveStaleShmSegments("/dev/shm", kStaleSegmentAge); });
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errorf(ErrorCode::kUnavailable, "shm_open {}: {}", name, ErrnoText(errno));
  auto give_up = [&](std::string why) -> Result<Segment> {
    close(fd);
    shm_unlink(name.c_str());
    return MakeError(ErrorCode::kUnavailable, std::move(why));
  };
  if (ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    return give_up(fmt::format("sizing {} to {} bytes: {}", name, layout.total, ErrnoText(errno)));
  }
  // Reserve every page now: touching a page of a full tmpfs later would be a SIGBUS.
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(layout.total)); rc != 0) {
    return give_up(fmt::format(
        "reserving {:.1f} MiB of shared memory in /dev/shm: {} (give the job a larger /dev/shm, "
        "or set comm.backend: gloo)",
        static_cast<double>(layout.total) / (1 << 20), ErrnoText(rc)));
  }
  void* p = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return give_up(fmt::format("mapping {}: {}", name, ErrnoText(errno)));
  close(fd);
  auto* header = static_cast<SegmentHeader*>(p);  // the file is zeroed: counters start at 0
  header->version = kLayoutVersion;
  header->size = static_cast<uint32_t>(n);
  header->total_bytes = layout.total;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kSegmentMagic;
  return Segment{static_cast<std::byte*>(p), layout.total};
}

// Opens the segment rank 0 created, as `rank` of `n`. A segment made for another group
// size is told so (SegmentHeader::disagreement: the ranks waiting in it fail too).
Result<Segment> OpenSegment(const std::string& name, int rank, int n) {
  const Layout layout(n);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return Errorf(ErrorCode::kUnavailable,
                  "cannot open shared memory segment {}: {} (every rank of an shm group must "
                  "be on one host and see the same /dev/shm; backend auto picks gloo otherwise)",
                  name, ErrnoText(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(SegmentHeader) + sizeof(RankBlock)) {
    close(fd);
    return Errorf(ErrorCode::kUnavailable, "shared memory segment {} is not a cohort group", name);
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    return Errorf(ErrorCode::kUnavailable, "mapping {}: {}", name, ErrnoText(errno));
  }
  auto* header = static_cast<SegmentHeader*>(p);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (header->magic != kSegmentMagic || header->version != kLayoutVersion ||
      header->total_bytes != bytes) {
    munmap(p, bytes);
    return Errorf(ErrorCode::kUnavailable,
                  "shared memory segment {} is not a cohort group of layout {}", name,
                  kLayoutVersion);
  }
  if (header->size != static_cast<uint32_t>(n)) {
    const uint32_t theirs = header->size;
    uint64_t none = 0;
    header->disagreement.compare_exchange_strong(
        none, (static_cast<uint64_t>(rank) + 1) << 32 | static_cast<uint32_t>(n));
    // Wake the ranks already waiting in the segment (their blocks follow the header).
    auto* blocks = reinterpret_cast<RankBlock*>(static_cast<std::byte*>(p) + sizeof(SegmentHeader));
    for (uint32_t r = 0; r < theirs; ++r) {
      blocks[r].bell.fetch_add(1, std::memory_order_seq_cst);
      Futex(&blocks[r].bell, FUTEX_WAKE, INT_MAX, nullptr);
    }
    munmap(p, bytes);
    return SizeDisagreement(0, theirs, n);
  }
  if (bytes != layout.total) {
    munmap(p, bytes);
    return Errorf(ErrorCode::kUnavailable, "shared memory segment {} has {} bytes, expected {}",
                  name, bytes, layout.total);
  }
  return Segment{static_cast<std::byte*>(p), bytes};
}

constexpr std::string_view kFailedPrefix = "failed: ";

Result<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Connect(GroupConfig group,
                                                                  std::string group_id,
                                                                  std::vector<int> world_ranks,
                                                                  int rank) {
  const int size = static_cast<int>(world_ranks.size());
  const std::string what = RendezvousName("shm", group_id, rank, size);
  const std::string key_prefix = GroupKeyPrefix(group, "shm/", group_id);
  COHORT_TRY_VOID(ClaimRank(group.store, key_prefix, rank, what));
  Segment seg;
  std::string name;
  if (rank == 0) {
    std::random_device rd;
    name = fmt::format("/{}{}-{:08x}{:08x}", kSegmentPrefix, getpid(), rd(), rd());
    auto made = CreateSegment(name, size);
    if (!made) {
      if (size > 1) (void)group.store->Set(key_prefix + "segment", std::string(kFailedPrefix) + made.error().message);
      return Errorf(made.error().code, "{}: {}", what, made.error().message);
    }
    seg = *made;
    if (size > 1) {
      if (auto set = group.store->Set(key_prefix + "segment", name); !set) {
        munmap(seg.base, seg.bytes);
        shm_unlink(name.c_str());
        return Errorf(set.error().code, "{}: {}", what, set.error().message);
      }
    }
  } else {
    auto got = group.store->Get(key_prefix + "segment", group.timeout);
    if (!got) return Errorf(got.error().code, "{}: {}", what, got.error().message);
    name = *got;
    if (name.starts_with(kFailedPrefix)) {
      return Errorf(ErrorCode::kUnavailable, "{}: rank 0 could not create the segment: {}", what,
                    name.substr(kFailedPrefix.size()));
    }
    auto opened = OpenSegment(name, rank, size);
    if (!opened) return Errorf(opened.error().code, "{}: {}", what, opened.error().message);
    seg = *opened;
  }
  std::unique_ptr<ShmCommunicator> comm(
      new ShmCommunicator(std::move(group), std::move(group_id), std::move(world_ranks), rank,
                          seg.base, seg.bytes));
  auto attached = comm->Attach(what);
  // Every rank attached (or the group failed): the name is no longer needed.
  shm_unlink(name.c_str());
  if (!attached) return std::unexpected(attached.error());
  return comm;
}

}  // namespace

std::string ShmHostKey() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat shm {};
  if (boot.empty() || stat("/dev/shm", &shm) != 0) return "";
  char pidns[128] = {};
  const ssize_t len = readlink("/proc/self/ns/pid", pidns, sizeof(pidns) - 1);
  if (len <= 0) return "";
  // The user too: a segment is readable by its creator's user only.
  return fmt::format("{}/{}:{}/{}/uid {}", boot, static_cast<uint64_t>(shm.st_dev),
                     static_cast<uint64_t>(shm.st_ino),
                     std::string_view(pidns, static_cast<size_t>(len)), getuid());
}

Result<std::unique_ptr<Communicator>> ConnectShmGroup(const GroupConfig& group,
                                                      std::string group_id,
                                                      std::vector<int> world_ranks, int rank) {
  GroupConfig config = group;
  config.host_keys.clear();  // every split of an shm group is shm
  auto comm = ShmCommunicator::Connect(std::move(config), std::move(group_id),
                                       std::move(world_ranks), rank);
  if (!comm) return std::unexpected(comm.error());
  return std::unique_ptr<Communicator>(std::move(*comm));
}

Result<std::unique_ptr<Communicator>> CreateShmCommunicator(const CommOptions& options) {
  auto comm = ShmCommunicator::Connect(GroupConfig::From(options), "world",
                                       WorldRanks(options.world_size), options.rank);
  if (!comm) return std::unexpected(comm.error());
  return std::unique_ptr<Communicator>(std::move(*comm));
}

}  // namespace cohort::comm
