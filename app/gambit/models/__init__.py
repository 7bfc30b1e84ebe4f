"""The model library: pairing, derive, catalog, layer-skip search, the default model.

File formats (GGUF headers, layer-skip files) are one layer down, in
``gambit.formats``."""
