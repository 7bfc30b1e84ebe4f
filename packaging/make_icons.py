"""Draw Gambit's icon: resources/icons/gambit.svg, PNGs 16..512, .ico and .icns.

A pawn (the piece a gambit offers) in a chat bubble, with speed streaks for
the speculation that makes replies faster. The SVG is the source; the PNGs are
rendered from it with Qt's SVG renderer, and the Windows .ico and macOS .icns
pack those PNGs (both formats accept PNG-compressed images).

    QT_QPA_PLATFORM=offscreen python packaging/make_icons.py [OUT_DIR]

The outputs are committed; rerun this after changing the drawing.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# .icns entry types holding PNG data, by pixel size (ic11..ic14 are the @2x variants)
ICNS_TYPES = (
    (b"ic11", 32),
    (b"ic12", 64),
    (b"ic07", 128),
    (b"ic13", 256),
    (b"ic08", 256),
    (b"ic14", 512),
    (b"ic09", 512),
    (b"ic10", 1024),
)

INK = "#241f5c"
SVG = f"""<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512">
  <title>Gambit</title>
  <defs>
    <linearGradient id="bg" x1="0" y1="0" x2="1" y2="1">
      <stop offset="0" stop-color="#4b3fb8"/>
      <stop offset="1" stop-color="#139e94"/>
    </linearGradient>
  </defs>
  <rect x="24" y="24" width="464" height="464" rx="104" fill="url(#bg)"/>
  <g fill="#ffffff">
    <rect x="84" y="92" width="344" height="268" rx="70"/>
    <path d="M150 340 L118 432 L236 352 Z"/>
  </g>
  <g stroke="#ffb21e" stroke-width="18" stroke-linecap="round">
    <line x1="124" y1="224" x2="176" y2="224"/>
    <line x1="110" y1="264" x2="176" y2="264"/>
    <line x1="124" y1="304" x2="176" y2="304"/>
  </g>
  <g fill="{INK}">
    <circle cx="290" cy="152" r="38"/>
    <rect x="250" y="190" width="80" height="20" rx="10"/>
    <path d="M262 210 L318 210 C322 252 336 284 356 306 L224 306 C244 284 258 252 262 210 Z"/>
    <rect x="206" y="300" width="168" height="32" rx="12"/>
  </g>
</svg>
"""


def render(renderer: QSvgRenderer, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stubs want bytes; runtime wants str
    buffer.close()
    return bytes(data.data())


def ico(images: dict[int, bytes]) -> bytes:
    """A Windows .ico with PNG entries (Vista and later)."""
    sizes = [s for s in ICO_SIZES if s in images]
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        blob = images[size]
        dim = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        blobs += blob
        offset += len(blob)
    return header + entries + blobs


def icns(images: dict[int, bytes]) -> bytes:
    """A macOS .icns with PNG entries (10.7 and later)."""
    body = b""
    for kind, size in ICNS_TYPES:
        blob = images[size]
        body += kind + struct.pack(">I", 8 + len(blob)) + blob
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main(out_dir: Path) -> None:
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    out_dir.mkdir(parents=True, exist_ok=True)
    svg_path = out_dir / "gambit.svg"
    svg_path.write_text(SVG, encoding="utf-8")
    renderer = QSvgRenderer(str(svg_path))
    if not renderer.isValid():
        raise SystemExit(f"Qt cannot render {svg_path}")
    images: dict[int, bytes] = {}
    for size in sorted({*PNG_SIZES, *ICO_SIZES, *(s for _, s in ICNS_TYPES)}):
        images[size] = png_bytes(render(renderer, size))
        if size in PNG_SIZES:
            (out_dir / f"gambit-{size}.png").write_bytes(images[size])
    (out_dir / "gambit.ico").write_bytes(ico(images))
    (out_dir / "gambit.icns").write_bytes(icns(images))
    for path in sorted(out_dir.iterdir()):
        print(f"{path.stat().st_size:>8,}  {path}")


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else root / "resources" / "icons")
