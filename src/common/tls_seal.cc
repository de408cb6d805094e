#include "common/tls_seal.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "common/tls.h"

namespace cohort::tls {

namespace {

// The collector: a sink that appends what OpenSSL writes to the string its data points
// at (none between two Seal calls: a write then fails).
int CollectWrite(BIO* bio, const char* data, size_t size, size_t* written) {
  auto* out = static_cast<std::string*>(BIO_get_data(bio));
  if (out == nullptr) return 0;
  out->append(data, size);
  *written = size;
  return 1;
}

long CollectCtrl(BIO* /*bio*/, int cmd, long /*num*/, void* /*ptr*/) {
  // Everything written is "sent" already; nothing is pending. Other questions (kernel
  // TLS, datagrams) are answered no, as by a BIO that does not know them.
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int CollectCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* CollectorMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "cohort record collector");
    if (m == nullptr) return m;
    BIO_meth_set_write_ex(m, &CollectWrite);
    BIO_meth_set_ctrl(m, &CollectCtrl);
    BIO_meth_set_create(m, &CollectCreate);
    return m;
  }();  // never freed: one for the process
  return method;
}

}  // namespace

RecordSealer::RecordSealer(SSL* ssl) : ssl_(ssl) {
  const BIO_METHOD* method = CollectorMethod();
  BIO* socket = SSL_get_wbio(ssl);
  if (method == nullptr || socket == nullptr) return;
  BIO* collector = BIO_new(method);
  if (collector == nullptr) return;
  // The SSL drops its reference to the socket's BIO when it takes the collector (SSL_set_fd
  // gave it one as its read BIO and one as its write BIO): this one keeps it alive until
  // the socket is handed back.
  if (BIO_up_ref(socket) != 1) {
    BIO_free(collector);
    return;
  }
  SSL_set0_wbio(ssl, collector);
  socket_ = socket;
  collector_ = collector;
}

RecordSealer::~RecordSealer() {
  if (collector_ == nullptr) return;
  SSL_set0_wbio(ssl_, socket_);  // frees the collector; the SSL takes this reference back
}

bool RecordSealer::Seal(std::string_view data, std::string& out) {
  if (collector_ == nullptr) return false;
  BIO_set_data(collector_, &out);
  bool ok = true;
  for (size_t done = 0; done < data.size();) {
    ClearErrors();
    size_t n = 0;
    // One record per call (the server's contexts allow partial writes); the collector
    // takes every byte, so nothing waits for the socket here.
    if (SSL_write_ex(ssl_, data.data() + done, data.size() - done, &n) != 1) {
      ok = false;
      break;
    }
    done += n;
  }
  BIO_set_data(collector_, nullptr);
  if (!ok) ERR_clear_error();
  return ok;
}

}  // namespace cohort::tls
