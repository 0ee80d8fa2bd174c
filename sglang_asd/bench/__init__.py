"""Tools to run before turning ASD on: speed at fixed work, quality at natural stop, load tests.

- ``python -m sglang_asd.bench.speed``: tokens/s of each arm (a label + ASD request fields;
  ``--budgets`` is shorthand) against strict (budget 0) and of plain decoding (a second server
  without speculation), strict-candidate-strict on the same prompts, ignore_eos and a fixed
  max_new_tokens; intervals over repeats and over prompts.
- ``python -m sglang_asd.bench.audit``: accuracy, divergence from the strict output, length and
  acceptance per arm on the shipped evaluation subsets (``data/``), at natural stop, paired with
  strict item by item (paired bootstrap, exact McNemar).
- ``load_tests/`` (repo root): locust users and a headless runner with a JSON/CSV summary.

Both long tools log every completed unit to a JSONL run log (``runlog``), so ``--resume``
continues a stopped run and ``--report-only`` reports what is complete.

Modules: ``client`` (one request, any route), ``runner`` (a pass at fixed concurrency),
``arms`` (what is compared), ``runlog`` (resumable runs), ``datasets`` (prompts), ``scoring``
(per-task scorers, code sandbox), ``stats`` (percentiles, bootstrap intervals, McNemar),
``speed_summary`` / ``audit_summary`` (each tool's arithmetic), ``report`` / ``speed_report`` /
``audit_report`` (JSON, CSV, markdown, frontier plot), ``server`` (where a run's requests go; CPU
servers it starts through ``sglang_asd.testing.server``), ``monitor`` (what may watch each speed
pass), ``host`` (the machine a pass ran on).
No module here imports SGLang or torch: the tools run against any server URL. The project's own
lab (host-noise checks, rebuilding ``data/``) is ``scripts/lab/``.
"""
