"""The Models dialog, as a package: ``dialog.ModelsDialog`` and, as it is
split up, its parts."""

# Transitional: ui/main_window.py still imports the dialog from here; it moves
# to ``gambit.ui.models_dialog.dialog`` once that file is free to edit.
from gambit.ui.models_dialog.dialog import ModelsDialog

__all__ = ["ModelsDialog"]
