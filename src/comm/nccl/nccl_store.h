// The ncclUniqueId rendezvous over a comm::Store.
//
// NCCL's ranks meet through one 128-byte ncclUniqueId that the group's first rank makes
// (ncclGetUniqueId opens NCCL's bootstrap socket on that rank) and every other rank
// reads. ShareUniqueId does both halves: the root creates the id and sets
// "<key_prefix>id" to it, hex-encoded; the others Get that key, waiting up to `timeout`.
// A null store stands for a group of one (no peers to tell). Store errors keep the
// store's code (kDeadlineExceeded when the root never published). Only compiled with
// NCCL. Thread-safe as the Store is.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nccl.h>

#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm::nccl_backend {

Result<ncclUniqueId> ShareUniqueId(const std::shared_ptr<Store>& store,
                                   const std::string& key_prefix, bool is_root, Millis timeout);

// Lower-case hex of the id's bytes, and back (kInvalidArgument for a malformed text).
std::string EncodeUniqueId(const ncclUniqueId& id);
Result<ncclUniqueId> DecodeUniqueId(std::string_view hex);

}  // namespace cohort::comm::nccl_backend
