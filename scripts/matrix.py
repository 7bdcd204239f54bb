"""Read and validate docker/matrix.yaml, the one build matrix; filter it; emit it for CI.

    python -m scripts.matrix                         # table of entries with their variant names
    python -m scripts.matrix --format github         # {"include": [...]} for a GitHub Actions matrix
    python -m scripts.matrix --format github --pr-only
    python -m scripts.matrix --torch X.Y --rocm X.Y --format json
    python -m scripts.matrix --format default-image  # the Dockerfile's default BASE_IMAGE

Variant names are computed with the `kernels` library's own classes (through scripts/variant.py), so
they are the names the loader will look for.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
MATRIX_PATH = REPO / "docker" / "matrix.yaml"
SCHEMA = 1

IMAGE_REPOSITORY = "rocm/pytorch"
# rocm/pytorch:rocm<ROCM>_ubuntu<UBUNTU>_py<PY>_pytorch_release_<TORCH>
TAG_RE = re.compile(
    r"rocm(?P<rocm>\d+\.\d+(?:\.\d+)?)_ubuntu(?P<ubuntu>\d+\.\d+)_py(?P<python>\d+\.\d+)"
    r"_pytorch_release_(?P<torch>\d+\.\d+\.\d+)"
)
TORCH_RE = re.compile(r"\d+\.\d+\.\d+")
MM_RE = re.compile(r"\d+\.\d+")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
FIELDS = {
    "torch": str,
    "rocm": str,
    "image": str,
    "digest": (str, type(None)),
    "python": str,
    "pr": bool,
    "checked": str,
}
PLATFORM = "x86_64"
OS = "linux"


class MatrixError(ValueError):
    """docker/matrix.yaml (or a filter on it) is invalid; the message names the entry and field."""


@dataclass(frozen=True)
class Entry:
    torch: str
    rocm: str
    image: str
    digest: str | None
    python: str
    pr: bool
    checked: str

    @property
    def torch_mm(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    @property
    def key(self) -> str:
        """Short stable id of the pair, e.g. torch<MA.MI>-rocm<MA.MI>."""
        return f"torch{self.torch_mm}-rocm{self.rocm}"

    @property
    def image_ref(self) -> str:
        """What to pull: tag@digest when the digest is known, else the tag."""
        return f"{self.image}@{self.digest}" if self.digest else self.image

    @property
    def variant(self) -> str:
        return variant_name(self.torch_mm, self.rocm)

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("checked")
        d.update(key=self.key, variant=self.variant, image_ref=self.image_ref)
        return d


def variant_name(
    torch_version: str, rocm_version: str | None, *, cxx11: bool = True, platform: str = PLATFORM, os: str = OS
) -> str:
    """Variant directory name through kernels' own classes (rocm_version None -> cpu)."""
    from scripts import variant

    backend = variant.CPU() if rocm_version is None else variant.rocm_backend(rocm_version)
    return variant.name_for(torch_version, backend, cxx11=cxx11, platform=platform, os=os)


def _check_entry(i: int, raw: Any) -> Entry:
    where = f"docker/matrix.yaml entries[{i}]"
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: must be a mapping, got {type(raw).__name__}")
    missing = sorted(set(FIELDS) - set(raw))
    extra = sorted(set(raw) - set(FIELDS))
    if missing:
        raise MatrixError(f"{where}: missing field(s) {', '.join(missing)}")
    if extra:
        raise MatrixError(f"{where}: unknown field(s) {', '.join(extra)}")
    for name, typ in FIELDS.items():
        if not isinstance(raw[name], typ):
            raise MatrixError(
                f'{where}.{name}: wrong type {type(raw[name]).__name__} (quote versions in YAML: "2.13.0", not 2.13.0)'
            )
    e = Entry(**raw)
    where = f"{where} ({e.torch}/{e.rocm})"
    if not TORCH_RE.fullmatch(e.torch):
        raise MatrixError(f"{where}.torch: {e.torch!r} is not a full release like '2.13.0'")
    if not MM_RE.fullmatch(e.rocm):
        raise MatrixError(f"{where}.rocm: {e.rocm!r} is not major.minor like 'X.Y'")
    if not MM_RE.fullmatch(e.python):
        raise MatrixError(f"{where}.python: {e.python!r} is not major.minor like '3.12'")
    repo, sep, tag = e.image.partition(":")
    if repo != IMAGE_REPOSITORY or not sep:
        raise MatrixError(f"{where}.image: {e.image!r} is not a {IMAGE_REPOSITORY}:<tag> reference")
    if "@" in tag:
        raise MatrixError(f"{where}.image: put the digest in the digest field, not in the tag")
    m = TAG_RE.fullmatch(tag)
    if not m:
        raise MatrixError(
            f"{where}.image: tag {tag!r} does not follow rocm<ROCM>_ubuntu<U>_py<PY>_pytorch_release_<TORCH>"
        )
    if m["torch"] != e.torch:
        raise MatrixError(f"{where}.image: tag carries torch {m['torch']}, entry says {e.torch}")
    tag_rocm = m["rocm"].split(".")
    if ".".join(tag_rocm[:2]) != e.rocm:
        raise MatrixError(f"{where}.image: tag carries ROCm {m['rocm']}, entry says {e.rocm}")
    if m["python"] != e.python:
        raise MatrixError(f"{where}.image: tag carries python {m['python']}, entry says {e.python}")
    if e.digest is not None and not DIGEST_RE.fullmatch(e.digest):
        raise MatrixError(f"{where}.digest: {e.digest!r} is not sha256:<64 hex> (or null = unknown)")
    if not e.checked.strip():
        raise MatrixError(f"{where}.checked: say how the tag was checked")
    return e


def parse(data: Any) -> list[Entry]:
    """Validate the parsed YAML document and return its entries, in file order."""
    if not isinstance(data, dict):
        raise MatrixError("docker/matrix.yaml: top level must be a mapping with schema and entries")
    if data.get("schema") != SCHEMA:
        raise MatrixError(f"docker/matrix.yaml: schema must be {SCHEMA}, got {data.get('schema')!r}")
    extra = sorted(set(data) - {"schema", "entries"})
    if extra:
        raise MatrixError(f"docker/matrix.yaml: unknown top-level key(s) {', '.join(extra)}")
    raw = data.get("entries")
    if not isinstance(raw, list) or not raw:
        raise MatrixError("docker/matrix.yaml: entries must be a non-empty list")
    entries = [_check_entry(i, r) for i, r in enumerate(raw)]
    seen: dict[tuple[str, str], int] = {}
    images: dict[str, int] = {}
    for i, e in enumerate(entries):
        pair = (e.torch_mm, e.rocm)
        if pair in seen:
            raise MatrixError(
                f"docker/matrix.yaml entries[{i}]: duplicate pair torch {e.torch_mm} / "
                f"ROCm {e.rocm} (first at entries[{seen[pair]}])"
            )
        seen[pair] = i
        if e.image in images:
            raise MatrixError(
                f"docker/matrix.yaml entries[{i}]: image {e.image} already used by entries[{images[e.image]}]"
            )
        images[e.image] = i
    if not any(e.pr for e in entries):
        raise MatrixError("docker/matrix.yaml: at least one entry must have pr: true")
    return entries


def load(path: Path | str = MATRIX_PATH) -> list[Entry]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise MatrixError(f"cannot read matrix file {path}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MatrixError(f"{path}: not valid YAML: {exc}") from exc
    return parse(data)


def default_entry(entries: Iterable[Entry]) -> Entry:
    """The entry whose image is the Dockerfile's default BASE_IMAGE: the first pr entry."""
    return next(e for e in entries if e.pr)


def _norm_rocm(v: str) -> str:
    v = v.strip().lower().removeprefix("rocm")
    if MM_RE.fullmatch(v):
        return v
    if re.fullmatch(r"\d+\.\d+\.\d+", v):
        return ".".join(v.split(".")[:2])
    raise MatrixError(f"--rocm: {v!r} is not a ROCm version like X.Y")


def _norm_torch(v: str) -> str:
    v = v.strip()
    if MM_RE.fullmatch(v) or TORCH_RE.fullmatch(v):
        return ".".join(v.split(".")[:2])
    raise MatrixError(f"--torch: {v!r} is not a torch version like 2.13 or 2.13.0")


def select(
    entries: list[Entry], torch: str | None = None, rocm: str | None = None, pr_only: bool = False
) -> list[Entry]:
    """Filter entries; empty/None filters match all. A filter that matches nothing is an error."""
    out = list(entries)
    if torch:
        t = _norm_torch(torch)
        out = [e for e in out if e.torch_mm == t]
        if not out:
            raise MatrixError(
                f"--torch: no matrix entry for torch {torch} (have {sorted({e.torch_mm for e in entries})})"
            )
    if rocm:
        r = _norm_rocm(rocm)
        before = out
        out = [e for e in out if e.rocm == r]
        if not out:
            raise MatrixError(
                f"--rocm: no matrix entry for ROCm {rocm}"
                f"{' with torch ' + torch if torch else ''} "
                f"(have {sorted({e.rocm for e in before})})"
            )
    if pr_only:
        out = [e for e in out if e.pr]
        if not out:
            raise MatrixError("--pr-only: no selected entry is built on pull requests")
    return out


def github_matrix(entries: list[Entry]) -> dict[str, Any]:
    return {"include": [e.as_json() for e in entries]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.matrix", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--file", default=str(MATRIX_PATH), help="matrix file (default docker/matrix.yaml)")
    ap.add_argument("--torch", default="", help="only entries of this torch (2.13 or 2.13.0)")
    ap.add_argument("--rocm", default="", help="only entries of this ROCm (X.Y)")
    ap.add_argument("--pr-only", action="store_true", help="only entries built on pull requests")
    ap.add_argument("--format", choices=["table", "json", "github", "variants", "default-image"], default="table")
    args = ap.parse_args(argv)
    try:
        entries = load(args.file)
        if args.format == "default-image":
            print(default_entry(entries).image_ref)
            return 0
        sel = select(entries, args.torch, args.rocm, args.pr_only)
    except MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "github":
        print(json.dumps(github_matrix(sel), separators=(",", ":")))
    elif args.format == "json":
        print(json.dumps([e.as_json() for e in sel], indent=2))
    elif args.format == "variants":
        for e in sel:
            print(e.variant)
    else:
        rows = [("key", "variant", "pr", "image")] + [
            (e.key, e.variant, "yes" if e.pr else "no", e.image_ref) for e in sel
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
