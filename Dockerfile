# tollgate's image: Debian bookworm, the binary built in a first stage, run as an
# unprivileged user. /bin/ratelimit is linked to tollgate, so Envoy Gateway can run this
# image in envoyproxy/ratelimit's place (docs/envoy-gateway.md).
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 -p 8081:8081 tollgate    # examples/tiffin.yaml, in memory
FROM debian:bookworm-slim AS build
WORKDIR /src
COPY . .
# The packages the binary needs to build (scripts/bootstrap run), then the binary alone.
RUN scripts/bootstrap run \
 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTOLLGATE_BUILD_TESTS=OFF -DTOLLGATE_BUILD_BENCH=OFF \
 && cmake --build build --target tollgate_cli

FROM debian:bookworm-slim
COPY deploy/docker/install-runtime /usr/local/share/tollgate/install-runtime
COPY --from=build /src/build/tollgate /tmp/tollgate
# The runtime libraries, /usr/local/bin/tollgate, /bin/ratelimit and the user (the same
# script tests/docker_install_test.sh runs).
RUN /usr/local/share/tollgate/install-runtime /tmp/tollgate / && rm /tmp/tollgate
COPY examples/tiffin.yaml /etc/tollgate/tollgate.yaml
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.yaml", "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081"]
