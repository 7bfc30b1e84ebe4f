"""The Models dialog: the user's GGUF files, which pair to use, and where to get more.

One module per part of the window; ``dialog.ModelsDialog`` wires them:

- ``library_page``: the table of the library, its problems and its buttons;
- ``details``: the selected model (header, choose buttons, pair message,
  its compatible drafts and its metadata), with ``memory_view`` and
  ``derive_panel`` inside;
- ``catalog``: the Catalog tab, suggested pairs to download;
- ``tasks``: slow work on a ``QThread`` and the activity strip that shows it;
- ``choice``: the target and draft chosen here, and what choosing says;
- ``text`` and ``widgets``: formatting and the small widgets they share.

The rules behind them live below the UI: which pair the memory view counts
(``gambit.models.pairing.estimate_pair``), which KV cache the settings imply
(``gambit.engine.machine.kernels.implied_kernels``), what deriving may gain
(``gambit.models.derive_advice``).
"""
