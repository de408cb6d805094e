// Communicator: collective and point-to-point communication among the ranks of a job.
//
// A Communicator is one rank's handle on a group of `size()` ranks numbered 0..size-1.
// Backends (chosen by name in CommOptions): "gloo" moves host memory over TCP; "shm" moves
// host memory between the ranks of one host through shared memory (shm/shm_communicator.h);
// "auto" picks shm when every rank is on this host and gloo otherwise; "nccl" moves GPU
// memory (nccl/nccl_communicator.h). All derive from CommunicatorBase (communicator_base.h),
// which checks arguments, numbers collectives, keeps the broken state and splits; every
// backend passes the same test suite.
//
// Ordering contract. Collectives (AllReduce .. Barrier) are matched by order: the n-th
// collective a rank calls on a communicator meets the n-th collective of every other
// rank, and all ranks must agree on its kind, dtype, counts, reduce op and root. With
// CommOptions::check_consistency (the default) a disagreement is detected before any
// data reaches the caller's buffers (a backend may ship payload alongside the check, into
// its own scratch) and every rank gets the same kInvalidArgument "collective mismatch at
// #n: ..." error; the buffers are untouched and the communicator stays usable. Without
// it a disagreement is undefined (usually a timeout).
//
// Failure contract. No wait for a peer lasts longer than CommOptions::timeout. A dead,
// hung or absent peer makes the call fail with kDeadlineExceeded (nobody answered) or
// kUnavailable (a connection broke); the message names the operation, its sequence
// number (collectives are counted from #1 per communicator) and the rank(s) that did not
// answer, e.g. "allreduce #17 (float32, 1048576 elements) timed out after 5.0s waiting
// for rank 3". After such a failure the communicator is unusable: every later call fails
// with kFailedPrecondition carrying the original cause; create a new one (NCCL's rule
// too). A failing rank drops its connections, so its peers fail promptly as well.
//
// Memory: `send`/`recv`/`buf` are host memory for gloo and device memory for nccl. They
// must stay valid for the duration of the call; calls are synchronous on return.
//
// Threads: a Communicator is used by one thread at a time (it is not internally locked).
// Different communicators — including those made by Split — may be used concurrently
// from different threads. rank(), size() and backend() may be called from any thread.
// This is the data plane: it never includes control-plane headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

enum class DataType { kFloat32, kBFloat16, kFloat16, kInt32, kInt64 };
enum class ReduceOp { kSum, kAvg, kMax, kMin };

// Bytes per element: 4, 2, 2, 4, 8.
size_t SizeOf(DataType type);
// "float32", "bfloat16", "float16", "int32", "int64".
std::string_view DataTypeName(DataType type);
// "sum", "avg", "max", "min".
std::string_view ReduceOpName(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank (0..size-1) and the number of ranks in the group.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "shm" or "nccl" (never "auto": the backend it picked).
  virtual std::string_view backend() const = 0;

  // Reduces `count` elements of `send` across all ranks into `recv` on every rank. In
  // place when send == recv. kAvg divides the sum by size() (integers: truncating).
  // Half types (bfloat16, float16) are accumulated in float and rounded to nearest even.
  virtual Result<void> AllReduce(const void* send, void* recv, size_t count, DataType type,
                                 ReduceOp op) = 0;

  // Reduces `send` (sum(recv_counts) elements, the same layout on every rank) across all
  // ranks; rank i receives the recv_counts[i] elements starting at offset
  // sum(recv_counts[0..i)) into `recv`. Uneven and zero counts are allowed; every rank
  // passes the same recv_counts (size() entries).
  virtual Result<void> ReduceScatter(const void* send, void* recv,
                                     std::span<const size_t> recv_counts, DataType type,
                                     ReduceOp op) = 0;

  // Each rank contributes counts[rank()] elements from `send`; `recv` receives
  // sum(counts) elements, the contributions in rank order. Uneven and zero counts are
  // allowed; every rank passes the same counts (size() entries).
  virtual Result<void> AllGather(const void* send, void* recv, std::span<const size_t> counts,
                                 DataType type) = 0;

  // Copies `count` elements of `buf` on `root` into `buf` on every rank.
  virtual Result<void> Broadcast(void* buf, size_t count, DataType type, int root) = 0;

  // Returns once every rank has entered Barrier.
  virtual Result<void> Barrier() = 0;

  // Point-to-point. Send and Recv with the same (peer, tag) pair up in call order. Send
  // may block until `peer` posts the matching Recv (gloo does): order the calls so
  // they pair (e.g. in a ring, even ranks send first). Portable code also keeps the
  // messages between two ranks in the same order on both sides, whatever their tags
  // (NCCL matches by order alone). peer != rank(); tag >= 0. Not collectives: no
  // sequence number, no consistency check; a timeout names the peer.
  virtual Result<void> Send(const void* buf, size_t count, DataType type, int peer,
                            int tag) = 0;
  virtual Result<void> Recv(void* buf, size_t count, DataType type, int peer, int tag) = 0;

  // Returns a communicator over the sub-group `ranks` (ranks of this communicator,
  // sorted, unique, including rank()); the new rank is this rank's index in `ranks`.
  // Every member calls it with the same list; non-members must not (it is not a
  // collective of this communicator and does not advance its sequence number). Several
  // disjoint groups may split at once (data × tensor × pipeline grids). Rendezvous goes
  // through the store under a key derived from this group, the member list and how
  // many times this list was split before. kInvalidArgument for a malformed list.
  virtual Result<std::unique_ptr<Communicator>> Split(std::span<const int> ranks) = 0;
};

struct CommOptions {
  // "gloo", "shm", "nccl", or "auto": shm when every rank is on this host, else gloo,
  // whose sub-groups (Split) are shm where all their members share a host (a tensor group
  // inside a node); gloo throughout when /dev/shm has under 256 MiB free (kShmRoomForAuto).
  std::string backend = "gloo";
  int rank = 0;
  int world_size = 1;
  // Rendezvous store shared by all ranks. Required when world_size > 1.
  std::shared_ptr<Store> store;
  // Store keys are "<prefix>/<group id>/...". Use a prefix unique to this creation
  // (e.g. include COHORT_ATTEMPT): a stale key from an earlier creation is read as live.
  std::string prefix = "cohort";
  // Bound on every wait: rendezvous, each collective, each send/recv.
  Millis timeout{60000};
  // Address (or interface name, e.g. "eth0") to bind for Gloo's TCP transport;
  // empty: the address of this machine's hostname.
  std::string iface_host;
  // Backend auto: what identifies this rank's host; ranks with the same key share memory.
  // Empty: ShmHostKey() (this boot, /dev/shm and PID namespace). Tests set it to stand for
  // ranks on other hosts.
  std::string host_key;
  // Exchange a small descriptor of each collective among all ranks before running it,
  // to detect mismatched calls and name absent ranks (one extra message round per
  // collective; gloo carries allreduce data up to tens of MiB inside that round, so its
  // allreduce pays nothing for it).
  bool check_consistency = true;
};

// Backend auto picks shm (and shm splits) only with at least this much free in /dev/shm:
// a group takes 5-12 MiB, and a pipeline job makes a group per directed channel.
inline constexpr size_t kShmRoomForAuto = size_t{256} << 20;

// Names of the backends usable here: "gloo", "shm", and "nccl" when this binary is built
// with CUDA/NCCL and this process sees a CUDA device ("auto" is a choice among them, not
// listed).
std::vector<std::string> AvailableBackends();

// Creates this rank's communicator and connects it to the others (blocks until all
// world_size ranks have called it with the same store and prefix, or timeout).
// kInvalidArgument: unknown backend ("unknown backend 'x' (available: gloo, shm; ...)"),
// world_size < 1, rank outside [0, world_size), timeout <= 0, no store when
// world_size > 1, ranks that disagree on world_size, or a rank claimed twice under one
// prefix. kUnavailable: a backend not built into this binary ("... built without
// CUDA/NCCL"), "no CUDA device: ..." for nccl on a machine without a usable GPU, or no
// usable network address. Rendezvous failures keep the store's code (kDeadlineExceeded
// when peers do not show up), with the group and rank in front of the message.
Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options);

}  // namespace cohort::comm
