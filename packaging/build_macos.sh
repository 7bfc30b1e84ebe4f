#!/usr/bin/env bash
# Build Gambit for macOS (Apple Silicon, Metal): dist/Gambit-<version>-macos-<arch>.dmg
# holding Gambit.app, then run the app's self-test.
#
# NOT RUN where this was written (Linux only): written for the GitHub Actions
# macos-14 runner (see .github/workflows/installers.yml), untested.
#
# Needs: Python >= 3.10 (python3), Xcode command line tools, CMake.
#     packaging/build_macos.sh [--clean]
#
# Environment:
#   GAMBIT_BUILD_VENV          build virtual environment (default build/venv-macos)
#   CMAKE_ARGS                 llama.cpp flags (default "-DGGML_METAL=on"; llama-cpp-python
#                              turns Metal on for Apple targets anyway)
#   GAMBIT_CODESIGN_IDENTITY   "Developer ID Application: ..." to sign (default: ad-hoc);
#                              notarization is not done here
#   PYINSTALLER_VERSION        default 6.22.3
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ "${1:-}" == "--clean" ]]; then
    rm -rf "${GAMBIT_BUILD_VENV:-$ROOT/build/venv-macos}" "$ROOT/build/macos"
fi

VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' app/gambit/__init__.py)"
LLAMA_VERSION="$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)"
ARCH="$(uname -m)"
VENV="${GAMBIT_BUILD_VENV:-$ROOT/build/venv-macos}"
WORK="$ROOT/build/macos"
DIST="$ROOT/dist"
PYINSTALLER_VERSION="${PYINSTALLER_VERSION:-6.22.3}"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_METAL=on -DGGML_RPC=ON -DLLAVA_BUILD=OFF}"
T0=$SECONDS
step() { printf '\n== %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }

step "build environment: $VENV"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip
STAMP="$VENV/.gambit-llama-build"
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$LLAMA_VERSION $CMAKE_ARGS" ]]; then
    step "llama-cpp-python $LLAMA_VERSION, CMAKE_ARGS=$CMAKE_ARGS (minutes)"
    "$PY" -m pip install --quiet --force-reinstall --no-deps --no-cache-dir \
        --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_VERSION"
fi
# Reinstall Gambit itself (same version, new dependencies?), then what it needs.
"$PY" -m pip install --quiet --force-reinstall --no-deps "$ROOT"
"$PY" -m pip install --quiet "$ROOT" "pyinstaller==$PYINSTALLER_VERSION"
printf '%s' "$LLAMA_VERSION $CMAKE_ARGS" >"$STAMP"
"$PY" -c 'import llama_cpp as ll; print("GPU offload:", ll.llama_supports_gpu_offload())'

step "PyInstaller"
rm -rf "$WORK/dist"
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$WORK/dist" --workpath "$WORK/pyinstaller" packaging/gambit.spec
APP="$WORK/dist/Gambit.app"
[[ -x "$APP/Contents/MacOS/gambit" ]] || { echo "no $APP" >&2; exit 1; }
# Ad-hoc signature (required on Apple Silicon) unless an identity was given to PyInstaller.
if [[ -z "${GAMBIT_CODESIGN_IDENTITY:-}" ]]; then
    codesign --force --deep --sign - "$APP"
fi

step "self-test of the .app"
GAMBIT_HOME="$WORK/selftest-home" QT_QPA_PLATFORM=offscreen \
    "$APP/Contents/MacOS/gambit" --self-test

step ".dmg"
mkdir -p "$DIST"
DMG="$DIST/Gambit-$VERSION-macos-$ARCH.dmg"
STAGE="$WORK/dmg"
rm -rf "$STAGE" "$DMG"
mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "Gambit $VERSION" -srcfolder "$STAGE" -ov -format UDZO "$DMG"

step "done in $((SECONDS - T0)) s"
printf '%-8s %s\n' ".app" "$(du -sh "$APP" | cut -f1)  $APP"
printf '%-8s %s\n' ".dmg" "$(du -h "$DMG" | cut -f1)  $DMG"
