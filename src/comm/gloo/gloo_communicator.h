// The Gloo backend of Communicator: host memory over Gloo's TCP transport.
//
// Each rank opens one tcp::Device (a listening address and an event-loop thread), shared
// by the communicator and every sub-group Split from it. Rendezvous goes through the
// comm::Store under "<prefix>/<group id>/" (group id "world" for the first communicator,
// then one path element per Split); Gloo's connectFullMesh connects every pair.
//
// Collectives map to Gloo's algorithms (allreduce ring, allgatherv ring, broadcast,
// barrier) with per-dtype reduce kernels (gloo_reduce.h); ReduceScatter is a ring over
// unbound buffers (Debian's Gloo has no timeout-aware reduce-scatter); Send/Recv are
// unbound-buffer sends under a slot derived from the tag. Every wait is bounded by
// CommOptions::timeout. With check_consistency, every collective starts with an
// all-to-all exchange (communicator_descriptor.h): to every peer one message, a 48-byte
// descriptor with up to 64 KiB of payload behind it (a longer payload follows in a message
// of its own), which catches mismatched calls and names ranks that never
// arrived. That exchange costs one message round, as much as a ring step, so an
// allreduce moves its data inside it where it can (the mode follows from the
// descriptor, so every rank picks the same one):
//   - inline, up to 1 MiB / (size - 1) bytes (4 MiB with two ranks): every rank sends its
//     whole payload to every peer, and once the descriptors agree each rank folds the
//     contributions in rank order (the same bits everywhere): one round in place of the
//     exchange plus Gloo's 2 (size - 1) ring steps;
//   - split, while a chunk (count / size) fits 16 MiB / (size - 1) bytes: rank r sends
//     chunk p to rank p; once the descriptors agree, rank p folds chunk p in rank order
//     and sends the result to every peer: the ring's bytes in two rounds;
//   - otherwise the exchange carries no payload and Gloo's ring runs after it
//     (where the ring takes tens of milliseconds and one round does not matter).
// Every rank posts its payload receives with the same capacity (16 MiB / (size - 1) per
// peer, reserved at creation and touched only as payloads use it), and a sender never
// exceeds it, so a mismatched peer's payload lands harmlessly and no data reaches the
// caller's buffers before the descriptors have been compared.
//
// Gloo's exceptions (gloo::IoException, gloo::EnforceNotMet, ...) are caught here and
// become Errors. A Gloo timeout poisons every pair of its context, so after any
// transport failure the communicator reports kFailedPrecondition from then on.
// The argument checks, broken state, sequence numbers and Split are CommunicatorBase's
// (communicator_base.h). Threading: as Communicator (one thread at a time per
// communicator).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::comm {

// CreateCommunicator's "gloo" branch; `options` are already validated by it. With
// `host_keys` (one per rank, from backend auto), Split makes a sub-group whose members
// all have the same key an shm group.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const CommOptions& options, std::vector<std::string> host_keys = {});

}  // namespace cohort::comm
