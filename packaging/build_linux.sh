#!/usr/bin/env bash
# Build Gambit's Linux installers from a clean clone:
#   dist/gambit-<version>-linux-<arch>.tar.gz   the app folder + gambit.desktop + icons
#   dist/gambit_<version>_<debarch>.deb         installs to /opt/gambit, /usr/bin/gambit
#                                               (and gambit-cli, gambit-worker)
#
# Needs: python3 (>= 3.10) with venv, a C/C++ compiler and CMake (llama-cpp-python
# is built from source), dpkg-deb for the .deb. Run from anywhere:
#     packaging/build_linux.sh
# Then smoke-test the results with packaging/check_linux.sh.
#
# Environment:
#   GAMBIT_BUILD_VENV   the build virtual environment (default build/venv-linux;
#                       reused when it exists, unless --clean)
#   CMAKE_ARGS          llama.cpp build flags (default -DGGML_NATIVE=OFF: portable
#                       x86-64 code with AVX2/FMA/F16C instead of this CPU's own
#                       instruction set; e.g. "-DGGML_NATIVE=OFF -DGGML_CUDA=on")
#   GAMBIT_NATIVE=1     keep whatever llama-cpp-python pip installs (usually a
#                       -march=native build from pip's cache): fast, not portable
#   PYINSTALLER_VERSION default 6.22.3
#   GAMBIT_BUNDLE_MODEL, GAMBIT_NO_MODEL   see packaging/gambit.spec
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CLEAN=0
for arg in "$@"; do
    case "$arg" in
        --clean) CLEAN=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' app/gambit/__init__.py)"
LLAMA_VERSION="$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)"
ARCH="$(uname -m)"
VENV="${GAMBIT_BUILD_VENV:-$ROOT/build/venv-linux}"
WORK="$ROOT/build/linux"
DIST="$ROOT/dist"
PYINSTALLER_VERSION="${PYINSTALLER_VERSION:-6.22.3}"
NAME="gambit-$VERSION-linux-$ARCH"
[[ -n "$VERSION" && -n "$LLAMA_VERSION" ]] || { echo "cannot read the versions" >&2; exit 1; }

step() { printf '\n== %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }
T0=$SECONDS

# ------------------------------------------------------------------ build venv
step "build environment: $VENV"
if [[ $CLEAN == 1 ]]; then
    rm -rf "$VENV" "$WORK"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip

# llama.cpp: a portable build unless told otherwise. pip's wheel cache does not
# key on CMAKE_ARGS, so build it uncached and remember which flags it has.
STAMP="$VENV/.gambit-llama-build"
if [[ "${GAMBIT_NATIVE:-0}" == 1 ]]; then
    WANT="pip default"
else
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_RPC=ON -DLLAVA_BUILD=OFF}"
    WANT="$LLAMA_VERSION $CMAKE_ARGS"
fi
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]]; then
    if [[ "${GAMBIT_NATIVE:-0}" != 1 ]]; then
        step "llama-cpp-python $LLAMA_VERSION from source, CMAKE_ARGS=$CMAKE_ARGS (minutes)"
        "$PY" -m pip install --quiet --force-reinstall --no-deps --no-cache-dir \
            --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_VERSION"
    fi
fi
step "Gambit and PyInstaller $PYINSTALLER_VERSION"
# Reinstall Gambit itself (same version, new dependencies?), then what it needs.
"$PY" -m pip install --quiet --force-reinstall --no-deps "$ROOT"
"$PY" -m pip install --quiet "$ROOT" "pyinstaller==$PYINSTALLER_VERSION"
printf '%s' "$WANT" >"$STAMP"
"$PY" -c 'import llama_cpp as ll; print("llama.cpp:", ll.llama_print_system_info().decode().strip())'

# ------------------------------------------------------------------ PyInstaller
step "PyInstaller"
BUNDLE_DIST="$WORK/dist"
rm -rf "$BUNDLE_DIST"
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$BUNDLE_DIST" --workpath "$WORK/pyinstaller" packaging/gambit.spec
BUNDLE="$BUNDLE_DIST/gambit"
[[ -x "$BUNDLE/gambit" ]] || { echo "PyInstaller made no $BUNDLE/gambit" >&2; exit 1; }

# ------------------------------------------------------------------ tarball
step "tarball"
mkdir -p "$DIST"
STAGE="$WORK/stage/$NAME"
rm -rf "$WORK/stage"
mkdir -p "$STAGE/icons"
cp -a "$BUNDLE/." "$STAGE/"
cp packaging/linux/gambit.desktop "$STAGE/"
cp resources/icons/gambit-*.png resources/icons/gambit.svg "$STAGE/icons/"
cp packaging/linux/install-desktop-entry.sh "$STAGE/"
cp LICENSE "$STAGE/" 2>/dev/null || true
TARBALL="$DIST/$NAME.tar.gz"
tar -C "$WORK/stage" -czf "$TARBALL" "$NAME"

# ------------------------------------------------------------------ .deb
step ".deb"
DEB_ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
PKG="$WORK/deb"
rm -rf "$PKG"
mkdir -p "$PKG/DEBIAN" "$PKG/opt" "$PKG/usr/bin" "$PKG/usr/share/applications" \
    "$PKG/usr/share/icons/hicolor/scalable/apps" "$PKG/usr/share/doc/gambit"
cp -a "$BUNDLE" "$PKG/opt/gambit"
ln -s /opt/gambit/gambit "$PKG/usr/bin/gambit"
ln -s /opt/gambit/gambit-cli "$PKG/usr/bin/gambit-cli"
ln -s /opt/gambit/gambit-worker "$PKG/usr/bin/gambit-worker"
cp packaging/linux/gambit.desktop "$PKG/usr/share/applications/gambit.desktop"
for png in resources/icons/gambit-*.png; do
    size="${png##*-}"
    size="${size%.png}"
    mkdir -p "$PKG/usr/share/icons/hicolor/${size}x${size}/apps"
    cp "$png" "$PKG/usr/share/icons/hicolor/${size}x${size}/apps/gambit.png"
done
cp resources/icons/gambit.svg "$PKG/usr/share/icons/hicolor/scalable/apps/gambit.svg"
cat >"$PKG/usr/share/doc/gambit/copyright" <<EOF
Gambit $VERSION: MIT License.
Bundles Python, Qt for Python (PySide6, LGPLv3), llama.cpp (MIT) via
llama-cpp-python (MIT), NumPy (BSD) and SmolLM2-135M-Instruct (Apache-2.0).
EOF

# Depends: the system libraries the bundle links to but does not carry,
# found with ldd and mapped to their packages on this (the build) system.
DEPENDS="$(packaging/linux/deb_depends.sh "$PKG/opt/gambit")"
INSTALLED_KB="$(du -sk "$PKG" | cut -f1)"
cat >"$PKG/DEBIAN/control" <<EOF
Package: gambit
Version: $VERSION
Section: utils
Priority: optional
Architecture: $DEB_ARCH
Maintainer: Gambit developers <gambit@users.noreply.github.com>
Installed-Size: $INSTALLED_KB
Depends: $DEPENDS
Homepage: https://github.com/gambit-chat/gambit
Description: local LLM chat made faster by speculative decoding
 Gambit chats with local GGUF language models through llama.cpp and speeds
 up generation with speculative decoding (a draft model or prompt lookup),
 showing live whether the speculation pays off. Ships with the small
 SmolLM2-135M-Instruct model so it works offline out of the box.
EOF
DEB="$DIST/gambit_${VERSION}_${DEB_ARCH}.deb"
dpkg-deb --root-owner-group --build "$PKG" "$DEB" >/dev/null

# ------------------------------------------------------------------ report
step "done in $((SECONDS - T0)) s"
echo "Depends: $DEPENDS"
printf '%-10s %s\n' "folder" "$(du -sh "$BUNDLE" | cut -f1)  $BUNDLE"
printf '%-10s %s\n' "tar.gz" "$(du -h "$TARBALL" | cut -f1)  $TARBALL"
printf '%-10s %s\n' ".deb" "$(du -h "$DEB" | cut -f1)  $DEB"
