"""Validate what a workflow run was asked to do, before any job acts on it.

GitHub passes event data (dispatch inputs, the pushed tag) to this script only through ``env:``;
nothing from an event is ever expanded inside a ``run:`` script. Each subcommand reads its
variables, rejects anything malformed with a message naming the input, and writes the
normalised values as step outputs (``$GITHUB_OUTPUT``, or stdout outside Actions).

``python -m scripts.workflow_inputs dispatch``
    Inputs of ``dispatch.yml``: ``INPUT_TORCH`` and ``INPUT_ROCM`` (one ``X.Y`` version each,
    empty = all; together they must select at least one docker/matrix.yaml entry),
    ``INPUT_UPLOAD`` (``true``/``false``), ``INPUT_REPO`` (Hub repo ``namespace/name``, empty =
    build.toml's ``[general.hub] repo-id``) and ``INPUT_BRANCH`` (Hub branch, empty =
    ``v<version>``; scripts.publish writes only ``v<version>``, so another branch is refused).
    Outputs: ``torch``, ``rocm``, ``upload``, ``repo``, ``branch``.

``python -m scripts.workflow_inputs matrix``
    ``MATRIX_TORCH``, ``MATRIX_ROCM`` (filters as above) and ``MATRIX_PR_ONLY`` (``true``/``false``)
    of build.yml: output ``matrix``, the GitHub matrix JSON of the selected entries exactly as
    ``python -m scripts.matrix --format github`` prints it, and ``count``.

``python -m scripts.workflow_inputs tested --build-dir build``
    Before publishing: ``build/`` must hold exactly the variants of ``MATRIX`` (the JSON above),
    each with ``checks.tests.ok`` true in its metadata.json (written by scripts.gpu_test).

``python -m scripts.workflow_inputs tag``
    ``GITHUB_REF_TYPE``/``GITHUB_REF_NAME`` of a tag push: the tag must be ``v<version>`` or
    ``v<version>.<minor>.<patch>`` where ``<version>`` is build.toml's ``[general] version``
    (the kernel's major version, i.e. its Hub branch ``v<version>``). Outputs: ``version``,
    ``tag``, ``repo``, ``branch``.

Exit status 0 when valid, 2 with ``error: <INPUT>: ...`` otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent

_VERSION_FILTER = re.compile(r"[0-9]+\.[0-9]+")
_HUB_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")
_TAG = re.compile(r"v(?P<major>[0-9]+)(?:\.(?P<minor>[0-9]+)\.(?P<patch>[0-9]+))?")


class InputError(ValueError):
    """A workflow input is malformed; the message starts with the input's name."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name


def parse_filter(name: str, raw: str) -> str:
    """One ``major.minor`` version (``"2.13"``), or ``""`` for no filter."""
    value = raw.strip()
    if value and not _VERSION_FILTER.fullmatch(value):
        raise InputError(name, f"expected one major.minor version like 2.13 (or empty for all), got {raw!r}")
    return value


def select_entries(torch: str, rocm: str, pr_only: bool, name: str) -> list:
    """The docker/matrix.yaml entries these filters select (scripts.matrix's own selection)."""
    from scripts import matrix

    try:
        return matrix.select(matrix.load(), torch or None, rocm or None, pr_only)
    except matrix.MatrixError as exc:
        raise InputError(name, str(exc)) from exc


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InputError(name, f"expected true or false, got {raw!r}")
    return value == "true"


def parse_repo(name: str, raw: str) -> str:
    parts = raw.strip().split("/")
    if len(parts) != 2 or not all(_HUB_PART.fullmatch(p) for p in parts) or any(".." in p for p in parts):
        raise InputError(name, f"expected a Hub repo id namespace/name (letters, digits, . _ -), got {raw!r}")
    return "/".join(parts)


def parse_branch(name: str, raw: str) -> str:
    value = raw.strip()
    bad = (
        not _BRANCH.fullmatch(value)
        or ".." in value
        or "//" in value
        or value.endswith(("/", ".", ".lock"))
        or value.startswith("refs/")
    )
    if bad:
        raise InputError(name, f"expected a branch name (letters, digits, . _ / -), got {raw!r}")
    return value


def read_manifest(path: Path) -> tuple[int, str]:
    """(version, default repo id) from build.toml."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError("build.toml", f"cannot read {path}: {exc}") from exc
    version = data.get("general", {}).get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InputError("build.toml", f"[general] version must be a non-negative integer, got {version!r}")
    repo = data.get("general", {}).get("hub", {}).get("repo-id", "")
    return version, repo


def validate_dispatch(env: Mapping[str, str], manifest: Path) -> dict[str, str]:
    version, default_repo = read_manifest(manifest)
    torch = parse_filter("INPUT_TORCH", env.get("INPUT_TORCH", ""))
    rocm = parse_filter("INPUT_ROCM", env.get("INPUT_ROCM", ""))
    select_entries(torch, rocm, False, "INPUT_TORCH/INPUT_ROCM")
    upload = parse_bool("INPUT_UPLOAD", env.get("INPUT_UPLOAD", "false"))
    repo_raw = env.get("INPUT_REPO", "").strip() or default_repo
    if not repo_raw:
        raise InputError("INPUT_REPO", "empty, and build.toml has no [general.hub] repo-id")
    repo = parse_repo("INPUT_REPO", repo_raw)
    branch = parse_branch("INPUT_BRANCH", env.get("INPUT_BRANCH", "").strip() or f"v{version}")
    if branch != f"v{version}":
        raise InputError(
            "INPUT_BRANCH",
            f"scripts.publish publishes version {version} to branch v{version} only, got {branch!r}",
        )
    return {
        "torch": torch,
        "rocm": rocm,
        "upload": "true" if upload else "false",
        "repo": repo,
        "branch": branch,
    }


def validate_tag(env: Mapping[str, str], manifest: Path) -> dict[str, str]:
    ref_type = env.get("GITHUB_REF_TYPE", "")
    if ref_type != "tag":
        raise InputError("GITHUB_REF_TYPE", f"a release runs on a tag push, got ref type {ref_type!r}")
    tag = env.get("GITHUB_REF_NAME", "")
    m = _TAG.fullmatch(tag)
    if not m:
        raise InputError("GITHUB_REF_NAME", f"release tags look like v1 or v1.2.3, got {tag!r}")
    version, repo = read_manifest(manifest)
    if int(m["major"]) != version:
        raise InputError(
            "GITHUB_REF_NAME",
            f"tag {tag} is major version {int(m['major'])} but build.toml says version = {version}; "
            f"bump build.toml or tag v{version}.x.y",
        )
    if not repo:
        raise InputError("build.toml", "[general.hub] repo-id is required to publish a release")
    return {"version": str(version), "tag": tag, "repo": parse_repo("build.toml", repo), "branch": f"v{version}"}


def emit_matrix(env: Mapping[str, str]) -> dict[str, str]:
    from scripts import matrix

    torch = parse_filter("MATRIX_TORCH", env.get("MATRIX_TORCH", ""))
    rocm = parse_filter("MATRIX_ROCM", env.get("MATRIX_ROCM", ""))
    pr_only = parse_bool("MATRIX_PR_ONLY", env.get("MATRIX_PR_ONLY", "false"))
    entries = select_entries(torch, rocm, pr_only, "MATRIX_TORCH/MATRIX_ROCM/MATRIX_PR_ONLY")
    doc = json.dumps(matrix.github_matrix(entries), separators=(",", ":"))
    return {"matrix": doc, "count": str(len(entries))}


def check_tested(env: Mapping[str, str], build_dir: Path) -> dict[str, str]:
    raw = env.get("MATRIX", "")
    try:
        include = json.loads(raw)["include"]
        expected = sorted(e["variant"] for e in include)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError("MATRIX", f"expected build.yml's matrix JSON {{include: [...]}}: {exc}") from exc
    present = sorted(p.name for p in build_dir.iterdir() if p.is_dir()) if build_dir.is_dir() else []
    if present != expected:
        missing = sorted(set(expected) - set(present))
        extra = sorted(set(present) - set(expected))
        raise InputError(
            "--build-dir",
            f"{build_dir} must hold the tested variants {expected}: missing {missing}, unexpected {extra}",
        )
    for name in expected:
        meta_path = build_dir / name / "metadata.json"
        try:
            tests = json.loads(meta_path.read_text()).get("checks", {}).get("tests", {})
        except (OSError, ValueError) as exc:
            raise InputError("--build-dir", f"cannot read {meta_path}: {exc}") from exc
        if tests.get("ok") is not True:
            raise InputError("--build-dir", f"{name} has no passing GPU test in metadata.json (checks.tests: {tests})")
    return {"tested": ",".join(expected)}


def write_outputs(values: Mapping[str, str], env: Mapping[str, str]) -> None:
    for key, value in values.items():
        if "\n" in value or "\r" in value:
            raise InputError(key, "output values are single lines")
    lines = "".join(f"{k}={v}\n" for k, v in values.items())
    target = env.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(lines)
    sys.stdout.write(lines)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    p = argparse.ArgumentParser(prog="python -m scripts.workflow_inputs", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["dispatch", "tag", "matrix", "tested"], help="what to validate")
    p.add_argument("--build-dir", type=Path, default=REPO_ROOT / "build", help="(tested) the downloaded variants")
    p.add_argument("--manifest", type=Path, default=REPO_ROOT / "build.toml", help="build.toml to read")
    args = p.parse_args(argv)
    try:
        if args.kind == "dispatch":
            values = validate_dispatch(env, args.manifest)
        elif args.kind == "tag":
            values = validate_tag(env, args.manifest)
        elif args.kind == "matrix":
            values = emit_matrix(env)
        else:
            values = check_tested(env, args.build_dir)
        write_outputs(values, env)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if env.get("GITHUB_ACTIONS") == "true":
            print(f"::error title=invalid input {exc.name}::{exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
