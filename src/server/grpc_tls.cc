// Copyright tollgate authors.
#include "src/server/grpc_tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "src/core/absl_view.h"

namespace tollgate::server {
namespace {

namespace ssl = boost::asio::ssl;

// Larger than any certificate bundle; a bound on what a wrong path (a log, a device) reads.
constexpr size_t kMaxFileBytes = 1024 * 1024;
// Sessions resumed from tickets or the cache must have been made by this service.
constexpr char kSessionIdContext[] = "tollgate-grpc";

struct X509Free {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
using X509Pointer = std::unique_ptr<X509, X509Free>;
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPointer = std::unique_ptr<BIO, BioFree>;
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using KeyPointer = std::unique_ptr<EVP_PKEY, KeyFree>;

// What the files hold, read once per load: what is checked is what is used.
struct FileContents {
  std::string cert;
  std::string key;
  std::string client_ca;
  // Key material leaves memory with the load that read it.
  ~FileContents() { OPENSSL_cleanse(key.data(), key.size()); }
};

absl::Status FileError(std::string_view flag, const std::string& path, std::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat(AbslView(flag), " ", path, ": ", AbslView(what)));
}

// The file's bytes, read into a string sized from fstat, so that no reallocation leaves a
// copy of a private key behind in freed memory (unless the file grows while it is read).
absl::StatusOr<std::string> ReadFile(std::string_view flag, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(flag, path, absl::StrCat("cannot read it: ", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) == 0 && info.st_size > static_cast<off_t>(kMaxFileBytes)) {
    ::close(fd);
    return FileError(flag, path, absl::StrCat("larger than ", kMaxFileBytes, " bytes"));
  }
  // Room for the size stat gives and one byte more, to see the end of the file in one pass;
  // a file that grew meanwhile gets room up to the bound.
  std::string contents(std::min<size_t>(static_cast<size_t>(info.st_size), kMaxFileBytes) + 1,
                       '\0');
  size_t size = 0;
  for (;;) {
    if (size == contents.size()) {
      if (size > kMaxFileBytes) break;
      contents.resize(kMaxFileBytes + 1);
    }
    const ssize_t got = ::read(fd, contents.data() + size, contents.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      return FileError(flag, path, absl::StrCat("cannot read it: ", std::strerror(error)));
    }
    if (got == 0) break;
    size += static_cast<size_t>(got);
  }
  ::close(fd);
  if (size > kMaxFileBytes) {
    return FileError(flag, path, absl::StrCat("larger than ", kMaxFileBytes, " bytes"));
  }
  contents.resize(size);
  return contents;
}

absl::StatusOr<FileContents> ReadFiles(const GrpcTlsFiles& files) {
  FileContents contents;
  absl::StatusOr<std::string> cert = ReadFile("--grpc-tls-cert", files.cert_path);
  if (!cert.ok()) return cert.status();
  contents.cert = *std::move(cert);
  absl::StatusOr<std::string> key = ReadFile("--grpc-tls-key", files.key_path);
  if (!key.ok()) return key.status();
  contents.key = *std::move(key);
  if (!files.client_ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadFile("--grpc-tls-client-ca", files.client_ca_path);
    if (!ca.ok()) return ca.status();
    contents.client_ca = *std::move(ca);
  }
  return contents;
}

std::array<uint8_t, 32> DigestOf(const FileContents& contents) {
  std::array<uint8_t, 32> digest{};
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  // Each part after its length, so that bytes moving between files change the digest.
  for (const std::string* part : {&contents.cert, &contents.key, &contents.client_ca}) {
    const uint64_t size = part->size();
    EVP_DigestUpdate(context, &size, sizeof size);
    EVP_DigestUpdate(context, part->data(), part->size());
  }
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest.data(), &length);
  EVP_MD_CTX_free(context);
  return digest;
}

BioPointer MemoryBio(std::string_view bytes) {
  return BioPointer(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// Every certificate of a PEM bundle, in order; empty when it holds none.
std::vector<X509Pointer> ReadCertificates(std::string_view pem) {
  std::vector<X509Pointer> certificates;
  BioPointer bio = MemoryBio(pem);
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  return certificates;
}

// An encrypted key is refused rather than prompted for on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

std::string DescribeCertificate(X509* certificate) {
  BioPointer bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  BIO_puts(bio.get(), ", valid until ");
  ASN1_TIME_print(bio.get(), X509_get0_notAfter(certificate));
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

bool CertificateHasSan(X509* certificate, std::string_view name) {
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return false;
  bool found = false;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && !found; ++i) {
    const GENERAL_NAME* entry = sk_GENERAL_NAME_value(names, i);
    if (entry->type != GEN_DNS && entry->type != GEN_URI) continue;
    const ASN1_IA5STRING* value =
        entry->type == GEN_DNS ? entry->d.dNSName : entry->d.uniformResourceIdentifier;
    const std::string_view text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                                static_cast<size_t>(ASN1_STRING_length(value)));
    found = entry->type == GEN_DNS ? absl::EqualsIgnoreCase(AbslView(text), AbslView(name))
                                   : text == name;
  }
  GENERAL_NAMES_free(names);
  return found;
}

int SelectAlpn(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
               unsigned int in_length, void*) {
  const std::optional<size_t> h2 =
      FindH2InAlpnList(std::string_view(reinterpret_cast<const char*>(in), in_length));
  if (!h2.has_value()) return SSL_TLSEXT_ERR_ALERT_FATAL;  // no_application_protocol
  *out = in + *h2 + 1;
  *out_length = in[*h2];
  return SSL_TLSEXT_ERR_OK;
}

absl::Status CheckFilesGoTogether(const GrpcTlsFiles& files) {
  if (!files.cert_path.empty() && files.key_path.empty()) {
    return absl::InvalidArgumentError("--grpc-tls-cert needs --grpc-tls-key (its private key)");
  }
  if (files.cert_path.empty()) {
    const char* without = !files.key_path.empty()         ? "--grpc-tls-key"
                          : !files.client_ca_path.empty() ? "--grpc-tls-client-ca"
                                                          : "--grpc-tls-client-san";
    return absl::InvalidArgumentError(
        absl::StrCat(without, " needs --grpc-tls-cert (TLS on the gRPC port)"));
  }
  if (!files.client_san.empty() && files.client_ca_path.empty()) {
    return absl::InvalidArgumentError(
        "--grpc-tls-client-san needs --grpc-tls-client-ca (client certificates are checked "
        "only when a CA is given)");
  }
  return absl::OkStatus();
}

// The context `contents` make, or FailedPrecondition naming the file at fault. Logs a warning
// for a certificate outside its validity period (clients refuse it; the service still
// starts, so that a fixed file can be reloaded).
absl::StatusOr<std::shared_ptr<ssl::context>> BuildContext(const GrpcTlsFiles& files,
                                                           const FileContents& contents) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(
      native, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_session_id_context(native, reinterpret_cast<const unsigned char*>(kSessionIdContext),
                                 sizeof kSessionIdContext - 1);
  SSL_CTX_set_alpn_select_cb(native, &SelectAlpn, nullptr);

  std::vector<X509Pointer> chain = ReadCertificates(contents.cert);
  if (chain.empty()) {
    return FileError("--grpc-tls-cert", files.cert_path, "holds no PEM certificate");
  }
  if (SSL_CTX_use_certificate(native, chain.front().get()) != 1) {
    ERR_clear_error();
    return FileError(
        "--grpc-tls-cert", files.cert_path,
        "OpenSSL refuses its certificate (a key too small for its security level, or an "
        "unsupported algorithm)");
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(native, chain[i].get()) != 1) {
      ERR_clear_error();
      return FileError("--grpc-tls-cert", files.cert_path,
                       absl::StrCat("OpenSSL refuses certificate ", i + 1, " of its chain"));
    }
  }
  if (X509_cmp_current_time(X509_get0_notAfter(chain.front().get())) < 0 ||
      X509_cmp_current_time(X509_get0_notBefore(chain.front().get())) > 0) {
    spdlog::warn("grpc tls: the certificate in {} is not valid now ({}); clients will refuse it",
                 files.cert_path, DescribeCertificate(chain.front().get()));
  }

  BioPointer key_bio = MemoryBio(contents.key);
  KeyPointer key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, &NoPassphrase, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return FileError("--grpc-tls-key", files.key_path,
                     "holds no PEM private key (an encrypted key is not supported)");
  }
  if (SSL_CTX_use_PrivateKey(native, key.get()) != 1 || SSL_CTX_check_private_key(native) != 1) {
    ERR_clear_error();
    return FileError("--grpc-tls-key", files.key_path,
                     absl::StrCat("does not match the certificate in ", files.cert_path));
  }

  if (!files.client_ca_path.empty()) {
    std::vector<X509Pointer> authorities = ReadCertificates(contents.client_ca);
    if (authorities.empty()) {
      return FileError("--grpc-tls-client-ca", files.client_ca_path, "holds no PEM certificate");
    }
    X509_STORE* store = SSL_CTX_get_cert_store(native);
    for (const X509Pointer& authority : authorities) {
      // Also named in the certificate request, so that a client holding several picks one.
      if (X509_STORE_add_cert(store, authority.get()) != 1 ||
          SSL_CTX_add_client_CA(native, authority.get()) != 1) {
        ERR_clear_error();
        return FileError("--grpc-tls-client-ca", files.client_ca_path,
                         "a certificate in it cannot be used");
      }
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    if (!files.client_san.empty()) {
      context->set_verify_callback(
          [san = files.client_san](bool preverified, ssl::verify_context& verify) {
            X509_STORE_CTX* store_context = verify.native_handle();
            if (!preverified || X509_STORE_CTX_get_error_depth(store_context) != 0) {
              return preverified;
            }
            if (CertificateHasSan(X509_STORE_CTX_get_current_cert(store_context), san)) {
              return true;
            }
            X509_STORE_CTX_set_error(store_context, X509_V_ERR_APPLICATION_VERIFICATION);
            return false;
          });
    }
  } else {
    context->set_verify_mode(ssl::verify_none);
  }
  return context;
}

std::string DescribeLoaded(ssl::context& context) {
  X509* leaf = SSL_CTX_get0_certificate(context.native_handle());
  return leaf == nullptr ? std::string() : DescribeCertificate(leaf);
}

}  // namespace

absl::StatusOr<std::shared_ptr<GrpcTls>> GrpcTls::Create(GrpcTlsFiles files) {
  if (absl::Status usage = CheckFilesGoTogether(files); !usage.ok()) return usage;
  std::shared_ptr<GrpcTls> tls(new GrpcTls(std::move(files)));
  absl::StatusOr<FileContents> contents = ReadFiles(tls->files_);
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::shared_ptr<ssl::context>> context = BuildContext(tls->files_, *contents);
  if (!context.ok()) return context.status();
  {
    absl::MutexLock lock(&tls->reload_mu_);
    tls->digest_ = DigestOf(*contents);
  }
  spdlog::info("grpc tls: certificate {}", DescribeLoaded(**context));
  absl::MutexLock lock(&tls->mu_);
  tls->context_ = *std::move(context);
  return tls;
}

GrpcTls::~GrpcTls() = default;

std::shared_ptr<ssl::context> GrpcTls::context() const {
  absl::MutexLock lock(&mu_);
  return context_;
}

absl::Status GrpcTls::Reload(std::string_view why) {
  absl::MutexLock reload_lock(&reload_mu_);
  absl::StatusOr<FileContents> contents = ReadFiles(files_);
  if (contents.ok()) digest_ = DigestOf(*contents);
  absl::StatusOr<std::shared_ptr<ssl::context>> context =
      contents.ok() ? BuildContext(files_, *contents)
                    : absl::StatusOr<std::shared_ptr<ssl::context>>(contents.status());
  if (!context.ok()) {
    counters_.reloads_failed.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("grpc tls: reload ({}) refused, the old certificates keep serving: {}", why,
                  std::string(context.status().message()));
    return context.status();
  }
  counters_.reloads_succeeded.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("grpc tls: reloaded ({}): certificate {}", why, DescribeLoaded(**context));
  absl::MutexLock lock(&mu_);
  context_ = *std::move(context);
  return absl::OkStatus();
}

std::optional<absl::Status> GrpcTls::ReloadIfChanged() {
  absl::StatusOr<FileContents> contents = ReadFiles(files_);
  {
    absl::MutexLock lock(&reload_mu_);
    // A file that cannot be read now is a change only once it can be (a rotation that
    // replaces files one by one passes through such moments).
    if (!contents.ok() || digest_ == DigestOf(*contents)) return std::nullopt;
  }
  return Reload("a TLS file changed");
}

std::optional<size_t> FindH2InAlpnList(std::string_view protocols) {
  size_t at = 0;
  while (at < protocols.size()) {
    const size_t length = static_cast<unsigned char>(protocols[at]);
    if (length == 0 || at + 1 + length > protocols.size()) return std::nullopt;
    if (protocols.substr(at + 1, length) == "h2") return at;
    at += 1 + length;
  }
  return std::nullopt;
}

bool PemCertificateHasSan(std::string_view certificate, std::string_view name) {
  std::vector<X509Pointer> certificates = ReadCertificates(certificate);
  return !certificates.empty() && CertificateHasSan(certificates.front().get(), name);
}

}  // namespace tollgate::server
