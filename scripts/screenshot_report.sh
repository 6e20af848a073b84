#!/usr/bin/env bash
# Screenshot an oomvet report.html in headless Chromium (Debian's `chromium`
# package), to check by eye that the charts render inline with nothing else.
#   usage: scripts/screenshot_report.sh REPORT_HTML OUT_PNG [WIDTH,HEIGHT]
# Offline on purpose: every network-touching Chromium feature is switched off,
# and the report itself needs nothing but its own file.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 REPORT_HTML OUT_PNG [WIDTH,HEIGHT]" >&2
    exit 2
fi
html=$1
out=$2
size=${3:-1200,2400}

if [ ! -f "$html" ]; then
    echo "$0: no such file: $html" >&2
    exit 2
fi
browser=${CHROMIUM:-}
if [ -z "$browser" ]; then
    for name in chromium chromium-browser google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then browser=$(command -v "$name"); break; fi
    done
fi
if [ -z "$browser" ]; then
    echo "$0: chromium not found (apt-get install -y chromium, or set CHROMIUM=/path/to/chrome)" >&2
    exit 2
fi

html_abs=$(cd "$(dirname "$html")" && pwd)/$(basename "$html")
out_dir=$(cd "$(dirname "$out")" && pwd)
out_abs=$out_dir/$(basename "$out")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

# chromium writes its own chatter to stderr; keep it out of the way unless it fails
if ! timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --hide-scrollbars \
        --user-data-dir="$profile" --screenshot="$out_abs" --window-size="$size" \
        "file://$html_abs" >"$profile/log" 2>&1; then
    cat "$profile/log" >&2
    echo "$0: chromium failed" >&2
    exit 1
fi
if [ ! -s "$out_abs" ]; then
    cat "$profile/log" >&2
    echo "$0: chromium wrote no screenshot" >&2
    exit 1
fi
echo "$out_abs"
