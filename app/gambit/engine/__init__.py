"""The speculative decoding engine. Pure Python + numpy + llama-cpp-python; no Qt."""
