// The TCP store's wire protocol (internal to src/comm), shared by client and server.
//
// Every message is a frame: a 4-byte big-endian payload length, then the payload. In a
// payload, u8/u32/i64 are big-endian integers and a string is a u32 length and its bytes.
//   request  = u8 op, fields:
//     PING  (0)                                 reply OK: str banner ("cohort-tcp-store/1")
//     SET   (1) str key, str value              reply OK
//     GET   (2) str key, i64 timeout_ms         reply OK: str value, once the key is set
//     ADD   (3) str key, i64 delta              reply OK: i64 sum
//     WAIT  (4) u32 n, n x str key, i64 timeout_ms   reply OK once every key is set
//   response = u8 status, fields:
//     OK      (0) as above
//     TIMEOUT (1) u32 n, n x str key            the keys still missing at the deadline
//     ERROR   (2) str code name ("invalid_argument"), str message
// A connection carries one request at a time: the client waits for the reply before it
// sends the next request, and the server parks a GET/WAIT without reading further.
// Plain values and functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cohort::comm::wire {

enum class Op : uint8_t { kPing = 0, kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

inline constexpr std::string_view kBanner = "cohort-tcp-store/1";
// Frames above this are a protocol error (the connection is dropped): 256 MiB.
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;
// GET/WAIT timeouts are capped here (7 days) so deadlines never overflow.
inline constexpr int64_t kMaxTimeoutMs = 7LL * 24 * 3600 * 1000;

// Builds one frame.
class Writer {
 public:
  Writer() : buf_(4, '\0') {}
  Writer& U8(uint8_t v);
  Writer& U32(uint32_t v);
  Writer& I64(int64_t v);
  Writer& Str(std::string_view s);
  // The frame, with its length prefix filled in; the writer is empty afterwards.
  std::string Finish();

 private:
  std::string buf_;
};

// Reads fields from one payload. After a short read every getter returns a zero value
// and ok() is false.
class Reader {
 public:
  explicit Reader(std::string_view payload) : in_(payload) {}
  uint8_t U8();
  uint32_t U32();
  int64_t I64();
  std::string Str();
  bool ok() const { return ok_; }
  // True when every byte was read and none was missing.
  bool done() const { return ok_ && in_.empty(); }

 private:
  bool Take(size_t n, std::string_view& out);
  std::string_view in_;
  bool ok_ = true;
};

// The payload length announced by a frame header at the start of `buf`; nullopt if fewer
// than 4 bytes are there.
std::optional<uint32_t> PeekLength(std::string_view buf);

}  // namespace cohort::comm::wire
