// RecordSealer: a TLS connection's application data encrypted into memory, so that a
// reply of many records leaves in a few large write(2)s.
//
// OpenSSL writes each record to its socket as it seals it: a 1 MB reply (the job list the
// dashboard and `cohort queue` fetch) is 64 records of 16 KiB, so 64 write(2) calls, each
// a trip through the kernel's TCP stack and a wake-up of the reader, where the same
// reply over plain HTTP is one send(2). bench_head_scale's head made ~1 more write(2)
// per heartbeat under TLS than without (strace of the window). While a RecordSealer
// exists, the connection's writes go to a buffer of the caller's instead of its socket;
// the caller sends that buffer itself, many records at once, then lets the sealer go and
// the connection writes to its socket again. Nothing about the records changes (sizes,
// keys, sequence numbers): only who copies them to the socket, and in what batches.
//
// Threads: one thread at a time per connection, as for any use of an SSL; a sealer only
// on a connection whose handshake is done, and nothing else writes through the SSL while
// it exists.
#pragma once

#include <string>
#include <string_view>

typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace cohort::tls {

class RecordSealer {
 public:
  // Diverts `ssl`'s writes until the destructor. `ssl` outlives the sealer.
  explicit RecordSealer(SSL* ssl);
  // Gives the connection its socket back (the records sealed are the caller's to send).
  ~RecordSealer();
  RecordSealer(const RecordSealer&) = delete;
  RecordSealer& operator=(const RecordSealer&) = delete;

  // False when the sealer could not be set up (out of memory): write through the SSL.
  bool ok() const { return collector_ != nullptr; }

  // Appends to `out` the records that carry `data` (all of it), in order after those
  // sealed before. False when OpenSSL fails: the connection is then unusable.
  bool Seal(std::string_view data, std::string& out);

 private:
  SSL* ssl_;
  BIO* socket_ = nullptr;     // the connection's own write BIO, one reference held here
  BIO* collector_ = nullptr;  // owned by the SSL while installed
};

}  // namespace cohort::tls
