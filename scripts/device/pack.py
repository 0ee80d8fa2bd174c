#!/usr/bin/env python3
"""Strip, pack and unpack the site folder that the GPU end-to-end run carries.

``scripts/device_pack.sh`` installs the wheels of ``pack-requirements.txt`` into a folder with pip
(``--target``, no dependencies resolved), then calls this script:

    python scripts/device/pack.py build --site .device/build/site --carry .device/carry
    python scripts/device/pack.py plan  --carry .device/carry          # what build would do; no I/O
    python scripts/device/pack.py unpack --carry .device/carry --dest /tmp/asd-site   # on the device

``build`` deletes what SGLang's text-serving path never imports (``STRIP``), writes one
``site.tar.xz`` and ``manifest.json`` into ``--carry`` and fails when the archive is over
``--limit-mib``. ``unpack`` checks the archive against the manifest's sha256 and skips the work
when the same archive is already unpacked at ``--dest`` (a second call on a warm device machine).
Standard library only: it runs under any Python 3.9+ here and on the device.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import lzma
import os
import pathlib
import re
import shutil
import sys
import tarfile
import time

ARCHIVE = "site.tar.xz"
MANIFEST = "manifest.json"
STAMP = ".asd_pack_sha256"
# The run tool carries at most 64 MiB (working tree + carried paths); the repo itself is ~2 MiB.
DEFAULT_LIMIT_MIB = 56

# Paths (globs, relative to the site folder) that SGLang's text serving never imports, with why.
STRIP = [
    ("**/__pycache__", "byte code; rebuilt on first import"),
    ("bin", "console scripts; nothing runs them"),
    ("sglang/multimodal_gen", "diffusion/video generation runtime"),
    ("sglang/test", "SGLang's own test helpers"),
    ("sglang/benchmark", "benchmark scripts"),
    ("sglang/srt/rust_extensions/_bench*.so", "benchmark client extension"),
    ("sglang/srt/rust_extensions/_grpc*.so", "gRPC server extension"),
    ("sglang/srt/rust_extensions/_multimodal*.so", "image/video preprocessing extension"),
    ("xgrammar/tests", "package tests"),
    ("jedi/third_party/typeshed", "type stubs for IDE completion"),
    ("**/*.pyi", "type stubs"),
]


def requirement_pins(path: pathlib.Path) -> list[tuple[str, str]]:
    """``(name, version)`` of every ``name==version`` line; anything else (but comments) is an error."""
    pins = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise SystemExit(f"{path}:{n}: expected an exact pin 'name==version', got {raw!r}")
        pins.append((m.group(1), m.group(2)))
    names = [re.sub(r"[-_.]+", "-", p[0].lower()) for p in pins]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise SystemExit(f"{path}: pinned twice: {dup}")
    return pins


def _matches(rel: str, pattern: str) -> bool:
    if pattern.startswith("**/"):
        tail = pattern[3:]
        return fnmatch.fnmatch(os.path.basename(rel), tail) or fnmatch.fnmatch(rel, tail)
    return fnmatch.fnmatch(rel, pattern)


def strip(site: pathlib.Path) -> list[dict]:
    """Delete ``STRIP`` matches under ``site``; return per rule how many files and bytes went."""
    report = {p: {"pattern": p, "why": why, "files": 0, "bytes": 0} for p, why in STRIP}
    for root, dirs, files in os.walk(site, topdown=True):
        rel_root = os.path.relpath(root, site)
        for d in list(dirs):
            rel = os.path.normpath(os.path.join(rel_root, d))
            rule = next((p for p, _ in STRIP if _matches(rel, p)), None)
            if rule:
                nf, nb = _tree_size(pathlib.Path(root, d))
                shutil.rmtree(pathlib.Path(root, d))
                report[rule]["files"] += nf
                report[rule]["bytes"] += nb
                dirs.remove(d)
        for f in files:
            rel = os.path.normpath(os.path.join(rel_root, f))
            rule = next((p for p, _ in STRIP if _matches(rel, p)), None)
            if rule:
                p = pathlib.Path(root, f)
                report[rule]["files"] += 1
                report[rule]["bytes"] += p.stat().st_size
                p.unlink()
    return list(report.values())


def _tree_size(path: pathlib.Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def installed_packages(site: pathlib.Path) -> list[dict]:
    out = []
    for d in sorted(site.glob("*.dist-info")):
        meta = (d / "METADATA").read_text(errors="replace")
        name = re.search(r"^Name: (.+)$", meta, re.M)
        ver = re.search(r"^Version: (.+)$", meta, re.M)
        out.append({"name": name.group(1).strip() if name else d.name, "version": ver.group(1).strip() if ver else "?"})
    return out


def build(args) -> int:
    site, carry = pathlib.Path(args.site), pathlib.Path(args.carry)
    pins = requirement_pins(pathlib.Path(args.requirements))
    if not site.is_dir():
        raise SystemExit(f"--site {site} is not a folder: run scripts/device_pack.sh, which installs it first")
    packages = installed_packages(site)
    have = {re.sub(r"[-_.]+", "-", p["name"].lower()): p["version"] for p in packages}
    missing = [f"{n}=={v}" for n, v in pins if have.get(re.sub(r"[-_.]+", "-", n.lower())) != v]
    if missing:
        raise SystemExit(f"{site} lacks pinned packages (or has other versions): {missing}")
    before = _tree_size(site)
    stripped = strip(site)
    after = _tree_size(site)
    carry.mkdir(parents=True, exist_ok=True)
    archive = carry / ARCHIVE
    t0 = time.time()
    with lzma.open(archive, "wb", preset=9 | lzma.PRESET_EXTREME if args.extreme else 9) as xz:
        with tarfile.open(fileobj=xz, mode="w") as tar:
            for p in sorted(site.iterdir()):
                tar.add(p, arcname=p.name, filter=_normalize)
    packed = archive.stat().st_size
    manifest = {
        "format": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "target": "CPython 3.12, manylinux x86-64 (the nvidia-h200 device image)",
        "requirements": [f"{n}=={v}" for n, v in pins],
        "packages": packages,
        "stripped": stripped,
        "files_before": before[0], "bytes_before": before[1],
        "files": after[0], "bytes_unpacked": after[1],
        "archive": ARCHIVE, "bytes_packed": packed, "sha256": _sha256(archive),
        "limit_mib": args.limit_mib, "pack_seconds": round(time.time() - t0, 1),
    }
    (carry / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    mib = packed / 2**20
    print(f"[pack] {len(packages)} packages, {after[0]} files, {after[1] / 2**20:.1f} MiB unpacked "
          f"({(before[1] - after[1]) / 2**20:.1f} MiB stripped) -> {archive} {mib:.1f} MiB (limit {args.limit_mib} MiB)")
    if mib > args.limit_mib:
        print(f"[pack] ERROR: {archive} is {mib:.1f} MiB, over --limit-mib {args.limit_mib}", file=sys.stderr)
        return 1
    return 0


def _normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def plan(args) -> int:
    """What ``build`` would carry and strip, as JSON on stdout; reads only the requirements file."""
    pins = requirement_pins(pathlib.Path(args.requirements))
    carry = pathlib.Path(args.carry)
    print(json.dumps({
        "requirements": [f"{n}=={v}" for n, v in pins],
        "strip": [{"pattern": p, "why": why} for p, why in STRIP],
        "archive": str(carry / ARCHIVE), "manifest": str(carry / MANIFEST), "limit_mib": args.limit_mib,
    }, indent=1))
    return 0


def unpack(args) -> int:
    carry, dest = pathlib.Path(args.carry), pathlib.Path(args.dest)
    manifest = json.loads((carry / MANIFEST).read_text())
    archive = carry / manifest["archive"]
    digest = _sha256(archive)
    if digest != manifest["sha256"]:
        raise SystemExit(f"{archive}: sha256 {digest} differs from the manifest's {manifest['sha256']}")
    stamp = dest / STAMP
    if stamp.exists() and stamp.read_text().strip() == digest:
        print(f"[unpack] {dest} already holds this pack ({digest[:12]})")
        return 0
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    t0 = time.time()
    with tarfile.open(archive, "r:xz") as tar:
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, **kwargs)
    stamp.write_text(digest + "\n")
    print(f"[unpack] {manifest['files']} files into {dest} in {time.time() - t0:.1f} s")
    return 0


def main(argv=None) -> int:
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("build", "plan", "unpack"):
        p = sub.add_parser(name)
        p.add_argument("--carry", required=True, help="folder holding site.tar.xz and manifest.json")
        p.add_argument("--requirements", default=str(here / "pack-requirements.txt"))
        p.add_argument("--limit-mib", type=float, default=DEFAULT_LIMIT_MIB)
        if name == "build":
            p.add_argument("--site", required=True, help="folder pip installed the wheels into")
            p.add_argument("--extreme", action="store_true", help="xz -9e (slower, a little smaller)")
        if name == "unpack":
            p.add_argument("--dest", required=True)
    args = ap.parse_args(argv)
    return {"build": build, "plan": plan, "unpack": unpack}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
