#!/usr/bin/env bash
# Add Gambit to your desktop's application menu (for the .tar.gz; the .deb does
# this itself). Run it from the unpacked folder; it points the menu entry at
# this folder, so move the folder first if you want it elsewhere.
#     ./install-desktop-entry.sh            install for the current user
#     ./install-desktop-entry.sh --remove   take it out again
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}"
APPS="$DATA/applications"
ICONS="$DATA/icons/hicolor"

if [[ "${1:-}" == "--remove" ]]; then
    rm -f "$APPS/gambit.desktop" "$ICONS"/*/apps/gambit.png "$ICONS/scalable/apps/gambit.svg"
    echo "Removed Gambit's menu entry."
    exit 0
fi

mkdir -p "$APPS" "$ICONS/scalable/apps"
for png in "$HERE"/icons/gambit-*.png; do
    size="${png##*-}"
    size="${size%.png}"
    mkdir -p "$ICONS/${size}x${size}/apps"
    cp "$png" "$ICONS/${size}x${size}/apps/gambit.png"
done
cp "$HERE/icons/gambit.svg" "$ICONS/scalable/apps/gambit.svg"
sed -e "s|^Exec=gambit|Exec=\"$HERE/gambit\"|" -e "s|^TryExec=gambit|TryExec=$HERE/gambit|" \
    "$HERE/gambit.desktop" >"$APPS/gambit.desktop"
if command -v update-desktop-database >/dev/null; then
    update-desktop-database -q "$APPS" || true
fi
if command -v gtk-update-icon-cache >/dev/null; then
    gtk-update-icon-cache -q -t "$ICONS" || true
fi
echo "Gambit is in your application menu (entry: $APPS/gambit.desktop)."
