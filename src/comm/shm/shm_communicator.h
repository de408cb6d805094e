// The shared-memory backend of Communicator ("shm"): host memory between the ranks of one
// host, through one POSIX shared-memory segment per group, with no socket and no helper
// thread. NCCL's SHM transport and MPI's shared-memory collectives do the same for ranks
// that share a machine; Gloo's TCP transport (gloo/) costs several system calls and thread
// hand-offs per message even over loopback.
//
// Segment. The group's rank 0 creates "/cohort-shm-<pid>-<random>" in /dev/shm, reserves
// all of it up front (posix_fallocate: a full /dev/shm is an error here, never a SIGBUS
// later) and publishes its name under "<prefix>/shm/<group>/segment"; the others open it.
// Once every rank has attached (the rendezvous phase below), every rank unlinks the name:
// the memory lives while a rank maps it and nothing is left in /dev/shm when they exit,
// killed or not. Only a rank 0 killed during the rendezvous leaves its name; the next
// process on the host that creates a group removes such names once their creator is gone
// and they are an hour old (RemoveStaleShmSegments). The segment holds, per rank, a control block (its phase
// counter, its wake-up word, its descriptor slots, its pid, a closed flag) and a data area
// of two
// halves; and one channel per ordered pair of ranks for Send/Recv.
//
// Phases. Every collective is a sequence of phases that all ranks go through alike: a rank
// writes into its own area (half `uses % 2`, alternating per round of data), publishes its
// phase counter, wakes the ranks that sleep, and waits until every rank has published the
// same phase; then it reads the other ranks' areas. Alternating halves makes one phase per
// round enough: a rank writes a half again only after every peer has published the next
// phase, which it does after its reads of that half. Waiting spins briefly, then sleeps on
// its own futex word in slices of 50 ms, between which it checks the ranks it waits for:
// a closed communicator (a rank that failed or was destroyed) or an exited process (a
// pidfd, so a killed rank is seen within a slice) fails the wait with kUnavailable "lost
// connection to rank r"; the timeout fails it with kDeadlineExceeded naming the ranks
// that were behind.
//   - AllReduce: per round, every rank copies a chunk of its input into its half; rank r
//     folds slice r of the chunk over all ranks in rank order (the same bits whichever rank
//     folds it) into its own half; a second phase; every rank copies the reduced slices
//     out. Two phases per chunk of up to 1 MiB.
//   - ReduceScatter: per round, every rank copies the next piece of every destination's
//     segment into its half; rank r folds its pieces from all areas into its output. One
//     phase per round, the work balanced over the ranks.
//   - AllGather and Broadcast: per round, the contributors copy a piece in; every rank
//     copies from every area out. Barrier: one phase.
// With check_consistency, the first phase of a collective carries each rank's descriptor
// (communicator_descriptor.h), compared before anything reaches the caller's buffers: a
// mismatch fails every rank with the same kInvalidArgument and the communicator stays
// usable. The first round's data rides in the same phase, so the check costs nothing.
//
// Send/Recv. A channel per ordered pair, one message in flight: the sender copies a chunk
// and its header (tag, dtype, count) in and bumps `posted`; the receiver copies it out and
// bumps `taken`. A message longer than the channel goes in chunks. Sends and receives
// between two ranks pair in call order (as NCCL's); with check_consistency a receive
// whose tag, dtype or count differs from the message fails with kInvalidArgument naming
// both (the message is consumed; the communicator stays usable). A count mismatch is
// always an error.
//
// The argument checks, broken state, sequence numbers and Split are CommunicatorBase's
// (communicator_base.h). Threading: as Communicator (one thread at a time per
// communicator). Every rank of the group must be on this host, in one PID namespace and
// see the same /dev/shm: backend "auto" (communicator.h) checks that and picks gloo
// otherwise.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::comm {

// CreateCommunicator's "shm" branch; `options` are already validated by it.
Result<std::unique_ptr<Communicator>> CreateShmCommunicator(const CommOptions& options);

struct GroupConfig;
// The shm group `group_id` of the world ranks `world_ranks` (all on this host), in which
// this is `rank`: a sub-group another backend splits (gloo's, under backend auto).
Result<std::unique_ptr<Communicator>> ConnectShmGroup(const GroupConfig& group,
                                                      std::string group_id,
                                                      std::vector<int> world_ranks, int rank);

// What must be equal for two processes to share a segment and watch each other's pids:
// this boot of this machine, this /dev/shm, this PID namespace and this user.
// "<boot id>/<dev>:<ino of /dev/shm>/<pid namespace>/uid <uid>"; empty when one cannot be
// read.
std::string ShmHostKey();

// Bytes free for an unprivileged user in the file system at `path`; 0 when it cannot be read.
size_t ShmFreeBytes(const std::string& path);

// Removes the segment names in `dir` (/dev/shm) whose creator has exited and that are
// older than `older_than`: what a rank 0 killed during a rendezvous left (every rank
// unlinks the name once all attached). Called once per process, before its first segment.
// Returns how many it removed.
size_t RemoveStaleShmSegments(const std::string& dir, std::chrono::seconds older_than);

}  // namespace cohort::comm
