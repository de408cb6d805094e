// Store: the key-value store ranks use to find each other (rendezvous).
//
// Backends, chosen by URL (OpenStore):
//   http://HEAD/v1/rendezvous/TOKEN  the head's per-job store (COHORT_RENDEZVOUS; HttpStore)
//   tcp://HOST:PORT                   a store hosted by rank 0 (MASTER_ADDR:MASTER_PORT), for
//                                     use outside a Cohort cluster, like torch's TCPStore
//   file:///PATH                      a directory on a shared file system (FileStore)
// Values are opaque bytes. Every blocking call takes a timeout and fails with
// kDeadlineExceeded naming the keys it waited for. Implementations are thread-safe.
// This is the data plane: it never includes control-plane headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm {

class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value.
  virtual Result<void> Set(const std::string& key, const std::string& value) = 0;
  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  virtual Result<std::string> Get(const std::string& key, Millis timeout) = 0;
  // Waits until every key in `keys` is set.
  virtual Result<void> Wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Atomically adds `delta` to the integer stored at `key` (missing = 0); returns the sum.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

// Opens a store from its URL (see above). kInvalidArgument for an unknown scheme or a
// malformed URL; kUnavailable when the store cannot be reached within `timeout`.
// For tcp://, `is_server` makes this process host the store (rank 0).
Result<std::unique_ptr<Store>> OpenStore(const std::string& url, bool is_server, Millis timeout);

}  // namespace cohort::comm
