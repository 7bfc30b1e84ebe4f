"""Building blocks of the settings dialog's pages: help lines, groups, spin boxes.

Spin boxes take their range from the setting's declaration (``Settings``'s
``Setting`` records), so the dialog cannot drift from the validation.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from gambit.storage.settings import SETTINGS
from gambit.ui import theme


def with_help(field: QWidget | QHBoxLayout | QVBoxLayout, help_text: str) -> QWidget:
    """``field`` with a muted help line right under it, as one form-layout field."""
    box = QWidget()
    column = QVBoxLayout(box)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    if isinstance(field, QAbstractButton):
        # At its natural width: a check box only reacts to clicks on its box and text.
        column.addWidget(field, 0, Qt.AlignmentFlag.AlignLeft)
    elif isinstance(field, QWidget):
        column.addWidget(field)
    else:
        column.addLayout(field)
    help_label = theme.muted_label(help_text, box)
    help_label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
    column.addWidget(help_label)
    column.addStretch(1)  # spare height goes below the help, not between the two
    return box


def with_error(row: QHBoxLayout, error: QLabel) -> QVBoxLayout:
    """A file row with its error line (hidden until there is one) under it."""
    column = QVBoxLayout()
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(2)
    column.addLayout(row)
    column.addWidget(error)
    return column


def group(title: str, form: QFormLayout) -> QGroupBox:
    group = QGroupBox(title)
    group.setLayout(form)
    return group


def page(*groups: QGroupBox) -> QWidget:
    """Group boxes stacked at the top of a tab, their form labels in one column."""
    labels: list[QWidget] = []
    for group in groups:
        form = group.layout()
        if isinstance(form, QFormLayout):
            for row in range(form.rowCount()):
                item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                widget = item.widget() if item is not None else None
                if widget is not None:
                    labels.append(widget)
    width = max((label.sizeHint().width() for label in labels), default=0)
    for label in labels:
        label.setMinimumWidth(width)
        if isinstance(label, QLabel):  # the text must stay right-aligned in the wider label
            vertical = label.alignment() & Qt.AlignmentFlag.AlignVertical_Mask
            label.setAlignment(Qt.AlignmentFlag.AlignRight | vertical)

    page = QWidget()
    column = QVBoxLayout(page)
    column.setContentsMargins(12, 12, 12, 12)
    column.setSpacing(12)
    for group in groups:
        column.addWidget(group)
    column.addStretch(1)
    return page


def spin(name: str, setting: str, *, step: int = 1, special: str = "") -> QSpinBox:
    """A spin box over the range ``Settings`` declares for ``setting``."""
    low, high = SETTINGS[setting].range
    spin = QSpinBox()
    spin.setObjectName(name)
    spin.setRange(int(low), int(high))
    spin.setSingleStep(step)
    spin.setSpecialValueText(special)
    spin.setAccelerated(True)
    spin.setMinimumWidth(120)
    return spin


def double(
    name: str, setting: str, step: float, *, decimals: int = 2, special: str = ""
) -> QDoubleSpinBox:
    """A spin box over the range ``Settings`` declares for ``setting``."""
    low, high = SETTINGS[setting].range
    spin = QDoubleSpinBox()
    spin.setObjectName(name)
    spin.setDecimals(decimals)
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setSpecialValueText(special)
    spin.setMinimumWidth(120)
    return spin


def left(widget: QWidget) -> QHBoxLayout:
    """Keep a compact widget (a spin box) at its natural width, left-aligned."""
    row = QHBoxLayout()
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(widget)
    row.addStretch(1)
    return row


class PowerOfTwoSpin(QSpinBox):
    """A spin box whose arrows double and halve (context sizes); typing stays free."""

    def stepBy(self, steps: int) -> None:  # noqa: N802 - Qt override
        value = self.value()
        for _ in range(abs(steps)):
            value = value * 2 if steps > 0 else value // 2
        self.setValue(max(self.minimum(), min(self.maximum(), value)))


class PageScroll(QScrollArea):
    """A tab page that scrolls when the dialog is too short for it, instead of
    squeezing its wrapped help texts (which would cut them mid-sentence)."""

    def __init__(self, page: QWidget) -> None:
        super().__init__()
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(page)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The whole page (QScrollArea's own hint caps it at a few dozen lines)."""
        page = self.widget()
        hint = page.sizeHint() if page is not None else super().sizeHint()
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(hint.width() + bar, hint.height())


def help_line(field: QWidget | QHBoxLayout | QVBoxLayout, name: str) -> QWidget:
    """``field`` with the help ``Settings`` declares for setting ``name`` under it."""
    return with_help(field, SETTINGS[name].help)


def field_error(name: str) -> QLabel:
    """A red, wrapped line under a field, for the reason its value is refused."""
    label = QLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    palette = label.palette()
    palette.setColor(QPalette.ColorRole.WindowText, theme.pick(theme.BAD, palette))
    label.setPalette(palette)
    label.hide()
    return label


def label(name: str) -> str:
    """The form label of a setting: the same name its validation messages use."""
    return SETTINGS[name].label + ":"
