"""Publish the built variants to a Hugging Face Hub kernel repository.

    python -m scripts.publish --build-dir build [--repo ORG/gemm] [--dry-run | --require-token]
                              [--force --reason "..."] [--tag vX] [--max-ops-per-commit N]

What it does (all through huggingface_hub's HfApi; no hand-written HTTP):
- every `build/<variant>/` (a directory with metadata.json) goes to `build/<variant>/` on branch
  `v<version>` of the `kernel`-type repository (created if missing); `benchmarks/benchmark*.py` go
  beside it; the kernel card goes to `README.md` on `main`;
- local files are checked against their metadata digest (kernels_data) before anything is sent,
  so a truncated .so is never published;
- a variant whose files all equal the branch's (by hash, from the branch's tree) and whose metadata.json
  agrees in all but what a rebuild changes (the commit, the build record, the checks' details) is
  skipped; an unchanged re-release, or the same sources rebuilt from another commit, makes no commit and
  uploads nothing, while a file damaged on the Hub, a metadata-only fix or a clean rebuild of a dirty
  release is published;
- files of a rebuilt variant that are no longer built are deleted in the same commit; other
  variants on the branch are kept;
- large files are uploaded first (preupload: Xet when hf_xet is installed, else git-LFS), then one
  `create_commit` with every add and delete, guarded by `parent_commit`; past
  `--max-ops-per-commit` operations, or for a new version branch, the commits go to a side branch
  that is verified and then becomes the version branch, so it never holds half a release (the Hub has
  no way to move a branch: an existing one is deleted and re-created at the side branch's head, so for
  that moment `get_kernel(..., version=1)` finds no branch; a usual release, ~40 operations, commits
  directly);
- after the upload each published variant's metadata.json is fetched back and its digest compared;
- variants with a failed check, or without a passed digest, loader, abi and smoke check (for ROCm also
  the loader releases that load it and its machine code: REQUIRED_CHECKS), a
  dirty or unknown provenance, or a version that disagrees with
  build.toml or the release tag are refused unless `--force --reason "..."` (the reason goes into
  the commit message);
- the token comes only from HF_TOKEN or HF trusted publishing (OIDC, opted into with
  HF_OIDC_RESOURCE=kernels/ORG/NAME); without one, or with --dry-run, the plan is printed and
  nothing changes (exit 0), except that --require-token (the CI publish steps) makes a missing token
  an error;
- 429 and 5xx answers are retried with exponential backoff; 401/403 give a clear message.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import kernels_data
import tomllib
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    OIDCError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils.sha import git_hash

from scripts.kernel_card import load_benchmarks, render_card

REPO_TYPE = "kernel"
MAIN = "main"
DEFAULT_MAX_OPS = 100  # the Hub advises under ~100 files per commit (60 s server timeout)
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
EXIT_ERROR, EXIT_REFUSED = 1, 2


class PublishError(Exception):
    """A failure with a message meant for the user."""


class RefusedError(PublishError):
    """The release breaks a publishing rule and --force was not given."""


class ConcurrentPublishError(PublishError):
    """The target branch moved while publishing."""


# ---------------------------------------------------------------------------------------------
# Local side
# ---------------------------------------------------------------------------------------------
@dataclass
class LocalFile:
    rel: str  # path inside the variant (or benchmarks/) directory, '/'-separated
    path: Path
    sha256: str
    sha1: str  # git blob id

    @classmethod
    def read(cls, rel: str, path: Path) -> LocalFile:
        data = path.read_bytes()
        return cls(rel, path, hashlib.sha256(data).hexdigest(), git_hash(data))

    def same_as(self, remote: RepoFile | None) -> bool:
        if remote is None:
            return False
        if remote.lfs is not None:
            return remote.lfs.sha256 == self.sha256
        return remote.blob_id == self.sha1


@dataclass
class LocalVariant:
    name: str
    dir: Path
    meta: dict[str, Any]
    files: dict[str, LocalFile]
    refusals: list[str] = field(default_factory=list)

    @property
    def version(self) -> int:
        return self.meta["version"]


def _variant_files(variant_dir: Path) -> dict[str, LocalFile]:
    files = {}
    for path in sorted(variant_dir.rglob("*")):
        rel = path.relative_to(variant_dir).as_posix()
        if not path.is_file() or "__pycache__" in rel.split("/") or rel.endswith(".pyc"):
            continue
        files[rel] = LocalFile.read(rel, path)
    return files


def verify_local_variant(variant_dir: Path) -> dict[str, Any]:
    """Validate metadata.json and check every file against its digest; return the metadata dict."""
    meta_path = variant_dir / "metadata.json"
    try:
        parsed = kernels_data.Metadata.read_from_file(meta_path)
    except ValueError as e:
        raise PublishError(f"{variant_dir.name}: invalid metadata.json: {e}") from e
    if parsed.digest is None:
        raise PublishError(f"{variant_dir.name}: metadata.json has no digest; rebuild or re-run the checks")
    actual = kernels_data.Digest.hash_variant(parsed.digest.algorithm, variant_dir)
    try:
        parsed.digest.validate(actual)
    except kernels_data.DigestValidationError as e:
        details = "; ".join(str(v) for v in e.violations)
        raise PublishError(
            f"{variant_dir.name}: files do not match the metadata digest ({details}); "
            "the build is incomplete or was modified: rebuild it"
        ) from e
    return json.loads(meta_path.read_text())


def check_variant_name(name: str, meta: dict[str, Any]) -> None:
    """The loader's own parser must accept the directory name, its backend must match the metadata, and it
    must be the name the build gave it: the digest does not cover the name, and a renamed directory (a
    torch 2.13 build under torch212-...) would be served to users of another torch."""
    from scripts import variant

    try:
        named = variant.named_backend(name)
    except ValueError as e:
        raise PublishError(f"{name}: not a variant name the kernels loader accepts ({e})") from e
    declared = str((meta.get("backend") or {}).get("type", "")).lower()
    if named != declared:
        raise PublishError(f"{name}: the name says backend {named!r} but metadata.json says {declared!r}")
    built = (meta.get("build") or {}).get("variant")
    if built != name:
        raise PublishError(
            f"{name}: metadata.json says this directory was built as {built!r}; rebuild it under its own name"
        )


def discover_variants(build_dir: Path) -> list[LocalVariant]:
    if not build_dir.is_dir():
        raise PublishError(f"--build-dir {build_dir}: not a directory")
    variants = []
    for d in sorted(p for p in build_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (d / "metadata.json").is_file():
            continue
        meta = verify_local_variant(d)
        check_variant_name(d.name, meta)
        variants.append(LocalVariant(d.name, d, meta, _variant_files(d)))
    if not variants:
        raise PublishError(f"--build-dir {build_dir}: no variant directories (with metadata.json) found")
    return variants


def tag_version(tag: str) -> int:
    m = re.fullmatch(r"v?(\d+)(\.\d+)*", tag.strip())
    if not m:
        raise PublishError(f"--tag {tag!r}: expected a release tag like v1 or v1.2.0")
    return int(m.group(1))


def read_build_toml(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            return tomllib.load(f).get("general", {})
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PublishError(f"{path}: cannot read it as TOML ({e})") from None


# The checks scripts.check records, each of which must be there and ok (a build whose check failed part
# way records the failure; one from before these checks existed records nothing).
REQUIRED_CHECKS = {
    "digest": "scripts.check: the files match metadata.json",
    "loader": "scripts.check: the loader chooses this variant",
    "abi": "scripts.check: manylinux_2_28 / abi3",
    "smoke": "scripts.check: loaded through kernels, one call",
}
# ROCm variants are found only by some loader releases (scripts/loaders.py): prove which; and the shipped
# GPU code is held to the gfx942 gate's rules.
REQUIRED_ROCM_CHECKS = {
    "loaders": "scripts.build/check --loaders",
    "machine_code": "scripts.check: the .so's gfx942 code objects",
}


def release_refusals(
    variants: list[LocalVariant], general: dict[str, Any] | None, toml_path: Path, tag: str | None
) -> list[str]:
    """Fill each variant's refusals; return release-wide refusals."""
    release: list[str] = []
    if general is None:
        release.append(f"cannot check the version: {toml_path} not found")
    tagged = tag_version(tag) if tag else None
    for v in variants:
        checks = v.meta.get("checks")
        if not isinstance(checks, dict) or not checks:
            v.refusals.append("no checks recorded in metadata.json")
        else:
            required = REQUIRED_CHECKS
            if (v.meta.get("backend") or {}).get("type") == "rocm":
                required = {**required, **REQUIRED_ROCM_CHECKS}
            for name in required:
                if name not in checks:
                    v.refusals.append(f"no '{name}' check recorded ({required[name]})")
            for name, result in sorted(checks.items()):
                if not isinstance(result, dict) or result.get("ok") is not True:
                    v.refusals.append(f"check '{name}' did not pass")
            loader = checks.get("loader")
            chosen = loader.get("chosen") if isinstance(loader, dict) else None
            if chosen != v.name:
                v.refusals.append(f"the loader check chose {chosen!r}, not this directory")
        prov = v.meta.get("provenance")
        kernel = prov.get("kernel") if isinstance(prov, dict) else None
        if not isinstance(kernel, dict) or "dirty" not in kernel:
            v.refusals.append("unknown provenance (no provenance.kernel.dirty)")
        elif kernel.get("dirty") is not False or (prov.get("kernel-builder") or {}).get("dirty"):
            v.refusals.append("built from a dirty tree")
        if general is not None:
            if general.get("version") != v.version:
                v.refusals.append(f"version {v.version} disagrees with build.toml version {general.get('version')}")
            if general.get("name") != v.meta.get("name"):
                v.refusals.append(f"name {v.meta.get('name')!r} disagrees with build.toml name {general.get('name')!r}")
        if tagged is not None and tagged != v.version:
            v.refusals.append(f"version {v.version} disagrees with release tag {tag}")
    return release


# ---------------------------------------------------------------------------------------------
# Hub side
# ---------------------------------------------------------------------------------------------
def resolve_token(endpoint: str | None) -> str | None:
    """HF_TOKEN, else a trusted-publishing token when HF_OIDC_RESOURCE opts in (CI), else None.

    Never the login stored on the machine. Trusted publishing: the CI job (GitHub Actions with
    `permissions: id-token: write`, or HF_OIDC_ID_TOKEN set) exchanges its OIDC id token at the Hub
    for a short-lived token scoped to HF_OIDC_RESOURCE (e.g. `kernels/ORG/gemm`).
    """
    token = (os.environ.get("HF_TOKEN") or "").strip()
    if token:
        return token
    resource = (os.environ.get("HF_OIDC_RESOURCE") or "").strip()
    if resource:
        from huggingface_hub._oidc import oidc_login  # the exchange huggingface_hub's own get_token uses

        try:
            result = oidc_login(
                resource=resource, subject_token=os.environ.get("HF_OIDC_ID_TOKEN") or None, endpoint=endpoint
            )
        except (OIDCError, HfHubHTTPError) as e:
            status = _status(e)
            raise PublishError(
                f"trusted publishing (HF_OIDC_RESOURCE={resource}) failed"
                f"{f' with HTTP {status}' if status else ''}: {str(e).splitlines()[0]}. Check that the Hub "
                "repository trusts this workflow and that the job has `permissions: id-token: write`."
            ) from e
        return result["access_token"]
    return None


class _TokenEnvironment:
    """While publishing, make huggingface_hub's implicit token lookup return our token.

    Some of its calls resolve the implicit token even when given one (e.g. the LFS batch request
    builds headers with token=None); with HF_OIDC_RESOURCE set that would run a second OIDC
    exchange against the default endpoint. The environment is restored afterwards.
    """

    def __init__(self, token: str | None):
        self.token = token
        self.saved: dict[str, str | None] = {}

    def __enter__(self):
        if self.token:
            for name in ("HF_TOKEN", "HF_OIDC_RESOURCE"):
                self.saved[name] = os.environ.get(name)
            os.environ["HF_TOKEN"] = self.token
            os.environ.pop("HF_OIDC_RESOURCE", None)
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None)


def _retry_after(e: BaseException) -> float | None:
    response = getattr(e, "response", None)
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Hub:
    """HfApi calls with retries on transient errors (429, 5xx, connection errors)."""

    def __init__(
        self,
        api: HfApi,
        repo_id: str,
        retries: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        log: Callable[[str], None] = print,
    ):
        self.api, self.repo_id = api, repo_id
        self.retries, self.base_delay, self.max_delay, self.log = retries, base_delay, max_delay, log

    def call(self, what: str, fn: Callable, *args, **kwargs):
        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except (HfHubHTTPError, httpx2.TransportError, LocalEntryNotFoundError) as e:
                status = _status(e)
                transient = status in RETRY_STATUS or (status is None and not isinstance(e, HfHubHTTPError))
                if not transient or attempt >= self.retries:
                    raise
                delay = _retry_after(e)
                delay = self.base_delay * 2**attempt if delay is None else delay
                delay = min(delay, self.max_delay)
                attempt += 1
                self.log(
                    f"  {what}: {'HTTP ' + str(status) if status else type(e).__name__}, "
                    f"retry {attempt}/{self.retries} in {delay:g}s"
                )
                time.sleep(delay)

    # convenience wrappers -------------------------------------------------------------------
    def refs(self) -> dict[str, str] | None:
        """Branch name -> head commit, or None when the repository does not exist (or is not visible)."""
        try:
            refs = self.call("list refs", self.api.list_repo_refs, self.repo_id, repo_type=REPO_TYPE)
        except RepositoryNotFoundError:
            return None
        return {b.name: b.target_commit for b in refs.branches}

    def tree(self, revision: str) -> dict[str, RepoFile]:
        entries = self.call(
            "list files",
            lambda: list(self.api.list_repo_tree(self.repo_id, repo_type=REPO_TYPE, revision=revision, recursive=True)),
        )
        return {e.path: e for e in entries if isinstance(e, RepoFile)}

    def read_file(self, path: str, revision: str, cache_dir: str) -> bytes | None:
        try:
            local = self.call(
                f"download {path}",
                self.api.hf_hub_download,
                self.repo_id,
                path,
                repo_type=REPO_TYPE,
                revision=revision,
                cache_dir=cache_dir,
            )
        except (RemoteEntryNotFoundError, RevisionNotFoundError):  # the Hub says: no such file
            return None
        return Path(local).read_bytes()

    def read_json(self, path: str, revision: str, cache_dir: str) -> dict[str, Any] | None:
        data = self.read_file(path, revision, cache_dir)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------
@dataclass
class VariantPlan:
    name: str
    action: str  # "new", "update", "skip"
    adds: list[tuple[str, LocalFile]] = field(default_factory=list)  # (path in repo, file)
    deletes: list[str] = field(default_factory=list)
    unchanged: int = 0
    reason: str = ""
    # A variant skipped as rebuilt: the branch's metadata.json, which the card keeps (None: the local one).
    branch_meta: dict[str, Any] | None = None


@dataclass
class Plan:
    repo_id: str
    branch: str
    version: int
    repo_exists: bool
    heads: dict[str, str]
    variants: list[VariantPlan]
    kept: dict[str, dict[str, Any]]  # variants already on the branch and not rebuilt -> metadata
    bench_adds: list[tuple[str, LocalFile]]
    bench_deletes: list[str]
    card: bytes
    card_action: str  # "add", "update", "unchanged"
    refusals: list[str]  # release-wide and per-variant, formatted
    notes: list[str] = field(default_factory=list)

    @property
    def branch_head(self) -> str | None:
        return self.heads.get(self.branch)

    @property
    def new_branch(self) -> bool:
        return self.branch_head is None

    @property
    def base(self) -> str | None:
        """The commit the release builds on: the version branch, or main for a new branch."""
        return self.branch_head or self.heads.get(MAIN)

    @property
    def adds(self) -> list[tuple[str, LocalFile]]:
        return [a for v in self.variants for a in v.adds] + self.bench_adds

    @property
    def deletes(self) -> list[str]:
        return [d for v in self.variants for d in v.deletes] + self.bench_deletes

    @property
    def n_ops(self) -> int:
        return len(self.adds) + len(self.deletes)

    def operations(self) -> list[CommitOperationAdd | CommitOperationDelete]:
        ops: list[CommitOperationAdd | CommitOperationDelete] = [
            CommitOperationAdd(path_in_repo=p, path_or_fileobj=str(f.path)) for p, f in self.adds
        ]
        ops += [CommitOperationDelete(path_in_repo=p, is_folder=False) for p in self.deletes]
        return ops


def _metadata_that_matters(meta: dict[str, Any]) -> dict[str, Any]:
    """metadata.json less what changes with every rebuild of the same sources: the commit built from, the
    build's own record (host, paths) and the checks' details (each check's pass or fail stays). Two builds
    that agree here and in every file are the same release."""
    kept = {k: v for k, v in meta.items() if k not in ("build", "checks")}
    kept["checks"] = {name: (c or {}).get("ok") for name, c in (meta.get("checks") or {}).items()}
    provenance = dict(meta.get("provenance") or {})
    provenance["kernel"] = {k: v for k, v in (provenance.get("kernel") or {}).items() if k != "commit"}
    kept["provenance"] = provenance
    return kept


def _variant_plan(
    v: LocalVariant, remote: dict[str, RepoFile], remote_meta: Callable[[], dict[str, Any] | None]
) -> VariantPlan:
    """remote_meta reads the branch's metadata.json: only where metadata.json alone differs (one download)."""
    prefix = f"build/{v.name}/"
    remote_here = {p[len(prefix) :]: f for p, f in remote.items() if p.startswith(prefix)}
    # Every file is compared with the branch's, not only the digests: a file damaged or replaced on the
    # Hub is published again.
    changed = {rel: f for rel, f in v.files.items() if not f.same_as(remote_here.get(rel))}
    stale = [prefix + rel for rel in sorted(remote_here) if rel not in v.files]
    if not stale and not changed:
        return VariantPlan(v.name, "skip", unchanged=len(v.files), reason="files identical to the branch")
    if not stale and set(changed) == {"metadata.json"}:
        meta = remote_meta()
        if meta is not None and _metadata_that_matters(meta) == _metadata_that_matters(v.meta):
            reason = "files and metadata match the branch (rebuilt)"
            return VariantPlan(v.name, "skip", unchanged=len(v.files), reason=reason, branch_meta=meta)
    plan = VariantPlan(v.name, "update" if remote_here else "new")
    plan.adds = [(prefix + rel, f) for rel, f in changed.items()]
    plan.unchanged = len(v.files) - len(changed)
    plan.deletes = stale
    return plan


def _benchmarks(bench_dir: Path | None, remote: dict[str, RepoFile], new_branch: bool):
    if bench_dir is None or not bench_dir.is_dir():
        return [], []
    local = {p.name: LocalFile.read(p.name, p) for p in sorted(bench_dir.glob("benchmark*.py")) if p.is_file()}
    adds = [(f"benchmarks/{n}", f) for n, f in local.items() if not f.same_as(remote.get(f"benchmarks/{n}"))]
    deletes = []
    for path in sorted(remote):
        if not path.startswith("benchmarks/") or path[len("benchmarks/") :] in local:
            continue
        name = path.rsplit("/", 1)[-1]
        if new_branch or (
            "/" not in path[len("benchmarks/") :] and name.startswith("benchmark") and name.endswith(".py")
        ):
            deletes.append(path)
    return adds, deletes


def make_plan(
    hub: Hub | None,
    variants: list[LocalVariant],
    release_problems: list[str],
    bench_dir: Path | None,
    results_dir: Path | None,
    cache_dir: str,
    notes: list[str],
) -> Plan:
    versions = sorted({v.version for v in variants})
    if len(versions) != 1:
        raise PublishError(f"variants disagree on the version ({versions}); publish one version at a time")
    version = versions[0]
    branch = f"v{version}"
    repo_id = hub.repo_id if hub else "<no --repo>"

    heads: dict[str, str] | None = {}
    remote: dict[str, RepoFile] = {}
    if hub is not None:
        heads = hub.refs()
        if heads is None:
            notes.append(f"repository kernels/{repo_id} does not exist (or is not visible): it will be created")
            heads = {}
    repo_exists = bool(heads)
    base = heads.get(branch) or heads.get(MAIN)
    if hub is not None and base is not None:
        remote = hub.tree(base)
    new_branch = branch not in heads

    def remote_meta(name: str) -> dict[str, Any] | None:
        path = f"build/{name}/metadata.json"
        if hub is None or base is None or path not in remote:
            return None
        return hub.read_json(path, base, cache_dir)

    plans = []
    published_meta: dict[str, dict[str, Any]] = {}  # what the branch will hold, for the card
    for v in variants:
        plans.append(_variant_plan(v, remote, lambda name=v.name: None if new_branch else remote_meta(name)))
        published_meta[v.name] = plans[-1].branch_meta or v.meta
    local_names = {v.name for v in variants}
    remote_variants = sorted({p.split("/")[1] for p in remote if p.startswith("build/") and p.count("/") >= 2})
    kept: dict[str, dict[str, Any]] = {}
    if new_branch:  # a new version branch holds only this release (like kernel-builder upload)
        stale = [
            p
            for p in sorted(remote)
            if p.startswith("build/") and not any(p.startswith(f"build/{n}/") for n in local_names)
        ]
        if stale:
            plans.append(VariantPlan("(not in this release)", "update", deletes=stale))
    else:
        for name in remote_variants:
            if name not in local_names:
                kept[name] = remote_meta(name) or {}
    bench_adds, bench_deletes = _benchmarks(bench_dir, remote, new_branch)

    card_variants = {**kept, **published_meta}
    card = render_card(repo_id, version, card_variants, load_benchmarks(results_dir) if results_dir else []).encode()
    card_action = "add"
    if hub is not None and MAIN in heads:
        current = hub.read_file("README.md", heads[MAIN], cache_dir)
        card_action = "unchanged" if current == card else ("update" if current is not None else "add")

    refusals = list(release_problems) + [f"{v.name}: {r}" for v in variants for r in v.refusals]
    return Plan(
        repo_id,
        branch,
        version,
        repo_exists,
        heads,
        plans,
        kept,
        bench_adds,
        bench_deletes,
        card,
        card_action,
        refusals,
        notes,
    )


def format_plan(plan: Plan, max_ops: int) -> str:
    lines = [
        f"Release gemm v{plan.version} -> kernels/{plan.repo_id}, branch {plan.branch} "
        + (
            f"(new; from main {plan.heads[MAIN][:8]})"
            if plan.new_branch and MAIN in plan.heads
            else "(new)"
            if plan.new_branch
            else f"(at {plan.branch_head[:8]})"
        )
    ]
    for note in plan.notes:
        lines.append(f"  note: {note}")
    for v in plan.variants:
        if v.action == "skip":
            lines.append(f"  {v.name}: skip ({v.reason}; {v.unchanged} files)")
            continue
        lines.append(
            f"  {v.name}: {v.action}: {len(v.adds)} add(s), {len(v.deletes)} delete(s), {v.unchanged} unchanged"
        )
        lines += [f"    + {p} ({f.path.stat().st_size} bytes)" for p, f in v.adds]
        lines += [f"    - {p}" for p in v.deletes]
    for name in sorted(plan.kept):
        lines.append(f"  {name}: kept (already on {plan.branch}, not rebuilt)")
    if plan.bench_adds or plan.bench_deletes:
        lines.append(f"  benchmarks: {len(plan.bench_adds)} add(s), {len(plan.bench_deletes)} delete(s)")
        lines += [f"    + {p}" for p, _ in plan.bench_adds] + [f"    - {p}" for p in plan.bench_deletes]
    lines.append(f"  README.md on main: {plan.card_action}")
    n = plan.n_ops
    if n == 0:
        lines.append(f"  {plan.branch}: nothing to commit")
    elif plan.new_branch or n > max_ops:
        k = -(-n // max_ops)
        lines.append(
            f"  {plan.branch}: {n} operation(s) in {k} commit(s) on a side branch, verified, "
            f"then {'created as' if plan.new_branch else 'moved to'} {plan.branch}"
        )
    else:
        lines.append(f"  {plan.branch}: {n} operation(s) in one commit (parent {plan.branch_head[:8]})")
    for r in plan.refusals:
        lines.append(f"  REFUSED: {r}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------
class Publisher:
    def __init__(
        self,
        hub: Hub,
        plan: Plan,
        variants: list[LocalVariant],
        max_ops: int,
        message: str,
        description: str,
        cache_dir: str,
    ):
        self.hub, self.plan, self.max_ops = hub, plan, max_ops
        self.local = {v.name: v for v in variants}
        self.message, self.description, self.cache_dir = message, description, cache_dir
        self.log = hub.log

    @property
    def api(self) -> HfApi:
        return self.hub.api

    def _commit(self, revision: str, ops: list, parent: str, message: str) -> str:
        """One create_commit guarded by parent_commit; retried on transient errors."""
        hub, attempt, retried = self.hub, 0, False
        while True:
            try:
                info = self.api.create_commit(
                    self.plan.repo_id,
                    ops,
                    commit_message=message,
                    commit_description=self.description,
                    repo_type=REPO_TYPE,
                    revision=revision,
                    parent_commit=parent,
                )
                return info.oid
            except (HfHubHTTPError, httpx2.TransportError) as e:
                status = _status(e)
                if status in (409, 412):
                    # After a lost response the first attempt may have landed: accept it if so.
                    if retried:
                        head = (hub.refs() or {}).get(revision)
                        if head and self._holds(head, ops):
                            return head
                    raise ConcurrentPublishError(
                        f"branch {revision} moved since {parent[:8]} (another publish?): this commit to "
                        f"{revision} was not made; re-run to publish on top of the new head"
                    ) from e
                transient = status in RETRY_STATUS or (status is None and isinstance(e, httpx2.TransportError))
                if not transient or attempt >= hub.retries:
                    raise
                delay = _retry_after(e)
                delay = min(hub.base_delay * 2**attempt if delay is None else delay, hub.max_delay)
                attempt, retried = attempt + 1, True
                self.log(
                    f"  commit: {'HTTP ' + str(status) if status else type(e).__name__}, "
                    f"retry {attempt}/{hub.retries} in {delay:g}s"
                )
                time.sleep(delay)

    def _holds(self, revision: str, ops: list) -> bool:
        tree = self.hub.tree(revision)
        for op in ops:
            if isinstance(op, CommitOperationDelete):
                if op.path_in_repo in tree:
                    return False
            else:
                with op.as_file() as f:
                    data = f.read()
                local = LocalFile(
                    op.path_in_repo, Path(op.path_in_repo), hashlib.sha256(data).hexdigest(), git_hash(data)
                )
                if not local.same_as(tree.get(op.path_in_repo)):
                    return False
        return True

    def verify(self, revision: str) -> None:
        """Fetch each published variant's metadata back and compare with the local build."""
        tree = self.hub.tree(revision)
        problems = []
        for vp in self.plan.variants:
            v = self.local.get(vp.name)
            if v is None or vp.action == "skip":
                continue
            prefix = f"build/{v.name}/"
            meta = self.hub.read_json(prefix + "metadata.json", revision, self.cache_dir)
            if meta is None:
                problems.append(f"{v.name}: metadata.json missing after upload")
            elif meta.get("digest") != v.meta.get("digest"):
                problems.append(f"{v.name}: published digest differs from the local build")
            remote = {p[len(prefix) :]: f for p, f in tree.items() if p.startswith(prefix)}
            if set(remote) != set(v.files):
                problems.append(
                    f"{v.name}: published files differ: missing {sorted(set(v.files) - set(remote))}, "
                    f"extra {sorted(set(remote) - set(v.files))}"
                )
            problems += [
                f"{v.name}: {rel} differs from the local file"
                for rel, f in v.files.items()
                if rel in remote and not f.same_as(remote[rel])
            ]
        problems += [f"{p} differs after upload" for p, f in self.plan.bench_adds if not f.same_as(tree.get(p))]
        if problems:
            raise PublishError(f"verification of {revision[:8]} failed:\n  " + "\n  ".join(problems))
        self.log(f"  verified {revision[:8]}: published digests match the local build")

    def publish_branch(self) -> str | None:
        plan = self.plan
        ops = plan.operations()
        if not ops and plan.new_branch:  # main already holds exactly this release
            self.hub.call(
                "create branch",
                self.api.create_branch,
                plan.repo_id,
                branch=plan.branch,
                revision=plan.base,
                repo_type=REPO_TYPE,
            )
            return plan.base
        if not ops:
            self.log(f"{plan.branch}: nothing to commit (unchanged re-release)")
            return None
        if plan.new_branch or len(ops) > self.max_ops:
            return self._staged(ops)
        adds = [op for op in ops if isinstance(op, CommitOperationAdd)]
        self.log(f"uploading {len(adds)} file(s) to {plan.branch} ...")
        self.hub.call(
            "upload",
            self.api.preupload_lfs_files,
            plan.repo_id,
            additions=adds,
            repo_type=REPO_TYPE,
            revision=plan.branch,
            free_memory=False,
        )
        oid = self._commit(plan.branch, ops, plan.branch_head, self.message)
        self.log(f"committed {oid[:8]} to {plan.branch} ({len(ops)} operation(s))")
        self.verify(oid)
        return oid

    def _staged(self, ops: list) -> str:
        plan, hub = self.plan, self.hub
        side = f"{plan.branch}-publish-{uuid.uuid4().hex[:8]}"
        chunks = [ops[i : i + self.max_ops] for i in range(0, len(ops), self.max_ops)]
        self.log(f"staging {len(ops)} operation(s) in {len(chunks)} commit(s) on side branch {side}")
        hub.call(
            "create side branch",
            self.api.create_branch,
            plan.repo_id,
            branch=side,
            revision=plan.base,
            repo_type=REPO_TYPE,
        )
        keep_side = False
        try:
            adds = [op for op in ops if isinstance(op, CommitOperationAdd)]
            hub.call(
                "upload",
                self.api.preupload_lfs_files,
                plan.repo_id,
                additions=adds,
                repo_type=REPO_TYPE,
                revision=side,
                free_memory=False,
            )
            head = plan.base
            for i, chunk in enumerate(chunks, 1):
                suffix = f" (part {i}/{len(chunks)})" if len(chunks) > 1 else ""
                head = self._commit(side, chunk, head, self.message + suffix)
                self.log(f"  staged commit {i}/{len(chunks)}: {head[:8]}")
            self.verify(head)
            current = (hub.refs() or {}).get(plan.branch)
            if current != plan.branch_head:
                raise ConcurrentPublishError(
                    f"branch {plan.branch} moved during staging "
                    f"({(plan.branch_head or 'absent')[:8]} -> {(current or 'absent')[:8]}); "
                    "not promoting: re-run"
                )
            if plan.branch_head is not None:
                keep_side = True  # until the version branch points at the release again
                hub.call("move branch", self.api.delete_branch, plan.repo_id, branch=plan.branch, repo_type=REPO_TYPE)
            try:
                hub.call(
                    "create branch",
                    self.api.create_branch,
                    plan.repo_id,
                    branch=plan.branch,
                    revision=head,
                    repo_type=REPO_TYPE,
                )
            except HfHubHTTPError as e:
                if _status(e) == 409:
                    raise ConcurrentPublishError(f"branch {plan.branch} was created by someone else meanwhile") from e
                if keep_side:
                    raise PublishError(
                        f"branch {plan.branch} was deleted but could not be re-created at {head}: "
                        f"the release is intact on branch {side}; recreate {plan.branch} from it"
                    ) from e
                raise
            keep_side = False
            self.log(f"{plan.branch} now at {head[:8]}")
            return head
        finally:
            if not keep_side:
                try:
                    hub.call(
                        "delete side branch", self.api.delete_branch, plan.repo_id, branch=side, repo_type=REPO_TYPE
                    )
                except (HfHubHTTPError, httpx2.TransportError) as e:
                    self.log(f"  warning: could not delete side branch {side}: {_status(e) or e}")

    def publish_card(self) -> str | None:
        plan = self.plan
        if plan.card_action == "unchanged":
            return None
        op = CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=plan.card)
        oid = self._commit(MAIN, [op], plan.heads[MAIN], f"Kernel card for gemm v{plan.version}")
        self.log(f"README.md on main: {plan.card_action} ({oid[:8]})")
        return oid


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def explain_http_error(e: HfHubHTTPError, repo_id: str) -> str:
    status = _status(e)
    server = ""
    response = getattr(e, "response", None)
    if response is not None:
        server = response.headers.get("X-Error-Message") or ""
        if not server:
            try:
                server = (response.json() or {}).get("error", "")
            except ValueError:
                server = ""
    if status == 401:
        return (
            "the Hub rejected the token (401 Unauthorized): HF_TOKEN is invalid or expired. Create a "
            "token with write access at https://huggingface.co/settings/tokens and export it as HF_TOKEN "
            "(or use trusted publishing in CI)."
        )
    if status == 403:
        if "approv" in server.lower():
            return (
                f"the Hub refused kernels/{repo_id} (403): {server}. Kernel repositories need approval by "
                "Hugging Face before the first publish: request it (e.g. a discussion on "
                "https://huggingface.co/kernels-community) and re-run once approved."
            )
        return (
            f"the Hub refused to let this token write kernels/{repo_id} (403 Forbidden"
            f"{': ' + server if server else ''}). Use a token with write access to the "
            f"'{repo_id.split('/')[0]}' namespace; a new kernel repository may also still await approval "
            "by Hugging Face."
        )
    return f"Hub error {status}: {server or str(e).splitlines()[0]}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts.publish", description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", type=Path, required=True, help="directory holding the variant dirs")
    p.add_argument("--repo", help="ORG/NAME of the kernel repository (default: build.toml [general.hub] repo-id)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    p.add_argument(
        "--require-token",
        action="store_true",
        help="fail unless HF_TOKEN or trusted publishing (HF_OIDC_RESOURCE) gives a token, instead of "
        "printing the plan and exiting 0 (CI: a job that publishes nothing must not pass)",
    )
    p.add_argument("--force", action="store_true", help="publish despite refusals (needs --reason)")
    p.add_argument("--reason", help="why --force is used; goes into the commit message")
    p.add_argument(
        "--tag",
        help="release tag (e.g. v1 or v1.2.0) whose major must equal the version "
        "(default: GITHUB_REF_NAME when GITHUB_REF_TYPE=tag)",
    )
    p.add_argument("--build-toml", type=Path, help="default: build.toml next to --build-dir")
    p.add_argument("--benchmarks-dir", type=Path, help="default: benchmarks/ next to --build-dir")
    p.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or huggingface.co)")
    p.add_argument(
        "--max-ops-per-commit",
        type=int,
        default=DEFAULT_MAX_OPS,
        help=f"above this many operations, stage commits on a side branch (default {DEFAULT_MAX_OPS})",
    )
    p.add_argument("--retries", type=int, default=5, help="retries on 429/5xx (default 5)")
    p.add_argument("--retry-delay", type=float, default=1.0, help="first backoff delay in seconds (default 1)")
    return p


def main(argv: list[str] | None = None, log: Callable[[str], None] = print) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.force and not (args.reason or "").strip():
        parser.error('--force needs --reason "..." (it goes into the commit message)')
    if args.reason and not args.force:
        parser.error("--reason is only meaningful with --force")
    if args.require_token and args.dry_run:
        parser.error("--require-token and --dry-run contradict each other: a dry run never publishes")
    if args.max_ops_per_commit < 1:
        parser.error("--max-ops-per-commit must be at least 1")
    if args.retries < 0:
        parser.error(f"--retries must be 0 or more, got {args.retries}")
    if not args.retry_delay >= 0:  # also refuses nan
        parser.error(f"--retry-delay must be 0 or more seconds, got {args.retry_delay}")
    if args.repo is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", args.repo):
        parser.error(f"--repo {args.repo!r}: expected ORG/NAME")

    root = args.build_dir.resolve().parent
    toml_path = args.build_toml or root / "build.toml"
    bench_dir = args.benchmarks_dir or root / "benchmarks"
    tag = args.tag
    if tag is None and os.environ.get("GITHUB_REF_TYPE") == "tag":
        tag = os.environ.get("GITHUB_REF_NAME") or None

    repo_id = args.repo
    try:
        general = read_build_toml(toml_path)
        repo_id = args.repo or ((general or {}).get("hub") or {}).get("repo-id")
        variants = discover_variants(args.build_dir)
        release_problems = release_refusals(variants, general, toml_path, tag)
        token = (os.environ.get("HF_TOKEN") or "").strip() or None if args.dry_run else resolve_token(args.endpoint)
        if token is None and args.require_token:
            raise PublishError(
                "--require-token: no token. Set HF_TOKEN, or HF_OIDC_RESOURCE=kernels/ORG/NAME for trusted "
                "publishing (the job needs `permissions: id-token: write`)"
            )
        plan_only = args.dry_run or token is None
        notes: list[str] = []
        if repo_id is None:
            if not plan_only:
                raise PublishError("no repository: pass --repo ORG/NAME (or set [general.hub] repo-id in build.toml)")
            notes.append("no --repo given: planned against an empty repository")
        api = HfApi(endpoint=args.endpoint, token=token if token else False, library_name="gemm-publish")
        # A plan is a courtesy: do not spend half a minute retrying an unreachable Hub for it.
        retries = min(args.retries, 1) if plan_only else args.retries
        hub = Hub(api, repo_id, retries=retries, base_delay=args.retry_delay, log=log) if repo_id else None

        with tempfile.TemporaryDirectory(prefix="gemm-publish-") as cache_dir, _TokenEnvironment(token):
            try:
                plan = make_plan(hub, variants, release_problems, bench_dir, bench_dir / "results", cache_dir, notes)
            except (HfHubHTTPError, httpx2.TransportError, LocalEntryNotFoundError, OfflineModeIsEnabled) as e:
                if not plan_only or (isinstance(e, HfHubHTTPError) and _status(e) in (401, 403)):
                    raise
                notes.append(f"could not read the Hub ({type(e).__name__}): planned against an empty repository")
                plan = make_plan(None, variants, release_problems, bench_dir, bench_dir / "results", cache_dir, notes)
                plan.repo_id = repo_id
            log(format_plan(plan, args.max_ops_per_commit))

            if plan_only:
                why = "--dry-run" if args.dry_run else "no HF_TOKEN (nor trusted publishing)"
                log(f"Plan only ({why}): nothing was changed.")
                return 0
            if plan.refusals and not args.force:
                raise RefusedError(
                    f"refusing to publish ({len(plan.refusals)} problem(s) above); fix them, "
                    'or re-run with --force --reason "..."'
                )

            forced = f" [forced: {args.reason.strip()}]" if args.force and plan.refusals else ""
            changed = [v.name for v in plan.variants if v.action != "skip" and v.name in {x.name for x in variants}]
            message = f"Publish gemm v{plan.version}: {len(changed)} variant(s) updated{forced}"
            description = "\n".join(
                [f"- {v.name}: {v.action}, +{len(v.adds)} -{len(v.deletes)}" for v in plan.variants]
                + (
                    ["\nForced despite: " + "; ".join(plan.refusals), f"Reason: {args.reason.strip()}"]
                    if forced
                    else []
                )
            )

            if not plan.repo_exists:
                log(f"creating kernel repository {repo_id}")
                hub.call("create repo", api.create_repo, repo_id, repo_type=REPO_TYPE, exist_ok=True)
                plan.heads = hub.refs() or {}
                if plan.base is None:
                    raise PublishError(f"kernels/{repo_id} has no main branch after creation")
            publisher = Publisher(hub, plan, variants, args.max_ops_per_commit, message, description, cache_dir)
            head = publisher.publish_branch()
            publisher.publish_card()
            where = f"{api.endpoint}/kernels/{repo_id}/tree/{plan.branch}"
            log(
                f"Published: {where} @ {head[:8]}"
                if head
                else f"Nothing to publish: {where} already holds this release."
            )
            return 0
    except RefusedError as e:
        log(f"error: {e}")
        return EXIT_REFUSED
    except PublishError as e:
        log(f"error: {e}")
        return EXIT_ERROR
    except HfHubHTTPError as e:
        log(f"error: {explain_http_error(e, repo_id or '?')}")
        return EXIT_ERROR
    except (httpx2.TransportError, LocalEntryNotFoundError) as e:
        log(f"error: could not reach the Hub: {type(e).__name__}")
        return EXIT_ERROR
    except OfflineModeIsEnabled:
        log("error: HF_HUB_OFFLINE is set: publishing needs the Hub (a --dry-run plans without it)")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
