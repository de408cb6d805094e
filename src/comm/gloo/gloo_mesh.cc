#include "comm/gloo/gloo_mesh.h"

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/gloo/gloo_store.h"
#include "common/log.h"

namespace cohort::comm::gloo_backend {

namespace {

// Clear of Gloo's slot prefixes (0x01..0x08) and the communicator's (0xC0..0xC3).
constexpr uint8_t kMeshSlotPrefix = 0xC4;
constexpr uint64_t kTokenMagic = 0x6d656873'74726f63;  // "cortshem"
// How long each of a watcher's reads of the outcome waits. Every store wakes a waiting
// read when the key is set, so this bounds only how long a rank that leaves an attempt on
// an error of its store waits for its watcher; each read is one request to an HTTP store.
constexpr Millis kWatchPoll{1000};

// What a rank sends each peer, and expects back with `from` and `to` swapped.
struct Token {
  uint64_t magic = 0;
  uint64_t attempt = 0;
  uint64_t from = 0;
  uint64_t to = 0;
  bool operator==(const Token&) const = default;
};

// A rendezvous context whose transport context ConnectMesh connected (Gloo keeps the
// members protected; its own connectFullMesh is the only other way to set them).
class MeshContext final : public ::gloo::rendezvous::Context {
 public:
  MeshContext(int rank, int size) : ::gloo::rendezvous::Context(rank, size) {}
  void Adopt(std::shared_ptr<::gloo::transport::Device> device,
             std::shared_ptr<::gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// What abandoning an attempt stops: its pairs (closed, so a rank waiting in connect
// returns and its peers see a reset) and its token waits (aborted). Once only; any thread.
class Abandon {
 public:
  Abandon(std::vector<::gloo::transport::Pair*> pairs, ::gloo::transport::UnboundBuffer* send,
          ::gloo::transport::UnboundBuffer* recv)
      : pairs_(std::move(pairs)), send_(send), recv_(recv) {}

  void Now() {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    for (auto* p : pairs_) {
      if (p == nullptr) continue;
      try {
        p->close();
      } catch (const std::exception&) {
        // Already closed by a failure of its own: nothing more to stop.
      }
    }
    send_->abortWaitSend();
    recv_->abortWaitRecv();
  }
  bool done() const {
    std::lock_guard lock(mu_);
    return done_;
  }

 private:
  mutable std::mutex mu_;
  bool done_ = false;
  std::vector<::gloo::transport::Pair*> pairs_;
  ::gloo::transport::UnboundBuffer* send_;
  ::gloo::transport::UnboundBuffer* recv_;
};

// Waits for an attempt's outcome on its own thread and abandons the attempt when it is
// not "ok". Stops (joined) when destroyed.
class Watcher {
 public:
  Watcher(std::shared_ptr<Store> store, std::string key, Abandon& abandon)
      : thread_([this, store = std::move(store), key = std::move(key), &abandon] {
          while (!stop_.load()) {
            auto v = store->Get(key, kWatchPoll);
            if (!v) continue;  // not yet (or the store failed: the rank's own read says so)
            if (*v != "ok") abandon.Now();
            return;
          }
        }) {}
  ~Watcher() {
    stop_.store(true);
    thread_.join();
  }
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Rank i's address for this rank out of everything rank i published (Gloo's layout: one
// address per other rank, in rank order).
std::vector<char> AddressFor(const std::vector<char>& all, int publisher, int rank, int size) {
  const size_t each = all.size() / static_cast<size_t>(size - 1);
  const size_t slot = static_cast<size_t>(rank > publisher ? rank - 1 : rank);
  return {all.begin() + static_cast<std::ptrdiff_t>(slot * each),
          all.begin() + static_cast<std::ptrdiff_t>((slot + 1) * each)};
}

// One attempt's result: connected, abandoned for another (`retry` says why), or an error.
struct Attempt {
  std::optional<Mesh> mesh;
  std::string retry;
};

Result<Attempt> TryMesh(const MeshOptions& o, int attempt) {
  const std::string prefix = o.key_prefix + fmt::format("mesh{}/", attempt);
  const std::string outcome_key = prefix + "outcome";
  GlooStore store(o.store, prefix, o.timeout, o.size);
  std::shared_ptr<::gloo::transport::Context> transport;
  std::vector<::gloo::transport::Pair*> pairs(static_cast<size_t>(o.size), nullptr);
  std::vector<std::vector<char>> peer_addresses(static_cast<size_t>(o.size));
  try {
    transport = o.device->createContext(o.rank, o.size);
    transport->setTimeout(o.timeout);
    std::vector<char> mine;
    for (int i = 0; i < o.size; ++i) {
      if (i == o.rank) continue;
      auto& pair = transport->createPair(i);
      pairs[static_cast<size_t>(i)] = pair.get();
      const std::vector<char> bytes = pair->address().bytes();
      mine.insert(mine.end(), bytes.begin(), bytes.end());
    }
    store.set(std::to_string(o.rank), mine);
    for (int i = 0; i < o.size; ++i) {
      if (i == o.rank) continue;
      peer_addresses[static_cast<size_t>(i)] =
          AddressFor(store.get(std::to_string(i)), i, o.rank, o.size);
    }
  } catch (const StoreFailure& e) {
    return std::unexpected(WithContext(e.error, o.what));
  } catch (const std::exception& e) {
    return Errorf(ErrorCode::kUnavailable, "{}: creating connections failed: {}", o.what,
                  CleanGlooMessage(e.what()));
  }

  std::vector<Token> out(static_cast<size_t>(o.size)), in(static_cast<size_t>(o.size));
  for (int i = 0; i < o.size; ++i) {
    out[static_cast<size_t>(i)] = {kTokenMagic, static_cast<uint64_t>(attempt),
                                   static_cast<uint64_t>(o.rank), static_cast<uint64_t>(i)};
  }
  auto send_buf = transport->createUnboundBuffer(out.data(), out.size() * sizeof(Token));
  auto recv_buf = transport->createUnboundBuffer(in.data(), in.size() * sizeof(Token));
  Abandon abandon(pairs, send_buf.get(), recv_buf.get());
  std::string failure;  // this rank's own, with the peer named where Gloo's message says
  bool timed_out = false;
  Result<std::string> outcome;
  {
    Watcher watcher(o.store, outcome_key, abandon);
    try {
      for (int i = 0; i < o.size && !abandon.done(); ++i) {
        if (i != o.rank) pairs[static_cast<size_t>(i)]->connect(peer_addresses[static_cast<size_t>(i)]);
      }
      const uint64_t slot = ::gloo::Slot::build(kMeshSlotPrefix, static_cast<uint32_t>(attempt));
      const size_t t = sizeof(Token);
      if (!abandon.done()) {
        for (int i = 0; i < o.size; ++i) {
          if (i == o.rank) continue;
          recv_buf->recv(i, slot, static_cast<size_t>(i) * t, t);
          send_buf->send(i, slot, static_cast<size_t>(i) * t, t);
        }
        bool waited = true;
        for (int n = 1; n < o.size && waited; ++n) waited = recv_buf->waitRecv(nullptr, o.timeout);
        for (int n = 1; n < o.size && waited; ++n) waited = send_buf->waitSend(nullptr, o.timeout);
        for (int i = 0; i < o.size && waited && failure.empty(); ++i) {
          const Token want{kTokenMagic, static_cast<uint64_t>(attempt), static_cast<uint64_t>(i),
                           static_cast<uint64_t>(o.rank)};
          if (i != o.rank && in[static_cast<size_t>(i)] != want) {
            failure = fmt::format("the connection made for {} answered as something else",
                                  o.rank_name(i));
          }
        }
      }
    } catch (const std::exception& e) {
      const std::string msg = CleanGlooMessage(e.what());
      timed_out = IsGlooTimeout(msg);
      auto peer = PeerDirectory::FromRendezvous(store.values_read(), o.rank, o.size).FindRank(msg);
      failure = peer ? fmt::format("with {}: {}", o.rank_name(*peer), msg) : msg;
    }
    if (abandon.done()) {
      failure.clear();  // another rank's failure ended the attempt; the outcome says which
    } else if (failure.empty()) {
      auto checked = o.store->Add(prefix + "ok", 1);
      if (!checked) return std::unexpected(WithContext(checked.error(), o.what));
      if (*checked == o.size) {
        auto r = o.store->Set(outcome_key, "ok");
        if (!r) return std::unexpected(WithContext(r.error(), o.what));
      }
    } else {
      // The first rank to fail gives the outcome; the failures that follow from it do not.
      auto first = o.store->Add(prefix + "failures", 1);
      if (!first) return std::unexpected(WithContext(first.error(), o.what));
      if (*first == 1) {
        auto r = o.store->Set(outcome_key, fmt::format("{}: rank {}: {}", timed_out ? "fail" : "retry",
                                                       o.rank, failure));
        if (!r) return std::unexpected(WithContext(r.error(), o.what));
      }
      abandon.Now();
    }
    // Read while the watcher waits for the same key, so that it sees the outcome when
    // this rank does and stops at once.
    outcome = o.store->Get(outcome_key, o.timeout);
  }
  if (!outcome) return std::unexpected(WithContext(outcome.error(), o.what));
  if (*outcome == "ok") {
    auto context = std::make_shared<MeshContext>(o.rank, o.size);
    context->setTimeout(o.timeout);
    context->Adopt(o.device, std::move(transport));
    return Attempt{Mesh{std::move(context),
                        PeerDirectory::FromRendezvous(store.values_read(), o.rank, o.size)},
                   ""};
  }
  abandon.Now();
  if (outcome->starts_with("retry: ")) return Attempt{std::nullopt, outcome->substr(7)};
  // "fail: ": a rank timed out (a peer that never came or stopped answering), which
  // connecting again would only repeat.
  const bool deadline = outcome->starts_with("fail: ");
  return Errorf(deadline ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnavailable,
                "{}: connecting failed: {}", o.what, deadline ? outcome->substr(6) : *outcome);
}

}  // namespace

std::string MeshAddressKey(int attempt, int rank) { return fmt::format("mesh{}/{}", attempt, rank); }

Result<Mesh> ConnectMesh(const MeshOptions& o) {
  std::string why;
  for (int attempt = 0; attempt < kMeshAttempts; ++attempt) {
    auto r = TryMesh(o, attempt);
    if (!r) return std::unexpected(r.error());
    if (r->mesh) return std::move(*r->mesh);
    why = std::move(r->retry);
    if (attempt + 1 < kMeshAttempts) {
      LOG_WARN("{}: connection attempt {} of {} failed ({}); connecting again", o.what,
               attempt + 1, kMeshAttempts, why);
    }
  }
  return Errorf(ErrorCode::kUnavailable, "{}: connecting failed {} times; the last: {}", o.what,
                kMeshAttempts, why);
}

}  // namespace cohort::comm::gloo_backend
