#include "comm/tcp_store_wire.h"

namespace cohort::comm::wire {
namespace {

void PutBigEndian(std::string& buf, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) buf += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t GetBigEndian(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(in[i]);
  return v;
}

}  // namespace

Writer& Writer::U8(uint8_t v) {
  buf_ += static_cast<char>(v);
  return *this;
}

Writer& Writer::U32(uint32_t v) {
  PutBigEndian(buf_, v, 4);
  return *this;
}

Writer& Writer::I64(int64_t v) {
  PutBigEndian(buf_, static_cast<uint64_t>(v), 8);
  return *this;
}

Writer& Writer::Str(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  buf_.append(s);
  return *this;
}

std::string Writer::Finish() {
  uint64_t len = buf_.size() - 4;
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((len >> (8 * (3 - i))) & 0xff);
  return std::move(buf_);
}

bool Reader::Take(size_t n, std::string_view& out) {
  if (!ok_ || in_.size() < n) {
    ok_ = false;
    return false;
  }
  out = in_.substr(0, n);
  in_.remove_prefix(n);
  return true;
}

uint8_t Reader::U8() {
  std::string_view b;
  return Take(1, b) ? static_cast<uint8_t>(b[0]) : 0;
}

uint32_t Reader::U32() {
  std::string_view b;
  return Take(4, b) ? static_cast<uint32_t>(GetBigEndian(b, 4)) : 0;
}

int64_t Reader::I64() {
  std::string_view b;
  return Take(8, b) ? static_cast<int64_t>(GetBigEndian(b, 8)) : 0;
}

std::string Reader::Str() {
  uint32_t n = U32();
  std::string_view b;
  return Take(n, b) ? std::string(b) : std::string();
}

std::optional<uint32_t> PeekLength(std::string_view buf) {
  if (buf.size() < 4) return std::nullopt;
  return static_cast<uint32_t>(GetBigEndian(buf, 4));
}

}  // namespace cohort::comm::wire
