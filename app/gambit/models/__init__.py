"""Model files: GGUF inspection and checks, pair compatibility, the default model."""
