#!/usr/bin/env bash
# Print the Debian "Depends:" value for a PyInstaller bundle folder: the
# packages owning the system libraries that its binaries link to but that the
# bundle does not carry (glibc, GL, X11/xcb, ...), as found by ldd on this
# (the build) system. Optional Qt plugins (Wayland, EGL-FS, GTK theme, input
# methods, ...) and the Qt libraries only they use are left out: Qt skips a
# plugin whose libraries are missing, so they must not make the package
# uninstallable.
#
#     packaging/linux/deb_depends.sh build/linux/dist/gambit
set -euo pipefail

BUNDLE="$(cd "$1" && pwd)"

# Libraries Qt's xcb platform plugin needs that a build machine may lack
# (ldd then says "not found"): library -> package.
declare -A KNOWN=(
    [libxcb-cursor.so.0]=libxcb-cursor0
    [libxcb-icccm.so.4]=libxcb-icccm4
    [libxcb-image.so.0]=libxcb-image0
    [libxcb-keysyms.so.1]=libxcb-keysyms1
    [libxcb-render-util.so.0]=libxcb-render-util0
    [libxkbcommon-x11.so.0]=libxkbcommon-x11-0
    [libxkbcommon.so.0]=libxkbcommon0
    [libEGL.so.1]=libegl1
    [libGL.so.1]=libgl1
    [libOpenGL.so.0]=libopengl0
    [libfontconfig.so.1]=libfontconfig1
)

required_file() {
    local rel="${1#"$BUNDLE"/}"
    case "$rel" in
        */Qt/plugins/platforms/libqxcb.so | */Qt/plugins/platforms/libqoffscreen.so) return 0 ;;
        */Qt/plugins/xcbglintegrations/*) return 0 ;;
        */Qt/plugins/imageformats/*) return 0 ;;
        */Qt/plugins/*) return 1 ;;
        */Qt/lib/libQt6Wayland* | */Qt/lib/libQt6WlShell*) return 1 ;; # for the Wayland plugin
        *) return 0 ;;
    esac
}

mapfile -t LIB_DIRS < <(find "$BUNDLE" -name '*.so*' -printf '%h\n' | sort -u)
LD_PATH="$(IFS=:; echo "${LIB_DIRS[*]}")"

declare -A SYSTEM_LIBS=() MISSING=()
while IFS= read -r -d '' file; do
    required_file "$file" || continue
    [[ "$(head -c 4 "$file" | od -An -c | tr -d ' ')" == '177ELF' ]] || continue
    while IFS= read -r line; do
        if [[ "$line" =~ ^[[:space:]]*([^[:space:]]+)\ =\>\ not\ found ]]; then
            MISSING["${BASH_REMATCH[1]}"]=1
        elif [[ "$line" =~ =\>\ (/[^[:space:]]+)\ \( ]]; then
            path="${BASH_REMATCH[1]}"
            [[ "$path" == "$BUNDLE"/* ]] || SYSTEM_LIBS["$path"]=1
        fi
    done < <(LD_LIBRARY_PATH="$LD_PATH" ldd "$file" 2>/dev/null || true)
done < <(find "$BUNDLE" -type f \( -name '*.so*' -o -perm -u+x \) -print0)

declare -A PACKAGES=()
for path in "${!SYSTEM_LIBS[@]}"; do
    pkg=""
    for candidate in "$path" "$(readlink -f "$path")" "${path#/usr}" "/usr$path"; do
        # (awk, not head: head would close the pipe early, and pipefail would see SIGPIPE)
        if pkg="$(dpkg -S "$candidate" 2>/dev/null | awk -F: 'NR == 1 { print $1 }')" \
            && [[ -n "$pkg" ]]; then
            break
        fi
    done
    if [[ -n "$pkg" ]]; then
        PACKAGES["$pkg"]=1
    else
        echo "deb_depends: no package owns $path" >&2
    fi
done
for lib in "${!MISSING[@]}"; do
    if [[ -n "${KNOWN[$lib]:-}" ]]; then
        PACKAGES["${KNOWN[$lib]}"]=1
    else
        echo "deb_depends: $lib is not found on this system and has no known package" >&2
    fi
done

GLIBC="$(ldd --version | awk 'NR == 1 { print $NF }')"
out=()
for pkg in $(printf '%s\n' "${!PACKAGES[@]}" | sort); do
    case "$pkg" in
        libc6) out+=("libc6 (>= $GLIBC)") ;;
        *) out+=("$pkg") ;;
    esac
done
joined="$(IFS=,; echo "${out[*]}")"
echo "${joined//,/, }"
