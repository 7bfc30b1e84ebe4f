"""File formats read and written without loading a model.

GGUF headers (``gguf_file``), what a header says about a model
(``gguf_info``), whether a model carries MTP heads (``mtp``) and layer-skip
drafts as files (``layerskip_file``). Below the engine: this package imports
only ``gambit.errors`` and ``gambit.fsutil``, never the engine, the model
library, storage or Qt.
"""
