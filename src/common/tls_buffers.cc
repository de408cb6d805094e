#include "common/tls_buffers.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/mutex.h"

namespace cohort::tls {
namespace {

// Every allocation carries this header in front of what OpenSSL sees: the size it asked
// for (realloc copies that much) and whether the block is a pooled buffer. 16 bytes keep
// the caller's pointer aligned as malloc's is.
struct alignas(16) Header {
  size_t size;
  size_t pooled;  // 1: a kBufferBytes block from the pool
};
static_assert(sizeof(Header) == 16);

// The free buffers. OpenSSL calls in here from any thread, also during exit; the
// critical sections are a few instructions.
struct Pool {
  Mutex mu;
  void* idle[kMaxIdle] GUARDED_BY(mu) = {};
  size_t count GUARDED_BY(mu) = 0;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: OpenSSL may free during exit
  return *pool;
}

std::atomic<bool> g_installed{false};
std::atomic<uint64_t> g_handed_out{0};
std::atomic<uint64_t> g_reused{0};

bool Pooled(size_t n) { return n >= kMinPooledBytes && n <= kBufferBytes; }

void* ToUser(Header* h) { return h + 1; }
Header* ToHeader(void* p) { return static_cast<Header*>(p) - 1; }

void* PoolMalloc(size_t n, const char* /*file*/, int /*line*/) {
  Header* h = nullptr;
  if (Pooled(n)) {
    g_handed_out.fetch_add(1, std::memory_order_relaxed);
    Pool& pool = ThePool();
    {
      MutexLock lock(pool.mu);
      if (pool.count > 0) h = static_cast<Header*>(pool.idle[--pool.count]);
    }
    if (h) {
      g_reused.fetch_add(1, std::memory_order_relaxed);
    } else {
      h = static_cast<Header*>(std::malloc(sizeof(Header) + kBufferBytes));
      if (!h) return nullptr;
    }
    h->pooled = 1;
  } else {
    h = static_cast<Header*>(std::malloc(sizeof(Header) + n));
    if (!h) return nullptr;
    h->pooled = 0;
  }
  h->size = n;
  return ToUser(h);
}

void PoolFree(void* p, const char* /*file*/, int /*line*/) {
  if (!p) return;
  Header* h = ToHeader(p);
  if (h->pooled) {
    Pool& pool = ThePool();
    MutexLock lock(pool.mu);
    if (pool.count < kMaxIdle) {
      pool.idle[pool.count++] = h;
      return;
    }
  }
  std::free(h);
}

void* PoolRealloc(void* p, size_t n, const char* file, int line) {
  if (!p) return PoolMalloc(n, file, line);
  if (n == 0) {
    PoolFree(p, file, line);
    return nullptr;
  }
  Header* h = ToHeader(p);
  if (h->pooled && Pooled(n)) {  // still fits its block
    h->size = n;
    return p;
  }
  if (!h->pooled && !Pooled(n)) {
    auto* grown = static_cast<Header*>(std::realloc(h, sizeof(Header) + n));
    if (!grown) return nullptr;
    grown->size = n;
    return ToUser(grown);
  }
  void* moved = PoolMalloc(n, file, line);
  if (!moved) return nullptr;
  std::memcpy(moved, p, std::min(n, h->size));
  PoolFree(p, file, line);
  return moved;
}

}  // namespace

bool InstallRecordBufferPool() {
  if (g_installed.load()) return false;
  if (CRYPTO_set_mem_functions(&PoolMalloc, &PoolRealloc, &PoolFree) != 1) return false;
  g_installed = true;
  return true;
}

RecordBufferPoolStats GetRecordBufferPoolStats() {
  RecordBufferPoolStats s;
  s.installed = g_installed.load();
  s.handed_out = g_handed_out.load();
  s.reused = g_reused.load();
  Pool& pool = ThePool();
  MutexLock lock(pool.mu);
  s.idle = pool.count;
  return s;
}

}  // namespace cohort::tls
