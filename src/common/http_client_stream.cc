#include "common/http_client_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/tls.h"

namespace cohort {

namespace {

// Waits up to `timeout` for `events` on `fd`; true when ready (or the connection broke:
// the next read or write says how).
bool Wait(int fd, short events, Millis timeout) {
  pollfd p{fd, events, 0};
  const auto end = SteadyClock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(end - SteadyClock::now()).count();
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 60'000)));
    if (n > 0) return true;
    if (n == 0 && left <= 60'000) return false;
    if (n < 0 && errno != EINTR) return false;
  }
}

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc == 0 && getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                             NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

}  // namespace

bool ClientStream::is_readable() const {
  if (!Flush()) return false;
  return in_pos_ < in_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0) || Wait(fd_, POLLIN, read_timeout_);
}

bool ClientStream::is_writable() const { return Wait(fd_, POLLOUT, write_timeout_); }

ssize_t ClientStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (!Flush()) return -1;
  if (in_pos_ == in_.size()) {
    // A large read goes straight in; a small one (a reply's head, byte by byte) is served
    // from one read of up to a record.
    if (size >= kBufferBytes) return ReadSome(ptr, size);
    in_.resize(kBufferBytes);
    const ssize_t n = ReadSome(in_.data(), in_.size());
    in_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    in_pos_ = 0;
    if (n <= 0) return n;
  }
  const size_t n = std::min(size, in_.size() - in_pos_);
  std::memcpy(ptr, in_.data() + in_pos_, n);
  in_pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ClientStream::ReadSome(char* ptr, size_t size) const {
  if (ssl_ == nullptr) {
    for (;;) {
      if (!Wait(fd_, POLLIN, read_timeout_)) return -1;
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0) return n;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
  }
  for (;;) {
    // Bytes OpenSSL holds already decrypted wake no poll.
    if (SSL_pending(ssl_) == 0 && !Wait(fd_, POLLIN, read_timeout_)) return -1;
    tls::ClearErrors();
    const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_READ) continue;
    if (err == SSL_ERROR_WANT_WRITE) {
      if (!Wait(fd_, POLLOUT, write_timeout_)) return -1;
      continue;
    }
    ERR_clear_error();
    return err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
  }
}

ssize_t ClientStream::write(const char* ptr, size_t size) {
  if (write_failed_) return -1;
  if (out_.size() + size > kBufferBytes && !Flush()) return -1;
  if (size < kBufferBytes) {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  if (!SendAll(ptr, size)) {
    write_failed_ = true;
    return -1;
  }
  return static_cast<ssize_t>(size);
}

bool ClientStream::Flush() const {
  if (write_failed_) return false;
  if (out_.empty()) return true;
  const bool ok = SendAll(out_.data(), out_.size());
  out_.clear();
  write_failed_ = !ok;
  return ok;
}

bool ClientStream::SendAll(const char* data, size_t size) const {
  size_t done = 0;
  while (done < size) {
    if (!Wait(fd_, POLLOUT, write_timeout_)) return false;
    if (ssl_ == nullptr) {
      const ssize_t n = ::send(fd_, data + done, size - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return false;
      }
      continue;
    }
    tls::ClearErrors();
    const int n = SSL_write(ssl_, data + done, static_cast<int>(std::min<size_t>(size - done, 1 << 30)));
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = SSL_get_error(ssl_, n);
    if (err == SSL_ERROR_WANT_READ && !Wait(fd_, POLLIN, read_timeout_)) return false;
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
      ERR_clear_error();
      return false;
    }
  }
  return true;
}

void ClientStream::get_remote_ip_and_port(std::string& ip, int& port) const { AddressOf(fd_, true, ip, port); }

void ClientStream::get_local_ip_and_port(std::string& ip, int& port) const { AddressOf(fd_, false, ip, port); }

}  // namespace cohort
