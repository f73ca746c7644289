"""Shared by the Python gRPC tests: start `tollgate serve` (plaintext or mTLS, with
certificates made here), hand-encode the few protobuf messages they send (field numbers from
proto/), and a grpcio client for them."""

import os
import re
import signal
import ssl
import subprocess
import tempfile
import time

import grpc

SHOULD_RATE_LIMIT = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"

# RateLimitResponse.Code (proto/envoy/service/ratelimit/v3/rls.proto)
CODE_OK = 1
CODE_OVER_LIMIT = 2
# HealthCheckResponse.ServingStatus
SERVING = 1
NOT_SERVING = 2

TIFFIN = """domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1000000}
"""


def varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_bytes(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def rate_limit_request(domain, descriptors, hits_addend=0):
    """descriptors: a list of lists of (key, value)."""
    out = field_bytes(1, domain.encode())
    for entries in descriptors:
        descriptor = b"".join(
            field_bytes(1, field_bytes(1, k.encode()) + field_bytes(2, v.encode()))
            for k, v in entries)
        out += field_bytes(2, descriptor)
    if hits_addend:
        out += field_varint(3, hits_addend)
    return out


def health_request(service):
    return field_bytes(1, service.encode()) if service else b""


def parse_fields(data):
    """{field number: [values]}: ints for varints, bytes for length-delimited."""
    fields = {}
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = read_varint(data, i)
        elif wire_type == 2:
            length, i = read_varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire_type == 5:
            value, i = data[i:i + 4], i + 4
        elif wire_type == 1:
            value, i = data[i:i + 8], i + 8
        else:
            raise ValueError("wire type %d" % wire_type)
        fields.setdefault(number, []).append(value)
    return fields


def read_varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def overall_code(response):
    return parse_fields(response).get(1, [0])[0]


def statuses(response):
    """[(code, limit_remaining)] of each DescriptorStatus."""
    result = []
    for status in parse_fields(response).get(2, []):
        fields = parse_fields(status)
        result.append((fields.get(1, [0])[0], fields.get(3, [0])[0]))
    return result


def health_status(response):
    return parse_fields(response).get(1, [0])[0]


def identity(x):
    return x


def unary(channel, path):
    return channel.unary_unary(path, request_serializer=identity,
                               response_deserializer=identity)


class Certificates:
    """A CA, a server certificate it signs for localhost and a client certificate it signs,
    made by the openssl command in `directory` (or only named there, with make=False). ECDSA
    P-256 keys: a handshake costs the server a few hundredths of a millisecond rather than
    RSA-2048's quarter (tests/grpc_tls_test.cc covers RSA), so that the handshakes of a test
    do not weigh on the latency it measures."""

    def __init__(self, directory, make=True):
        self.dir = directory
        self.ca = os.path.join(directory, "ca.pem")
        self.server_cert = os.path.join(directory, "server.pem")
        self.server_key = os.path.join(directory, "server.key")
        self.client_cert = os.path.join(directory, "client.pem")
        self.client_key = os.path.join(directory, "client.key")
        if make:
            self._make()

    def _run(self, *args):
        subprocess.run(["openssl", *args], check=True, cwd=self.dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _make(self):
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        self._run("req", "-x509", *key, "-days", "2", "-subj",
                  "/CN=tollgate-test-ca", "-keyout", "ca.key", "-out", "ca.pem")
        for name, extensions in (("server", "subjectAltName=DNS:localhost\n"),
                                 ("client", "extendedKeyUsage=clientAuth\n")):
            with open(os.path.join(self.dir, name + ".ext"), "w") as f:
                f.write(extensions)
            self._run("req", *key, "-subj", "/CN=localhost",
                      "-keyout", name + ".key", "-out", name + ".csr")
            self._run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                      "-CAcreateserial", "-days", "2", "-extfile", name + ".ext",
                      "-out", name + ".pem")

    def serve_flags(self):
        """serve's flags for mTLS: this server certificate, client certificates of this CA."""
        return ["--grpc-tls-cert", self.server_cert, "--grpc-tls-key", self.server_key,
                "--grpc-tls-client-ca", self.ca]

    def ssl_context(self):
        """A client context: trusts the CA, presents the client certificate, offers h2."""
        context = ssl.create_default_context(cafile=self.ca)
        context.load_cert_chain(self.client_cert, self.client_key)
        context.set_alpn_protocols(["h2"])
        return context

    def channel_credentials(self):
        def read(path):
            with open(path, "rb") as f:
                return f.read()
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca),
                                            private_key=read(self.client_key),
                                            certificate_chain=read(self.client_cert))


def channel(address, certificates=None):
    """A grpcio channel to `address`: plaintext, or TLS with `certificates`' client
    certificate (the server's certificate names localhost)."""
    if certificates is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, certificates.channel_credentials(),
                               options=[("grpc.ssl_target_name_override", "localhost")])


class Serve:
    """`tollgate serve` with the in-memory store on free loopback ports; with `tls`
    (Certificates), its gRPC port serves mTLS."""

    def __init__(self, build_dir, extra_args=(), config=TIFFIN, env=None, tls=None):
        self.tls = tls
        if tls is not None:
            extra_args = [*tls.serve_flags(), *extra_args]
        self.dir = tempfile.mkdtemp(prefix="tollgate-grpc-")
        path = os.path.join(self.dir, "tiffin.yaml")
        with open(path, "w") as f:
            f.write(config)
        self.log_path = os.path.join(self.dir, "serve.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [os.path.join(build_dir, "tollgate"), "serve", "--config", path,
             "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", *extra_args],
            stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.grpc_address = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.grpc_address is None:
            if self.process.poll() is not None:
                raise RuntimeError("tollgate serve exited: " + open(self.log_path).read())
            match = re.search(r"listening grpc=(\S+)", open(self.log_path).read())
            if match:
                self.grpc_address = match.group(1)
            else:
                time.sleep(0.05)
        if self.grpc_address is None:
            raise RuntimeError("tollgate serve did not start: " + open(self.log_path).read())
        self.port = int(self.grpc_address.rsplit(":", 1)[1])

    def rss_kib(self):
        with open("/proc/%d/status" % self.process.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        """SIGTERM; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode
