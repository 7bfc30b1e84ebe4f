#!/usr/bin/env bash
# Smoke-test the Linux installers that packaging/build_linux.sh made:
#  1. unpack the .tar.gz into a temporary folder and run the bundled
#     `gambit --self-test` with no display (QT_QPA_PLATFORM=offscreen), cold
#     (the bundle evicted from the page cache) and warm, plus
#     `gambit --about`, `gambit-cli generate`, `gambit-worker --help` (it
#     starts and imports llama.cpp) and the GUI for a few seconds;
#  2. `dpkg -i` the .deb (then `apt-get install -f` if dependencies are
#     missing), run `/usr/bin/gambit --self-test` and `/usr/bin/gambit-worker
#     --help`, check the desktop entry and
#     icon, and `dpkg -r` it again.
# Step 2 needs root (or sudo); skip it with --no-deb.
#
#     packaging/check_linux.sh [--no-deb] [--no-gui] [DIST_DIR]
#
# GAMBIT_SELFTEST_ARGS adds self-test options, e.g. "--threads 1".
# Exit status 0 when every check passed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="$ROOT/dist"
DO_DEB=1
DO_GUI=1
for arg in "$@"; do
    case "$arg" in
        --no-deb) DO_DEB=0 ;;
        --no-gui) DO_GUI=0 ;;
        -*)
            echo "unknown option: $arg" >&2
            exit 2
            ;;
        *) DIST="$(cd "$arg" && pwd)" ;;
    esac
done

VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/app/gambit/__init__.py")"
TARBALL="$DIST/gambit-$VERSION-linux-$(uname -m).tar.gz"
DEB_ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
DEB="$DIST/gambit_${VERSION}_${DEB_ARCH}.deb"
read -r -a SELFTEST_ARGS <<<"${GAMBIT_SELFTEST_ARGS:-}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export QT_QPA_PLATFORM=offscreen
unset DISPLAY WAYLAND_DISPLAY

FAILED=0
pass() { printf 'PASS  %s\n' "$*"; }
fail() {
    printf 'FAIL  %s\n' "$*"
    FAILED=1
}
step() { printf '\n== %s\n' "$*"; }

# run_selftest LABEL EXE: the self-test in a fresh GAMBIT_HOME, timed from outside too.
run_selftest() {
    local label="$1" exe="$2" home="$TMP/home-$1" out="$TMP/selftest-$1.txt" t0 t1 rc=0
    t0="$(date +%s.%N)"
    GAMBIT_HOME="$home" "$exe" --self-test "${SELFTEST_ARGS[@]}" >"$out" 2>&1 || rc=$?
    t1="$(date +%s.%N)"
    sed 's/^/    /' "$out"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "    (wall time of the whole self-test: %.2f s)\n", b - a }'
    if [[ $rc == 0 ]] && grep -q '^result: PASS' "$out"; then
        pass "$label: self-test"
    else
        fail "$label: self-test (exit status $rc)"
    fi
    if grep -q '^bundle: frozen' "$out"; then
        pass "$label: runs from the frozen bundle"
    else
        fail "$label: self-test did not run from the frozen bundle"
    fi
    if grep -q "^model: .*/_internal/models/" "$out"; then
        pass "$label: uses the model shipped in the bundle"
    else
        fail "$label: does not use the bundled model"
    fi
    if grep -q '^rpc workers: yes' "$out"; then
        pass "$label: llama.cpp has the RPC backend (gambit-worker, --rpc)"
    else
        fail "$label: llama.cpp lacks the RPC backend (build with -DGGML_RPC=ON)"
    fi
}

# check_worker_help EXE LABEL: `gambit-worker --help` starts the bundled worker,
# which imports llama.cpp before argparse answers, so a missing library shows.
check_worker_help() {
    local exe="$1" label="$2" out="$TMP/worker-help-$2.txt"
    if "$exe" --help >"$out" 2>&1 && grep -q "usage: gambit-worker" "$out"; then
        pass "$label: gambit-worker --help"
    else
        fail "$label: gambit-worker --help"
        cat "$out"
    fi
}

# evict_page_cache DIR: drop DIR's files from the page cache, so the next start
# reads the bundle from disk as after a reboot (a true cold start).
evict_page_cache() {
    command -v python3 >/dev/null || { echo "    (no python3: cannot evict the page cache)"; return 0; }
    python3 - "$1" <<'EOF'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(root, name)
        if os.path.islink(path):
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # only clean pages can be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
EOF
}

# ------------------------------------------------------------------ tarball
step "tarball: $TARBALL"
[[ -f "$TARBALL" ]] || { echo "missing $TARBALL: run packaging/build_linux.sh" >&2; exit 1; }
tar -C "$TMP" -xzf "$TARBALL"
APP="$TMP/gambit-$VERSION-linux-$(uname -m)"
for f in gambit gambit-cli gambit-worker gambit.desktop icons/gambit-256.png icons/gambit.svg; do
    if [[ -e "$APP/$f" ]]; then pass "tarball has $f"; else fail "tarball lacks $f"; fi
done
step "self-test, cold: the bundle's files evicted from the page cache"
evict_page_cache "$APP"
run_selftest tarball-cold "$APP/gambit"
step "self-test, warm"
run_selftest tarball "$APP/gambit"

if GAMBIT_HOME="$TMP/home-about" "$APP/gambit" --about >"$TMP/about.txt" 2>&1 \
    && grep -q "^gambit: $VERSION" "$TMP/about.txt"; then
    pass "gambit --about"
else
    fail "gambit --about"
    cat "$TMP/about.txt"
fi
if GAMBIT_HOME="$TMP/home-cli" "$APP/gambit-cli" generate --temp 0 --max-tokens 8 \
    --threads 1 "Say hi" >"$TMP/cli.txt" 2>&1; then
    pass "gambit-cli generate: $(head -c 60 "$TMP/cli.txt" | tr '\n' ' ')"
else
    fail "gambit-cli generate"
    cat "$TMP/cli.txt"
fi
check_worker_help "$APP/gambit-worker" tarball

if [[ $DO_GUI == 1 ]]; then
    # The window on the offscreen platform for a while: still running at the
    # end (timeout's status 124) and no crash report means it started.
    rc=0
    GAMBIT_HOME="$TMP/home-gui" timeout 20 "$APP/gambit" >"$TMP/gui.txt" 2>&1 || rc=$?
    if [[ $rc == 124 ]] && ! ls "$TMP/home-gui/logs/crashes"/crash-*.txt >/dev/null 2>&1; then
        pass "GUI starts and keeps running (offscreen, 20 s)"
    else
        fail "GUI (exit status $rc)"
        cat "$TMP/gui.txt"
        cat "$TMP/home-gui/logs/crashes"/crash-*.txt 2>/dev/null || true
    fi
fi

# ------------------------------------------------------------------ .deb
if [[ $DO_DEB == 1 ]]; then
    step "deb: $DEB"
    [[ -f "$DEB" ]] || { echo "missing $DEB: run packaging/build_linux.sh" >&2; exit 1; }
    SUDO=()
    if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null || { echo "the .deb check needs root or sudo" >&2; exit 1; }
        SUDO=(sudo)
    fi
    dpkg-deb --info "$DEB" | sed -n 's/^ \(Package\|Version\|Depends\|Installed-Size\):/    \1:/p'
    if "${SUDO[@]}" dpkg -i "$DEB"; then
        pass "dpkg -i"
    else
        echo "    dependencies missing: apt-get install -f"
        if "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -f -y -q; then
            pass "dpkg -i, then apt-get install -f"
        else
            fail "dpkg -i / apt-get install -f"
        fi
    fi
    if [[ -x /usr/bin/gambit ]]; then
        run_selftest deb /usr/bin/gambit
        check_worker_help /usr/bin/gambit-worker deb
        if command -v desktop-file-validate >/dev/null; then
            if desktop-file-validate /usr/share/applications/gambit.desktop; then
                pass "desktop entry is valid"
            else
                fail "desktop entry"
            fi
        fi
        if [[ -f /usr/share/icons/hicolor/256x256/apps/gambit.png ]]; then
            pass "icon installed"
        else
            fail "icon not installed"
        fi
    else
        fail "/usr/bin/gambit is not installed"
    fi
    if "${SUDO[@]}" dpkg -r gambit >/dev/null && [[ ! -e /opt/gambit/gambit && ! -e /usr/bin/gambit ]]; then
        pass "dpkg -r removes it"
    else
        fail "dpkg -r"
    fi
fi

echo
if [[ $FAILED == 0 ]]; then echo "All checks passed."; else echo "Some checks FAILED."; fi
exit "$FAILED"
