"""Each upstream-style patch applies cleanly to the pinned, installed SGLang release."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

PATCH_DIR = Path(__file__).resolve().parents[2] / "patches" / "sglang-0.5.23"


def sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin, "sglang must be installed (make test sets it up)"
    return Path(spec.origin).parent


def patched_files(patch: Path) -> list[str]:
    """Paths (under python/sglang/) that ``patch`` changes or creates."""
    return [line.split()[1][len("b/python/sglang/"):] for line in patch.read_text().splitlines()
            if line.startswith("+++ ")]


@pytest.mark.parametrize("patch", sorted(PATCH_DIR.glob("*.patch")), ids=lambda p: p.name)
def test_patch_applies_to_installed_release(patch, tmp_path):
    import sglang

    assert sglang.__version__ == "0.5.23"
    root = sglang_root()
    files = patched_files(patch)
    assert files
    for rel in files:
        dst = tmp_path / "python" / "sglang" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).exists():  # else the patch creates it
            shutil.copy(root / rel, dst)
    result = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(patch)], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


SMG_DIR = PATCH_DIR.parent / "smg-1.13.0"


@pytest.mark.parametrize("patch", sorted(SMG_DIR.glob("*.patch")), ids=lambda p: p.name)
def test_smg_patch_applies_to_the_pinned_release(patch, tmp_path):
    """The gateway patch applies to the smg 1.13.0 files it changes (pristine copies under base/: the
    wheel the project installs ships no Rust source) and names the release the project pins."""
    from importlib.metadata import version

    requirements = (PATCH_DIR.parents[1] / "scripts" / "requirements-cpu.txt").read_text().splitlines()
    assert "smg==1.13.0" in requirements and version("smg") == "1.13.0"
    text = patch.read_text()
    assert "Against: smg 1.13.0" in text and "What:" in text and "Why:" in text
    files = [line.split()[1][len("b/"):] for line in text.splitlines() if line.startswith("+++ ")]
    assert files
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SMG_DIR / "base" / rel, tmp_path / rel)
    result = subprocess.run(["patch", "-p1", "-i", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    if "crates/protocols/src/sampling_params.rs" in files:  # 0001: the catch-all is in the struct
        patched = (tmp_path / "crates/protocols/src/sampling_params.rs").read_text()
        assert "#[serde(flatten)]\n    pub other: Map<String, Value>,\n}" in patched
