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
// all-to-all exchange of 48-byte descriptors (communicator_descriptor.h) that catches
// mismatched calls and names ranks that never arrived. That exchange costs one message
// round, as much as a small ring step, so an allreduce of at most 64 KiB / (size - 1)
// bytes rides inside it: every rank sends its descriptor and its data to every other
// rank, and once the descriptors agree each rank folds the contributions in rank order
// (the same bits everywhere) — one round instead of the exchange plus Gloo's 2(size-1)
// ring steps.
//
// Gloo's exceptions (gloo::IoException, gloo::EnforceNotMet, ...) are caught here and
// become Errors. A Gloo timeout poisons every pair of its context, so after any
// transport failure the communicator reports kFailedPrecondition from then on.
// Threading: as Communicator (one thread at a time per communicator).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "common/error.h"

namespace cohort::comm {

// CreateCommunicator's "gloo" branch; `options` are already validated by it.
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommOptions& options);

}  // namespace cohort::comm
