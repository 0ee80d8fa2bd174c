"""Tools to run before turning ASD on: speed at fixed work, quality at natural stop, load tests.

- ``python -m sglang_asd.bench.speed``: tokens/s of each budget against strict (budget 0),
  baseline-candidate-baseline on the same prompts, ignore_eos and a fixed max_new_tokens.
- ``python -m sglang_asd.bench.audit``: accuracy, divergence from the strict output, length and
  acceptance per budget on the shipped evaluation subsets (``data/``), at natural stop.
- ``load_tests/`` (repo root): locust users and a headless runner with a JSON/CSV summary.

Modules: ``client`` (one request, any route), ``runner`` (a pass at fixed concurrency),
``datasets`` (prompts), ``scoring`` (per-task scorers, code sandbox), ``stats`` (percentiles),
``report`` (JSON, CSV, markdown, frontier plot), ``server`` (start a CPU server for a run).
No module here imports SGLang or torch: the tools run against any server URL.
"""
