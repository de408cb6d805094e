// A cpp-httplib client for one connection, plain or TLS, shared by HttpClient, the
// rendezvous HttpStore and tests that send raw requests, so that every https client
// trusts what it is told in the same way.
#pragma once

#include <memory>
#include <string>

#include <httplib.h>

#include "common/error.h"
#include "common/tls.h"

namespace cohort {

// Plain HTTP, or (https) TLS that trusts only `trust`'s authority, verified by OpenSSL
// with the host name checked in the handshake (httplib's own check would add the system's
// authorities); with `trust` null, the system's authorities. `trust`'s identity, if set,
// is the client certificate presented. Its requests run over a ClientStream
// (http_client_stream.h): each leaves in one write, and its reply is read through a buffer.
Result<std::unique_ptr<httplib::ClientImpl>> NewHttplibClient(const std::string& host, int port, bool https,
                                                              const tls::ClientOptions* trust);

}  // namespace cohort
