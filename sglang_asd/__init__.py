"""sglang-asd: Approximate Speculative Decoding for SGLang."""

__version__ = "0.1.0"
