"""Seams in the launcher / HTTP server process (SGLang's tokenizer manager and OpenAI serving classes):
the ASD request fields on the way in, the receipts on the way out."""
