"""docs/measurements/issue35/targets.py and depth.py on speed runs made by the real tool against the
fake servers (plumbing and arithmetic; the fake's timings mean nothing): every arm against plain
decoding per prompt, and the depth table across runs, checked against the logged passes."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from fake_server import FakeServer

from sglang_asd.bench import speed

SCRIPTS = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "issue35"
WORK = ["--budgets", "0", "--arms", "b8:asd_budget=8", "--num-prompts", "3", "--max-new-tokens", "12",
        "--concurrency", "1", "--schedule", "rounds"]


def _run(script: str, *args) -> str:
    r = subprocess.run([sys.executable, str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _per_prompt(run: Path) -> dict:
    """(arm, prompt) -> the request's tok/s from the run log (one repeat, concurrency 1)."""
    log = [json.loads(line) for line in (run / "speed_passes.jsonl").read_text().splitlines()]
    return {(p["arm"], r["tag"]): r["completion_tokens"] / r["latency_s"]
            for p in log if p.get("kind") == "pass" for r in p["requests"]}


def _import(module: str):
    sys.path.insert(0, str(SCRIPTS))
    try:
        return __import__(module)
    finally:
        sys.path.remove(str(SCRIPTS))


def _gmean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def test_targets_put_every_arm_against_plain_per_prompt(fake_server_url, tmp_path):
    with FakeServer(plain=True) as plain_url:
        assert speed.main(["--url", fake_server_url, "--plain-url", plain_url, *WORK, "--repeats", "1",
                           "--out", str(tmp_path / "run")]) == 0
    rows = {line.split("|")[1].strip(): line.split("|") for line in _run("targets.py", tmp_path / "run").splitlines()
            if line.startswith("| ") and not line.startswith(("| arm", "| ---"))}
    assert list(rows) == ["plain", "strict", "b8"]
    tok = _per_prompt(tmp_path / "run")
    prompts = {p for _, p in tok}
    for arm in ("strict", "b8"):
        want = _gmean([tok[(arm, p)] / tok[("plain", p)] for p in prompts])
        assert rows[arm][4].strip().startswith(f"{want:.3f} [")
    assert rows["plain"][4].strip() == "1.000" and rows["strict"][5].strip() == "reference"


def test_depth_table_compares_every_depth_with_strict_at_k4(fake_server_url, tmp_path):
    for name in ("qwen_k4", "qwen_k8"):
        assert speed.main(["--url", fake_server_url, *WORK, "--repeats", "1", "--out", str(tmp_path / name)]) == 0
    out = _run("depth.py", tmp_path)
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| chain")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [
        ("chain K=4", "strict"), ("chain K=4", "b8"), ("chain K=8", "strict"), ("chain K=8", "b8")]
    k4, k8 = _per_prompt(tmp_path / "qwen_k4"), _per_prompt(tmp_path / "qwen_k8")
    prompts = {p for _, p in k4}
    want = _gmean([k8[("b8", p)] / k4[("strict", p)] for p in prompts])
    assert rows[3][9].strip().startswith(f"{want:.3f} [")
    assert rows[0][9].strip() == "1.000 [1.000, 1.000]" and rows[0][8].strip() == "reference"
    assert "- best for strict: chain K=" in out and "- ASD's best against strict's best, per prompt: " in out


def test_depth_figure_draws_the_table(fake_server_url, tmp_path):
    """The figure's left panel holds each arm's per-prompt ratio against strict at K = 4 at its
    depth, the right panel the arm's accept length, and --plot writes it."""
    for name in ("qwen_k4", "qwen_k8"):
        assert speed.main(["--url", fake_server_url, *WORK, "--repeats", "1", "--out", str(tmp_path / name)]) == 0
    depth = _import("depth")
    _, summaries, cells = depth.collect(tmp_path)
    fig = depth.figure(tmp_path)
    left, right = fig.axes
    by_label = {c.get_label(): c.lines[0] for c in left.containers if not c.get_label().startswith("_")}
    assert set(by_label) == {"strict (budget 0)", "budget 8, gate 0.25"}
    b8 = by_label["budget 8, gate 0.25"]
    assert [round(x) for x in b8.get_xdata()] == [4, 8]
    assert list(b8.get_ydata()) == pytest.approx([cells[("qwen_k4", "b8")][0], cells[("qwen_k8", "b8")][0]])
    accept = [line for line in right.get_lines() if line.get_label() == "budget 8, gate 0.25"][0]
    assert list(accept.get_ydata()) == pytest.approx([summaries[n]["b8"]["accept_length"] for n in ("qwen_k4", "qwen_k8")])
    png = tmp_path / "depth.png"
    assert f"figure: {png}" in _run("depth.py", tmp_path, "--plot", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_depth_table_needs_the_reference_depth(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPTS / "depth.py"), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "qwen_k4: no speed run" in r.stderr


@pytest.fixture(autouse=True)
def _scripts_import_the_package(monkeypatch):
    """The scripts run as files: the package must import from this checkout."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))


def test_draft_cost_model_finds_where_the_best_pair_reaches_the_target():
    """Strict accepts 3 tokens per round at K = 4 and 4 at K = 8, ASD 6 at K = 8: strict's best is
    K = 8 while 4 / (1 + 8 rho) > 3 / (1 + 4 rho), i.e. rho < 0.125 (ratio 1.5), then K = 4, where
    ASD's best over it is 2 (1 + 4 rho) / (1 + 8 rho): 1.19 at rho = 0.81 / 1.52 = 0.533, less beyond.
    The tree counts its 4 draft forwards, not its 8 tokens: with K = 4's accepts it runs as fast."""
    dc = _import("draft_cost")
    prompts = ("p0", "p1", "p2")
    work = {("qwen_k4", "strict"): dict.fromkeys(prompts, 3.0), ("qwen_k8", "strict"): dict.fromkeys(prompts, 4.0),
            ("qwen_k8", "b8"): dict.fromkeys(prompts, 6.0), ("qwen_tree", "strict"): dict.fromkeys(prompts, 3.0)}
    pair = dc.best_pair(work, 0.1)
    assert (pair.strict, pair.asd) == (("qwen_k8", "strict"), ("qwen_k8", "b8")) and pair.ratio[0] == pytest.approx(1.5)
    pair = dc.best_pair(work, 0.3)
    assert pair.strict in {("qwen_k4", "strict"), ("qwen_tree", "strict")}
    assert pair.ratio[0] == pytest.approx(2 * (1 + 1.2) / (1 + 2.4))
    speed = dc.modelled(work, 0.3)
    assert speed[("qwen_tree", "strict")] == speed[("qwen_k4", "strict")]
    assert dc.reach(dc.sweep(work), target=1.19) == (0.53, 0.53)
    assert dc.reach(dc.sweep(work), target=2.0) == (None, None)


def test_draft_cost_pairs_only_the_prompts_every_run_holds(tmp_path, monkeypatch):
    dc = _import("draft_cost")
    logs = {"qwen_k4": {"strict": {"p0": 3.0, "p1": 3.0}, "b8": {"p0": 4.0, "p1": 4.0}},
            "qwen_k8": {"strict": {"p0": 4.0}}}
    for name in logs:
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed_passes.jsonl").write_text("")
    monkeypatch.setattr(dc, "per_prompt", lambda run, measure: logs[run.name])
    assert dc.accepts(tmp_path) == {("qwen_k4", "strict"): {"p0": 3.0}, ("qwen_k4", "b8"): {"p0": 4.0},
                                    ("qwen_k8", "strict"): {"p0": 4.0}}


def test_draft_cost_fits_the_hosts_round_time_on_the_chain(fake_server_url, tmp_path):
    """The host's line through strict's seconds per round at K = 4 and K = 8 (two points: exact), and
    the model's column at that rho, both recomputed from the logs the real tool wrote."""
    for name in ("qwen_k4", "qwen_k8"):
        assert speed.main(["--url", fake_server_url, *WORK, "--repeats", "1", "--out", str(tmp_path / name)]) == 0
    dc = _import("draft_cost")
    runs, _, cells = dc.collect(tmp_path)
    work = dc.accepts(tmp_path)
    fit = dc.host_fit(runs, work)
    log = {name: [json.loads(line) for line in (tmp_path / name / "speed_passes.jsonl").read_text().splitlines()]
           for name in ("qwen_k4", "qwen_k8")}

    def per_request(name, arm, measure):
        return {r["tag"]: measure(r) for p in log[name] if p.get("kind") == "pass" and p["arm"] == arm
                for r in p["requests"]}

    seconds = {name: sorted(per_request(name, "strict", lambda r: r["latency_s"] / r["spec_verify_ct"]).values())
               for name in log}
    t4, t8 = (s[len(s) // 2] for s in (seconds["qwen_k4"], seconds["qwen_k8"]))  # 3 prompts: the median
    assert fit.per_step_s == pytest.approx((t8 - t4) / 4) and fit.fixed_s == pytest.approx(t4 - 4 * fit.per_step_s)
    out = _run("draft_cost.py", tmp_path)
    assert out.startswith(f"Host fit: a round's fixed part {fit.fixed_s:.3f} s, one more step of depth "
                          f"{fit.per_step_s:.3f} s, rho = {fit.rho:.2f}.")
    row = [line.split("|") for line in out.splitlines() if line.startswith("| chain K=8 | b8 |")][0]
    accept = {(n, a): per_request(n, a, lambda r: r["completion_tokens"] / r["spec_verify_ct"])
              for n in log for a in ("strict", "b8")}
    model = _gmean([accept[("qwen_k8", "b8")][p] / accept[("qwen_k4", "strict")][p] * (1 + 4 * fit.rho)
                    / (1 + 8 * fit.rho) for p in accept[("qwen_k8", "b8")]])
    assert row[4].strip().startswith(f"{model:.3f} [")
    assert row[5].strip() == dc.fmt(cells[("qwen_k8", "b8")])
    assert "- ASD's best runs at least 1.20x strict's best from rho 0 up to rho = " in out
    line = [ln for ln in dc.figure(tmp_path).axes[0].get_lines() if ln.get_label().startswith("ASD's best")][0]
    assert list(line.get_ydata()) == pytest.approx([pair.ratio[0] for _, pair in dc.sweep(work)])
    png = tmp_path / "draft_cost.png"
    assert f"figure: {png}" in _run("draft_cost.py", tmp_path, "--plot", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
