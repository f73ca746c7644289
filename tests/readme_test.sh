#!/usr/bin/env bash
# The README's "Five minutes" requests do what the README says: its curl block runs as written
# against a real `tollgate serve --config examples/tiffin.yaml` (the server `make run` starts,
# on a free port instead of 8080), and every output line the block shows in a comment
# ("# 200 200 200 429 429", the headers and JSON of the first reply) is printed, in that order.
#
#   bash tests/readme_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

BUILD=$(cd "${1:?usage: readme_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE=$(cd "${2:?usage: readme_test.sh BUILD_DIR SOURCE_DIR}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/readme_test.XXXXXX")
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

: >"$WORK/serve.log"  # before the server's shell opens it: the first read below must find it
"$BUILD/tollgate" serve --config "$SOURCE/examples/tiffin.yaml" --http 127.0.0.1:0 \
  --grpc 127.0.0.1:0 >"$WORK/serve.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 1 200); do
  port=$(sed -n 's/.*listening http=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/serve.log")
  [ -n "$port" ] && break
  sleep 0.05
done
if [ -z "$port" ]; then
  echo "FAIL: tollgate serve did not start:"
  cat "$WORK/serve.log"
  exit 1
fi

# The curl block of "## Five minutes": the first sh block that sends a request.
python3 - "$SOURCE/README.md" "$WORK" "$port" <<'EOF'
import pathlib, re, sys

readme, work, port = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2]), sys.argv[3]
section = readme.split("## Five minutes", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
block = next(b for b in blocks if "curl" in b)
lines = block.splitlines()
# Expected output: comment lines right after a command line or another expected line.
# Comments after a blank line (or at the start) describe the next command instead.
expected, previous, previous_is_output = [], "", False
for line in lines:
    is_output = line.startswith("# ") and previous.strip() != "" and (
        not previous.startswith("#") or previous_is_output)
    if is_output:
        expected.append(line[2:])
    previous, previous_is_output = line, is_output
script = block.replace("localhost:8080", f"127.0.0.1:{port}")
(work / "block.sh").write_text("set -euo pipefail\n" + script)
(work / "expected.txt").write_text("\n".join(expected) + "\n")
if len(expected) < 3:
    sys.exit(f"FAIL: found only {len(expected)} expected output lines in the README block")
EOF

bash "$WORK/block.sh" >"$WORK/output.txt" 2>"$WORK/stderr.txt" || {
  echo "FAIL: the README's block exited non-zero:"
  cat "$WORK/stderr.txt"
  exit 1
}

python3 - "$WORK" <<'EOF'
import pathlib, sys

work = pathlib.Path(sys.argv[1])
expected = (work / "expected.txt").read_text().splitlines()
output = [line.replace("\r", "").rstrip() for line in (work / "output.txt").read_text().splitlines()]
at = 0
for line in expected:
    while at < len(output) and output[at] != line.rstrip():
        at += 1
    if at == len(output):
        print(f"FAIL: the README shows this output line, which the commands did not print "
              f"(in this order):\n  {line}\nThey printed:")
        print("\n".join("  " + l for l in output))
        sys.exit(1)
    at += 1
print(f"ok: {len(expected)} output lines of the README's Five minutes block, in order")
EOF
