// Copyright tollgate authors.
#include "tests/support/tls_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

namespace tollgate::testing {
namespace {

std::string LastError(const char* fallback) {
  const unsigned long error = ERR_get_error();
  ERR_clear_error();
  if (error == 0) return fallback;
  const char* reason = ERR_reason_error_string(error);
  return reason != nullptr ? reason : fallback;
}

std::string SerialOf(X509* certificate) {
  BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr);
  char* hex = BN_bn2hex(number);
  std::string serial(hex);
  OPENSSL_free(hex);
  BN_free(number);
  return serial;
}

std::string SubjectOf(X509* certificate) {
  BIO* bio = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(bio, X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string subject(data, static_cast<size_t>(size));
  BIO_free(bio);
  return subject;
}

int Connect(int port, std::chrono::milliseconds timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval bound{};
  bound.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  bound.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads exactly `length` bytes; false on an error, a timeout or the end of the stream.
bool ReadExactly(SSL* ssl, unsigned char* out, int length, std::string& error) {
  int got = 0;
  while (got < length) {
    const int n = SSL_read(ssl, out + got, length - got);
    if (n <= 0) {
      const int code = SSL_get_error(ssl, n);
      error = code == SSL_ERROR_ZERO_RETURN ? "closed"
              : code == SSL_ERROR_SYSCALL   ? "closed or timed out"
                                            : LastError("read failed");
      return false;
    }
    got += n;
  }
  return true;
}

}  // namespace

TlsProbe ProbeTls(int port, const TlsClientOptions& options) {
  TlsProbe probe;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                            &SSL_CTX_free);
  SSL_CTX* ctx = context.get();
  if (options.max_version != 0) SSL_CTX_set_max_proto_version(ctx, options.max_version);
  if (!options.ca_path.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, options.ca_path.c_str(), nullptr) != 1) {
      probe.error = "cannot load " + options.ca_path;
      return probe;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  if (!options.cert_path.empty() &&
      (SSL_CTX_use_certificate_chain_file(ctx, options.cert_path.c_str()) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx, options.key_path.c_str(), SSL_FILETYPE_PEM) != 1)) {
    probe.error = "cannot load " + options.cert_path;
    return probe;
  }
  if (!options.alpn.empty()) {
    std::string wire;
    for (const std::string& protocol : options.alpn) {
      wire.push_back(static_cast<char>(protocol.size()));
      wire += protocol;
    }
    SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(wire.data()),
                            static_cast<unsigned int>(wire.size()));
  }
  const int fd = Connect(port, options.timeout);
  if (fd < 0) {
    probe.error = "cannot connect";
    return probe;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> connection(SSL_new(ctx), &SSL_free);
  SSL* ssl = connection.get();
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, options.server_name.c_str());
  if (!options.ca_path.empty()) SSL_set1_host(ssl, options.server_name.c_str());
  if (SSL_connect(ssl) != 1) {
    probe.error = LastError("handshake failed");
    close(fd);
    return probe;
  }
  probe.handshake = true;
  const unsigned char* selected = nullptr;
  unsigned int selected_length = 0;
  SSL_get0_alpn_selected(ssl, &selected, &selected_length);
  probe.alpn.assign(reinterpret_cast<const char*>(selected), selected_length);
  if (X509* served = SSL_get1_peer_certificate(ssl)) {
    probe.serial = SerialOf(served);
    probe.subject = SubjectOf(served);
    X509_free(served);
  }
  static constexpr char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
      "\x00\x00\x00\x04\x00\x00\x00\x00\x00";  // an empty SETTINGS frame
  if (SSL_write(ssl, kPreface, sizeof kPreface - 1) <= 0) {
    probe.error = LastError("write failed");
  } else {
    unsigned char header[9];
    if (ReadExactly(ssl, header, sizeof header, probe.error)) {
      probe.served = header[3] == 0x04;  // SETTINGS
      if (!probe.served) probe.error = "the first frame is not SETTINGS";
    }
  }
  close(fd);
  return probe;
}

std::string CertificateSerial(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return "";
  X509* certificate = PEM_read_X509(file, nullptr, nullptr, nullptr);
  std::fclose(file);
  if (certificate == nullptr) return "";
  std::string serial = SerialOf(certificate);
  X509_free(certificate);
  return serial;
}

}  // namespace tollgate::testing
