#!/usr/bin/env bash
# Python grpcio (Debian's python3-grpcio) against `tollgate serve`: tests/grpc_interop.py.
# Usage: grpc_interop_test.sh BUILD_DIR [SOURCE_DIR]
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=${2:-$(cd "$(dirname "$0")/.." && pwd)}
# Debian's python3 (where python3-grpcio lives), not a python3 earlier on PATH.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
exec timeout 120 "$python" "$source_dir/tests/grpc_interop.py" "$build_dir"
