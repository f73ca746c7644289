#!/usr/bin/env bash
# HTTP/2 floods against `tollgate serve`'s gRPC port (tests/grpc_flood.py): rapid reset,
# CONTINUATION, SETTINGS, WINDOW_UPDATE overflow, PING, random frames; over plaintext and
# over mTLS, with TLS handshake floods (silent connections, stalled ClientHellos, garbage).
# Usage: grpc_flood_test.sh BUILD_DIR [SOURCE_DIR]
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=${2:-$(cd "$(dirname "$0")/.." && pwd)}
python=/usr/bin/python3  # Debian's, with python3-grpcio
[ -x "$python" ] || python=python3
exec timeout 180 "$python" "$source_dir/tests/grpc_flood.py" "$build_dir"
