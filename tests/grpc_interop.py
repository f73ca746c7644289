"""Python grpcio against `tollgate serve`: unary calls, deadlines, codes, health; over
plaintext (h2c), then over mTLS (grpcio presenting a client certificate).
Usage: grpc_interop.py BUILD_DIR. Exits non-zero on the first failed check."""

import sys
import tempfile

import grpc

import grpc_support as g


def expect(condition, what):
    if not condition:
        raise AssertionError(what)
    print("ok:", what)


def code_of(call):
    try:
        call()
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def check(build_dir, certificates):
    """Every check against one server: plaintext, or mTLS with `certificates`."""
    print("== %s" % ("mTLS" if certificates else "plaintext"))
    serve = g.Serve(build_dir, tls=certificates)
    try:
        with g.channel(serve.grpc_address, certificates) as channel:
            should = g.unary(channel, g.SHOULD_RATE_LIMIT)
            request = g.rate_limit_request("tiffin", [[("user", "alice")]])
            for remaining in (2, 1, 0):
                response = should(request, timeout=10)
                expect(g.overall_code(response) == g.CODE_OK and
                       g.statuses(response) == [(g.CODE_OK, remaining)],
                       "call answered OK with %d remaining" % remaining)
            expect(g.overall_code(should(request, timeout=10)) == g.CODE_OVER_LIMIT,
                   "the fourth call is OVER_LIMIT")
            expect(g.statuses(should(g.rate_limit_request("other", [[("user", "x")]]),
                                     timeout=10)) == [],
                   "an unknown domain is OK with no statuses")

            # grpc-timeout as grpcio writes it is understood (a server-side DEADLINE_EXCEEDED
            # needs a handler slower than the deadline: tests/rls_grpc_test.cc).
            expect(g.overall_code(should(g.rate_limit_request("tiffin", [[("ip", "1")]]),
                                         timeout=0.5)) == g.CODE_OK,
                   "a call with a 500 ms deadline is answered")
            for timeout in (0.05, 30, 3600 * 24 * 30):
                expect(g.overall_code(should(g.rate_limit_request("tiffin", [[("ip", "2")]]),
                                             timeout=timeout)) == g.CODE_OK,
                       "a call with a %s s deadline is answered" % timeout)

            expect(code_of(lambda: should(b"\xff\xff\xff\xff\x0f garbage", timeout=10)) ==
                   grpc.StatusCode.INVALID_ARGUMENT, "random bytes are INVALID_ARGUMENT")
            expect(code_of(lambda: should(g.rate_limit_request("tiffin", []), timeout=10)) ==
                   grpc.StatusCode.INVALID_ARGUMENT, "no descriptors is INVALID_ARGUMENT")
            big = g.rate_limit_request("tiffin", [[("user", "x" * (70 * 1024))]])
            expect(code_of(lambda: should(big, timeout=10)) ==
                   grpc.StatusCode.RESOURCE_EXHAUSTED,
                   "a message over --max-body-bytes is RESOURCE_EXHAUSTED")
            expect(code_of(lambda: g.unary(channel, "/no.Such/Method")(b"", timeout=10)) ==
                   grpc.StatusCode.UNIMPLEMENTED, "an unknown method is UNIMPLEMENTED")
            expect(code_of(lambda: should(request, timeout=10,
                                          compression=grpc.Compression.Gzip)) ==
                   grpc.StatusCode.UNIMPLEMENTED, "a gzip-compressed call is UNIMPLEMENTED")

            health = g.unary(channel, g.HEALTH_CHECK)
            for name in ("", "ratelimit"):
                expect(g.health_status(health(g.health_request(name), timeout=10)) == g.SERVING,
                       "health %r is SERVING" % name)
            expect(code_of(lambda: health(g.health_request("nope"), timeout=10)) ==
                   grpc.StatusCode.NOT_FOUND, "health of an unknown service is NOT_FOUND")
            watch = channel.unary_stream(g.HEALTH_WATCH, request_serializer=g.identity,
                                         response_deserializer=g.identity)
            expect(code_of(lambda: list(watch(b"", timeout=10))) ==
                   grpc.StatusCode.UNIMPLEMENTED, "Health/Watch is UNIMPLEMENTED")

            futures = [should.future(g.rate_limit_request("tiffin", [[("ip", str(i))]]),
                                     timeout=30) for i in range(300)]
            answers = [g.overall_code(f.result()) for f in futures]
            expect(answers == [g.CODE_OK] * 300, "300 calls in flight on one channel all OK")
        expect(serve.stop() == 0, "serve exits 0 on SIGTERM")
    finally:
        serve.stop()


def main(build_dir):
    check(build_dir, None)
    check(build_dir, g.Certificates(tempfile.mkdtemp(prefix="tollgate-interop-tls-")))


if __name__ == "__main__":
    main(sys.argv[1])
