"""``scripts/lab/profile_round.py``: samples land in the phase and op they lie in, per-round figures
are the samples' seconds over the rounds, and only the busiest thread (the forwards') counts."""

from __future__ import annotations

import profile_round as pr

LOOP = ["main (sglang_asd/launch_server.py:220)", "run_scheduler_process (sglang_asd/sglang_seams/process.py:40)",
        "Scheduler.run_event_loop (scheduler.py:1)", "Scheduler.event_loop_normal (scheduler.py:2)"]


def _frames(*inner):
    return LOOP + list(inner)


def test_a_sample_lands_in_its_phase_and_innermost_op():
    draft_attn = _frames("EagleDraftWorker.draft (eagle_worker_v2.py:714)", "ModelRunner.forward (model_runner.py:1)",
                         "decode_attention_cpu (sglang_asd/cpu_backend/attention_ops.py:79)")
    assert pr.classify(draft_attn) == ("draft steps", "attention (stand-in)")
    verify_lm = _frames("EAGLEWorkerV2.verify (eagle_worker_v2.py:1980)", "ModelRunner.forward (model_runner.py:1)",
                        "lm_head_around (sglang_asd/cpu_backend/seams/cpu_paths.py:150)",
                        "fp32_accumulate_linear (sglang_asd/cpu_backend/seams/cpu_paths.py:107)")
    assert pr.classify(verify_lm) == ("verify", "LM head")  # the LM head's GEMM is the LM head's
    extend = _frames("EAGLEWorkerV2.forward_batch_generation (eagle_worker_v2.py:1503)",
                     "EagleDraftWorker._draft_extend_for_decode (eagle_worker_v2.py:1211)",
                     "EagleDraftWorker.draft_forward (eagle_worker_v2.py:847)",
                     "linear_apply_around (sglang_asd/cpu_backend/seams/cpu_paths.py:133)")
    assert pr.classify(extend) == ("draft extend", "linear GEMMs")  # extend is checked before draft steps
    asd = _frames("EAGLEWorkerV2.verify (eagle_worker_v2.py:1980)", "eagle_sample_around (sglang_asd/x.py:1)",
                  "asd_verify_torch (sglang_asd/verify/torch_verify.py:10)")
    assert pr.classify(asd) == ("verify", "ASD verify")


def test_the_launchers_frames_above_the_event_loop_are_not_ours_to_count():
    # Every scheduler stack starts in sglang_asd's launcher (the scheduler is forked from it): that must
    # not make every sample an "ASD seams" one.
    plain = _frames("ModelRunner.forward (model_runner.py:1)", "RMSNorm.forward_native (layernorm.py:866)")
    assert pr.classify(plain) == ("decode forward", pr.OTHER_MODEL)
    host = _frames("Scheduler.recv_requests (scheduler.py:9)")
    assert pr.classify(host) == (pr.HOST, pr.OTHER)


def test_tally_reads_the_busiest_thread_and_the_table_divides_by_rounds(tmp_path):
    main = ";".join(["thread (1): MainThread", *_frames("EAGLEWorkerV2.verify (e.py:1)",
                                                        "decode_attention_cpu (sglang_asd/cpu_backend/attention_ops.py:1)")])
    other = "thread (2): tqdm_monitor;wait (threading.py:1)"
    raw = tmp_path / "a.raw.txt"
    raw.write_text(f"{main} 300\n{other} 50\nnot a sample line\n")
    cells, total = pr.tally(raw)
    assert total == 300 and cells == {"verify|attention (stand-in)": 300}
    arm = {"label": "b8", "tokens": 30, "rounds": 10, "wall_s": 2.0, "samples": 300, "rate": 100, "cells": cells}
    text = pr.table(arm)
    # 300 samples at 100 Hz = 3 s over 10 rounds = 300 ms per round, all of it verify attention
    assert "| verify | 300.0 | 300.0 |" in text and "3.00 tokens per round" in text and "sampled / wall 1.50" in text
