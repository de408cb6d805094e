#include "head/rendezvous.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <charconv>

#include <fmt/format.h>

namespace cohort::head {

namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

// The MAC of a job's attempt for one purpose: "cohort-rendezvous" (the rendezvous and
// report capability) or "cohort-job-token" (the job's bearer token), so that neither can
// be made from the other.
std::string Mac(const std::string& secret, std::string_view purpose, api::JobId job, int attempt) {
  std::string msg = fmt::format("{}:{}:{}", purpose, job, attempt);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return Hex(out, 16);  // 128 bits are plenty against guessing
}

constexpr std::string_view kRendezvousPurpose = "cohort-rendezvous";
constexpr std::string_view kJobTokenPurpose = "cohort-job-token";

// "<job>-<attempt>-<MAC>" checked against `purpose`; nullopt if it is not one of ours.
std::optional<RendezvousScope> VerifyScoped(const std::string& secret, std::string_view purpose,
                                            std::string_view token) {
  size_t a = token.find('-');
  size_t b = a == std::string_view::npos ? a : token.find('-', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  RendezvousScope s;
  auto r1 = std::from_chars(token.data(), token.data() + a, s.job);
  auto r2 = std::from_chars(token.data() + a + 1, token.data() + b, s.attempt);
  if (r1.ec != std::errc() || r1.ptr != token.data() + a || r2.ec != std::errc() ||
      r2.ptr != token.data() + b || s.job <= 0 || s.attempt < 0) {
    return std::nullopt;
  }
  std::string want = Mac(secret, purpose, s.job, s.attempt);
  std::string_view got = token.substr(b + 1);
  // Constant-time comparison: the MAC must not be learnable byte by byte.
  if (got.size() != want.size()) return std::nullopt;
  unsigned diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned>(got[i] ^ want[i]);
  if (diff != 0) return std::nullopt;
  return s;
}

}  // namespace

std::string NewRendezvousSecret() {
  unsigned char buf[32];
  if (RAND_bytes(buf, sizeof buf) != 1) {
    // OpenSSL's generator failing is exceptional; fall back to the kernel's.
    FILE* f = std::fopen("/dev/urandom", "rb");
    if (f) {
      (void)!std::fread(buf, 1, sizeof buf, f);
      std::fclose(f);
    }
  }
  return Hex(buf, sizeof buf);
}

RendezvousStore::RendezvousStore(std::string secret) : secret_(std::move(secret)) {}

RendezvousStore::Tokens RendezvousStore::TokensOf(api::JobId job, int attempt) const {
  const RendezvousScope scope{job, attempt};
  {
    MutexLock lock(tokens_mu_);
    if (auto it = tokens_.find(scope); it != tokens_.end()) return it->second;
  }
  Tokens made;
  made.rendezvous = fmt::format("{}-{}-{}", job, attempt, Mac(secret_, kRendezvousPurpose, job, attempt));
  made.job = fmt::format("{}{}-{}-{}", kJobTokenPrefix, job, attempt, Mac(secret_, kJobTokenPurpose, job, attempt));
  MutexLock lock(tokens_mu_);
  if (tokens_.size() >= kMaxKeptTokens) tokens_.clear();  // jobs not dropped: start over
  return tokens_.emplace(scope, std::move(made)).first->second;
}

std::string RendezvousStore::Token(api::JobId job, int attempt) const { return TokensOf(job, attempt).rendezvous; }

std::string RendezvousStore::JobToken(api::JobId job, int attempt) const { return TokensOf(job, attempt).job; }

Result<RendezvousScope> RendezvousStore::Verify(const std::string& token) const {
  if (auto s = VerifyScoped(secret_, kRendezvousPurpose, token)) return *s;
  return MakeError(ErrorCode::kNotFound, "unknown rendezvous token");
}

Result<RendezvousScope> RendezvousStore::VerifyJobToken(std::string_view token) const {
  if (token.substr(0, kJobTokenPrefix.size()) == kJobTokenPrefix) {
    if (auto s = VerifyScoped(secret_, kJobTokenPurpose, token.substr(kJobTokenPrefix.size()))) return *s;
  }
  return MakeError(ErrorCode::kUnauthenticated, "not a job token of this head");
}

Result<void> RendezvousStore::StoreLocked(const RendezvousScope& scope, const std::string& key, std::string value) {
  auto entry_bytes = [&](const std::string& v) { return key.size() + v.size() + kEntryOverheadBytes; };
  Keys& keys = keys_[scope];
  auto it = keys.values.find(key);
  size_t bytes = keys.bytes - (it == keys.values.end() ? 0 : entry_bytes(it->second)) + entry_bytes(value);
  if (bytes > kMaxBytesPerAttempt) {
    return Errorf(ErrorCode::kResourceExhausted,
                  "the rendezvous store of job {} attempt {} would hold {} MiB; it holds at most {} MiB per attempt "
                  "(addresses, ids and counters, not data)",
                  scope.job, scope.attempt, bytes >> 20, kMaxBytesPerAttempt >> 20);
  }
  keys.bytes = bytes;
  keys.values.insert_or_assign(key, std::move(value));
  return {};
}

Result<void> RendezvousStore::Set(const RendezvousScope& scope, const std::string& key, std::string value) {
  {
    MutexLock lock(mu_);
    COHORT_TRY_VOID(StoreLocked(scope, key, std::move(value)));
  }
  cv_.NotifyAll();
  return {};
}

std::optional<std::string> RendezvousStore::Get(const RendezvousScope& scope, const std::string& key, Millis wait) {
  MutexLock lock(mu_);
  std::optional<std::string> out;
  cv_.WaitFor(mu_, wait, [&] {
    mu_.AssertHeld();
    auto s = keys_.find(scope);
    if (s == keys_.end()) return false;
    auto k = s->second.values.find(key);
    if (k == s->second.values.end()) return false;
    out = k->second;
    return true;
  });
  return out;
}

Result<int64_t> RendezvousStore::Add(const RendezvousScope& scope, const std::string& key, int64_t delta) {
  int64_t sum = 0;
  {
    MutexLock lock(mu_);
    int64_t cur = 0;
    if (auto s = keys_.find(scope); s != keys_.end()) {
      if (auto k = s->second.values.find(key); k != s->second.values.end() && !k->second.empty()) {
        const std::string& v = k->second;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), cur);
        if (ec != std::errc() || p != v.data() + v.size()) {
          return Errorf(ErrorCode::kFailedPrecondition, "key '{}' holds a value that is not an integer", key);
        }
      }
    }
    if (__builtin_add_overflow(cur, delta, &sum)) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("delta: adding {} to key '{}' ({}) overflows a 64-bit integer", delta, key, cur),
                       "delta");
    }
    COHORT_TRY_VOID(StoreLocked(scope, key, std::to_string(sum)));
  }
  cv_.NotifyAll();
  return sum;
}

void RendezvousStore::DropJob(api::JobId job) {
  {
    MutexLock lock(mu_);
    for (auto it = keys_.begin(); it != keys_.end();) {
      it = it->first.job == job ? keys_.erase(it) : std::next(it);
    }
  }
  {
    MutexLock lock(tokens_mu_);
    tokens_.erase(tokens_.lower_bound({job, 0}), tokens_.lower_bound({job + 1, 0}));
  }
  cv_.NotifyAll();
}

size_t RendezvousStore::KeyCount() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [scope, keys] : keys_) n += keys.values.size();
  return n;
}

}  // namespace cohort::head
