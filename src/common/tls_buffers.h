// A pool for OpenSSL's record buffers.
//
// Cohort's TLS servers release a connection's record buffers whenever it has nothing
// pending (SSL_MODE_RELEASE_BUFFERS), so that thousands of kept-alive agent connections
// hold none between heartbeats. The price is two ~17 KB allocations and frees for every
// request, which glibc serves from its large bins (consolidating fastbins each time);
// at 1,000 heartbeats/s that was a sixth of what TLS added to the head's CPU. The pool
// keeps up to kMaxIdle freed buffers and hands them out again: requests in flight at
// once are few, so the pool stays small (at most kMaxIdle x kBufferBytes idle) while a
// released connection still holds nothing.
//
// InstallRecordBufferPool routes every OpenSSL allocation through the pool's functions
// (CRYPTO_set_mem_functions); sizes outside the record-buffer range go to malloc with a
// small header. OpenSSL allows this only before its first allocation, and cpp-httplib's
// shared library allocates through OpenSSL in its initialiser, before any of the
// program's own: so a program installs the pool from its preinit array, which the
// dynamic loader runs before every library's initialiser. One line in the executable's
// main file does that: COHORT_TLS_RECORD_BUFFER_POOL_AT_START().
//
// Threads: everything may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::tls {

// Record buffers are pooled when OpenSSL asks for a size in [kMinPooledBytes,
// kBufferBytes]: a read buffer (16 KiB of plaintext, the record header, the largest
// encryption overhead, alignment) or a write buffer of the same shape.
inline constexpr size_t kMinPooledBytes = 16 << 10;
inline constexpr size_t kBufferBytes = 18 << 10;
inline constexpr size_t kMaxIdle = 64;

// Installs the pool. False (and nothing changes) when OpenSSL has already allocated
// memory in this process, or the pool was installed before.
bool InstallRecordBufferPool();

struct RecordBufferPoolStats {
  bool installed = false;
  uint64_t handed_out = 0;  // pooled-size allocations served
  uint64_t reused = 0;      // ... of which from a buffer freed before
  size_t idle = 0;          // buffers waiting in the pool now
};
RecordBufferPoolStats GetRecordBufferPoolStats();

}  // namespace cohort::tls

// Installs the pool before any shared library initialises (see above). Use it once, at
// namespace scope in an executable's main file (a preinit array may not live in a
// shared library).
#define COHORT_TLS_RECORD_BUFFER_POOL_AT_START()                                              \
  [[gnu::used, gnu::section(".preinit_array")]] static void (*const cohort_tls_pool_preinit)( \
      int, char**, char**) = [](int, char**, char**) { ::cohort::tls::InstallRecordBufferPool(); }
