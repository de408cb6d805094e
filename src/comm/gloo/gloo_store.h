// GlooStore: Gloo's rendezvous store interface over a comm::Store, for one communicator's
// rendezvous (gloo::rendezvous::Context::connectFullMesh). Every key Gloo uses is put
// under `key_prefix` ("<prefix>/<group id>/"), so communicators sharing a store never
// see each other's keys. Gloo's interface has no error values: a failing store call
// throws StoreFailure carrying the cohort Error, which the backend catches at its
// boundary (nothing escapes the module). The values read are kept so that the backend
// can learn its peers' addresses. Every rank publishes one address per other rank, so a
// value of another size means the ranks disagree on the group size: get() fails with
// kInvalidArgument saying so. A null store stands for a process-local map (only
// meaningful for a group of one). Used by one thread (the one connecting).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "comm/store.h"
#include "common/clock.h"
#include "common/error.h"

namespace cohort::comm::gloo_backend {

// Thrown through Gloo by GlooStore; carries the store's Error.
struct StoreFailure : std::runtime_error {
  explicit StoreFailure(Error e) : std::runtime_error(e.ToString()), error(std::move(e)) {}
  Error error;
};

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  // `group_size`: the number of ranks this rank was told the group has.
  GlooStore(std::shared_ptr<comm::Store> store, std::string key_prefix, Millis timeout,
            int group_size);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to the timeout given at construction.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Every value returned by get(), by unprefixed key.
  const std::map<std::string, std::vector<char>>& values_read() const { return read_; }

 private:
  std::shared_ptr<comm::Store> store_;  // null: local_ only
  std::string key_prefix_;
  Millis timeout_;
  int group_size_;
  size_t own_value_size_ = 0;  // what this rank set (its own addresses); 0 until set
  std::map<std::string, std::vector<char>> local_;
  std::map<std::string, std::vector<char>> read_;
};

}  // namespace cohort::comm::gloo_backend
