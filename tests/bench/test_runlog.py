"""The run log: header, appends, a truncated last line, fingerprint checks, the published gzipped form."""

import gzip
import json

import pytest

from sglang_asd.bench.runlog import RunLog, RunLogError, exists, fingerprint_diff, read_log, read_text

FP = {"model": "m", "arms": [{"label": "strict"}], "max_new_tokens": 128}


def test_new_log_appends_and_reads_back(tmp_path):
    path = tmp_path / "run.jsonl"
    log = RunLog.open(path, "t-log", FP, resume=False)
    log.append({"kind": "pass", "i": 0})
    log.append({"kind": "pass", "i": 1})
    header, records = read_log(path, "t-log")
    assert header["fingerprint"] == FP and [r["i"] for r in records] == [0, 1]
    assert len(path.read_text().splitlines()) == 3


def test_existing_log_needs_resume_and_is_never_overwritten(tmp_path):
    path = tmp_path / "run.jsonl"
    RunLog.open(path, "t-log", FP, resume=False).append({"i": 0})
    before = path.read_text()
    with pytest.raises(RunLogError, match="already holds a run; pass --resume"):
        RunLog.open(path, "t-log", FP, resume=False)
    with pytest.raises(RunLogError, match="already holds a run"):
        RunLog.precheck(path, "t-log", {}, resume=False)
    assert path.read_text() == before
    log = RunLog.open(path, "t-log", FP, resume=True)
    assert log.records == [{"i": 0}]


def test_resume_refuses_another_configuration(tmp_path):
    path = tmp_path / "run.jsonl"
    RunLog.open(path, "t-log", FP, resume=False)
    other = dict(FP, max_new_tokens=256)
    with pytest.raises(RunLogError, match="max_new_tokens: stored 128, now 256"):
        RunLog.open(path, "t-log", other, resume=True)
    with pytest.raises(RunLogError, match="max_new_tokens"):
        RunLog.precheck(path, "t-log", {"max_new_tokens": 256}, resume=True)
    RunLog.precheck(path, "t-log", {"max_new_tokens": 128}, resume=True)  # the known part matches
    with pytest.raises(RunLogError, match="is not a u-log"):
        RunLog.open(path, "u-log", FP, resume=True)


def test_truncated_last_line_is_dropped_on_resume(tmp_path):
    path = tmp_path / "run.jsonl"
    RunLog.open(path, "t-log", FP, resume=False).append({"i": 0})
    with path.open("a") as f:
        f.write('{"i": 1, "half a rec')                 # a kill in the middle of a write
    assert [r["i"] for r in read_log(path, "t-log")[1]] == [0]
    log = RunLog.open(path, "t-log", FP, resume=True)
    log.append({"i": 1})
    assert [json.loads(x).get("i") for x in path.read_text().splitlines()[1:]] == [0, 1]


def test_a_bad_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"kind": "t-log", "fingerprint": {}}\nnot json\n{"i": 1}\n')
    with pytest.raises(RunLogError, match="line 2 is not JSON"):
        read_log(path, "t-log")
    with pytest.raises(RunLogError, match="no run log at"):
        read_log(tmp_path / "missing.jsonl", "t-log")


def test_fingerprint_diff_treats_tuples_as_lists():
    assert fingerprint_diff({"a": [1, 2]}, {"a": (1, 2)}) == []
    assert fingerprint_diff({"a": 1}, {"b": 2}) == ["a: stored 1, now null", "b: stored null, now 2"]
    assert fingerprint_diff({"a": 1, "b": 2}, {"b": 2}, partial=True) == []


def test_fingerprint_diff_shows_long_values_where_they_differ():
    """Two launch lines that share their first 200 characters: the message shows the part that
    differs, not two equal prefixes."""
    common = "--model-path m " + "--flag-x 1 " * 20
    diff = fingerprint_diff({"launch": common + "--speculative-num-steps 4"},
                            {"launch": common + "--mem-fraction-static 0.8"})
    assert len(diff) == 1
    stored, now = diff[0].split(", now ")
    assert stored.startswith("launch: stored ...") and "--speculative-num-steps 4" in stored
    assert now.startswith("...") and "--mem-fraction-static 0.8" in now
    assert "--model-path" not in diff[0]
    # short values are shown whole
    assert fingerprint_diff({"k": "a"}, {"k": "b"}) == ['k: stored "a", now "b"']


def _publish(path):
    """What docs/measurements/publish.sh makes of a run log: NAME.jsonl -> NAME.jsonl.gz."""
    published = path.with_name(path.name + ".gz")
    published.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return published


def test_a_published_gzipped_log_reads_and_resumes(tmp_path):
    path = tmp_path / "run.jsonl"
    RunLog.open(path, "t-log", FP, resume=False).append({"i": 0})
    published = _publish(path)
    header, records = read_log(path, "t-log")                    # asked for by the plain name
    assert header["fingerprint"] == FP and records == [{"i": 0}]
    assert json.loads(read_text(path).splitlines()[1]) == {"i": 0} and exists(path)
    with pytest.raises(RunLogError, match=r"run\.jsonl\.gz already holds a run; pass --resume"):
        RunLog.precheck(path, "t-log", FP, resume=False)
    with pytest.raises(RunLogError, match="max_new_tokens: stored 128, now 256"):
        RunLog.open(path, "t-log", dict(FP, max_new_tokens=256), resume=True)
    assert not path.exists()                                     # a refused resume writes nothing
    log = RunLog.open(path, "t-log", FP, resume=True)            # the live log is written out plain
    log.append({"i": 1})
    assert [json.loads(x).get("i") for x in path.read_text().splitlines()[1:]] == [0, 1]
    assert gzip.decompress(published.read_bytes()).count(b"\n") == 2   # the published copy is as it was
    assert [r["i"] for r in read_log(path, "t-log")[1]] == [0, 1]     # both there: the live one is read


def test_missing_files_are_named_by_their_plain_name(tmp_path):
    assert not exists(tmp_path / "run.jsonl")
    with pytest.raises(FileNotFoundError, match=r"run\.jsonl'"):
        read_text(tmp_path / "run.jsonl")
