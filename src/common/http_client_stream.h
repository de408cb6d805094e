// ClientStream: the stream a Cohort HTTP client (common/http.h's kept connections) runs a
// request over, in place of cpp-httplib's own.
//
// httplib's client writes a request's head and its body with two writes: two TCP segments,
// and under TLS two records, so the server's event loop could wake twice for one request
// and decrypted two records where one would do (every agent's heartbeat to the head). Here
// writes wait in a buffer of up to one record's payload (16 KiB) and leave together when
// the client starts reading the reply (or the buffer is full): one send(2), one record.
// httplib also reads a reply's status line and headers one byte at a time; over its TLS
// stream that was an SSL_read per byte. Reads here come through a buffer of their own.
//
// Reads wait for the socket up to the read timeout, writes up to the write timeout, as
// httplib's streams do; a socket that is blocking (httplib's, after its connect) or not
// both work.
//
// Threads: one request at a time, on the caller's thread (httplib holds the connection).
#pragma once

#include <string>

#include <httplib.h>

#include "common/clock.h"

typedef struct ssl_st SSL;

namespace cohort {

class ClientStream final : public httplib::Stream {
 public:
  static constexpr size_t kBufferBytes = 16 << 10;  // one TLS record's payload

  // Over `fd`, through `ssl` when it is set (a TLS connection whose handshake is done).
  ClientStream(int fd, SSL* ssl, Millis read_timeout, Millis write_timeout)
      : fd_(fd), ssl_(ssl), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  // Sends what waits first. > 0 bytes read, 0 at the end of the stream, -1 on an error or
  // after the read timeout.
  ssize_t read(char* ptr, size_t size) override;
  // Buffered; -1 once a send has failed.
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

  // Sends what the buffer holds; false if the connection failed. The request's caller
  // calls it when the request is done (a request that reads no reply still leaves).
  bool Flush() const;

 private:
  // One read from the connection into `ptr` (waiting up to the read timeout).
  ssize_t ReadSome(char* ptr, size_t size) const;
  bool SendAll(const char* data, size_t size) const;

  int fd_;
  SSL* ssl_;
  Millis read_timeout_;
  Millis write_timeout_;
  // Written, not yet sent; mutable since httplib's const is_readable must send it first.
  mutable std::string out_;
  mutable bool write_failed_ = false;
  std::string in_;  // read, not yet handed to httplib: in_[in_pos_, in_.size())
  size_t in_pos_ = 0;
};

}  // namespace cohort
