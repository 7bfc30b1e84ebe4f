"""Shared colours that read well on both light and dark palettes.

Each accent comes as a (light theme, dark theme) pair: a darker shade for light
backgrounds, a brighter one for dark backgrounds, both with enough contrast
for text. Neutral colours are derived from the widget's own palette.
"""

from __future__ import annotations

from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFormLayout, QLabel, QWidget

Tone = Literal["good", "warn", "bad", "neutral"]
ColourPair = tuple[str, str]

GOOD: ColourPair = ("#1a7f37", "#3fb950")
WARN: ColourPair = ("#9a6700", "#d29922")
BAD: ColourPair = ("#cf222e", "#f85149")
ACCENT: ColourPair = ("#0969da", "#4493f8")
VIOLET: ColourPair = ("#8250df", "#a371f7")
TEAL: ColourPair = ("#1b7c83", "#39c5cf")

_TONES: dict[Tone, ColourPair] = {"good": GOOD, "warn": WARN, "bad": BAD}


def is_dark(palette: QPalette) -> bool:
    """True when the palette's window colour is dark."""
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def pick(pair: ColourPair, palette: QPalette) -> QColor:
    """The shade of ``pair`` that suits ``palette``."""
    return QColor(pair[1] if is_dark(palette) else pair[0])


def blend(a: QColor, b: QColor, t: float) -> QColor:
    """``a`` moved a fraction ``t`` of the way towards ``b``."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )


def muted(palette: QPalette) -> QColor:
    """Secondary text: the text colour faded towards the window colour."""
    return blend(
        palette.color(QPalette.ColorRole.WindowText), palette.color(QPalette.ColorRole.Window), 0.4
    )


def faint(palette: QPalette) -> QColor:
    """Grid lines and hairlines: barely distinct from the base colour."""
    text = palette.color(QPalette.ColorRole.Text)
    return blend(text, palette.color(QPalette.ColorRole.Base), 0.88)


def tone_colour(tone: Tone, palette: QPalette) -> QColor:
    """The colour of a good / warn / bad figure; plain text colour when neutral."""
    if tone == "neutral":
        return palette.color(QPalette.ColorRole.WindowText)
    return pick(_TONES[tone], palette)


def muted_label(text: str = "", parent: QWidget | None = None) -> QLabel:
    """A short help text: smaller, word-wrapped, in a colour between text and background."""
    label = QLabel(text, parent)
    label.setWordWrap(True)
    font = label.font()
    font.setPointSizeF(max(font.pointSizeF() * 0.88, 7.0))
    label.setFont(font)
    palette = label.palette()
    palette.setColor(QPalette.ColorRole.WindowText, muted(palette))
    label.setPalette(palette)
    return label


def form_layout(labels_on_top_row: bool = False, vertical_spacing: int = 10) -> QFormLayout:
    """The dialogs' form layout: right-aligned labels, fields that grow."""
    form = QFormLayout()
    valign = Qt.AlignmentFlag.AlignTop if labels_on_top_row else Qt.AlignmentFlag.AlignVCenter
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | valign)
    form.setFormAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
    form.setHorizontalSpacing(12)
    form.setVerticalSpacing(vertical_spacing)
    return form
