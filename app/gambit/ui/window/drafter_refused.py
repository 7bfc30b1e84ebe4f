"""When the drafter chosen in the settings is not used after all.

Self-speculation (layer skipping) is refused at load when skipping layers
would not pay on this model, or when its search was cancelled: the model
loads without a drafter, and the settings say so too (drafter back to none),
so that nothing claims a drafter that is not there.
"""

from __future__ import annotations

import logging

from gambit.storage.settings import Settings, SettingsStore
from gambit.ui.window.window_layout import WindowPanes

log = logging.getLogger(__name__)


def drop_layer_skip(window: WindowPanes, store: SettingsStore, reason: str) -> Settings:
    """The window's settings with no drafter, saved (if they can be), the user
    told why; returns them."""
    settings = window.settings.with_(drafter="none")
    try:
        store.save(settings)
    except Exception as exc:  # the model runs; only the choice is not remembered
        log.warning("could not save the settings: %s", exc)
    window.show_error(
        "Self-speculation is off",
        f"{reason}\n\nReplies use plain decoding; the drafter (Settings → Models → "
        "Drafter) is set back to None (choose one there again at any time).",
        warning=True,
    )
    return settings
