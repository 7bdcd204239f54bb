"""Build (once) a small stand-in for a rocm/pytorch base image: Debian + python3 + g++ + CPU torch.

The real matrix entries build FROM rocm/pytorch (tens of GB, unreachable from CI machines). The
integration test builds this stand-in instead and passes it as BASE_IMAGE; everything downstream
(Dockerfile, scripts.docker_build, the build stage) is the same code path as with the real image.

    python -m tests.docker.standin        # builds if missing, prints the image reference

What goes in (and why):
- a minimal Debian root from debootstrap, with the mirror this machine's apt uses;
- python3 (+venv, headers), g++ and git: what rocm/pytorch images carry for a C++ extension build
  (ccache comes from the Dockerfile, as on the real bases);
- the machine's system CA bundle and a pip.conf pointing at it: on these machines the package
  registries are reached through a CA that only this bundle holds, and pip inside the container
  must install requirements/build.txt; the host's proxy variables, if it uses any, go in too;
- CPU torch in /opt/venv (first on PATH, like the python of the rocm/pytorch images), installed from
  a wheelhouse that the host's pip assembles (`pip download`, which finds the torch file that lies on
  this machine's disk), since the container can't see host paths.

The image is tagged by a hash of its inputs, so CI builds it once per machine and reuses it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker.errors

import docker

SUITE = "bookworm"
REPOSITORY = "gemm-standin"
TORCH_REQ = "torch==2.13.0+cpu"  # the stand-in's torch; the variant name follows from it
DEB_PACKAGES = [
    "python3",
    "python3-venv",
    "python3-dev",  # Python.h for the abi3 extension
    "g++",
    "git",  # the build stage records the commit (provenance)
    "ca-certificates",
]
PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
VENV = "/opt/venv"


def log(msg: str) -> None:
    print(f"[standin] {msg}", file=sys.stderr, flush=True)


def apt_mirror() -> str:
    """The Debian mirror URI this machine's apt is configured with (deb822 or one-line format)."""
    cands: list[str] = []
    paths = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for p in paths:
        try:
            text = p.read_text()
        except OSError:
            continue
        cands += re.findall(r"^\s*URIs:\s*(\S+)", text, flags=re.M)
        cands += re.findall(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, flags=re.M)
    for uri in cands:
        if re.search(r"/debian/?$", uri):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wheelhouse(dest: Path) -> list[Path]:
    """Let the host's pip gather torch and its dependencies as wheels (local files first)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary",
        ":all:",
        "--python-version",
        "3.11",
        "--platform",
        "manylinux_2_28_x86_64",
        "--implementation",
        "cp",
        "--abi",
        "cp311",
        "--dest",
        str(dest),
        TORCH_REQ,
    ]
    log("pip download " + TORCH_REQ)
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("*.whl"))
    if not any(w.name.startswith("torch-") for w in wheels):
        raise RuntimeError(f"pip download produced no torch wheel in {dest}")
    return wheels


def proxy_env() -> dict[str, str]:
    return {k: os.environ[k] for k in PROXY_VARS if os.environ.get(k)}


def content_tag(wheels: list[Path]) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(CA_BUNDLE.read_bytes())
    h.update(repr(sorted(proxy_env().items())).encode())
    for w in wheels:
        h.update(w.name.encode())
        h.update(str(w.stat().st_size).encode())
    return h.hexdigest()[:16]


def _run(cmd: list[str], **kw) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def unmount_below(root: Path) -> None:
    """debootstrap and chroot leave proc/sys mounted inside the root: unmount before tar/rm."""
    prefix = str(root.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", m], check=False)


def build_root(root: Path, wheels: list[Path]) -> None:
    try:
        _build_root(root, wheels)
    finally:
        unmount_below(root)


def _build_root(root: Path, wheels: list[Path]) -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(DEB_PACKAGES)}",
            SUITE,
            str(root),
            apt_mirror(),
        ],
        stdout=subprocess.DEVNULL,
    )
    # The system CA bundle (registries are reached through a CA only it holds) and pip's use of it.
    shutil.copyfile(CA_BUNDLE, root / "etc/ssl/certs/ca-certificates.crt")
    (root / "etc/pip.conf").write_text(
        "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ndisable-pip-version-check = true\n"
    )
    shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
    wh = root / "tmp/wheels"
    wh.mkdir(parents=True)
    for w in wheels:
        shutil.copyfile(w, wh / w.name)
    _run(["chroot", str(root), "python3", "-m", "venv", VENV])
    _run(
        [
            "chroot",
            str(root),
            f"{VENV}/bin/pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            "/tmp/wheels",
            TORCH_REQ,
        ]
    )
    shutil.rmtree(wh)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        p = root / junk
        if p.exists():
            for child in p.iterdir():
                if child.is_file():
                    child.unlink()


def ensure(client: docker.DockerClient | None = None) -> str:
    """Return the stand-in image reference, building and importing it if this engine lacks it."""
    client = client or docker.from_env(timeout=1800)
    with tempfile.TemporaryDirectory(prefix="gemm-standin-", dir="/var/tmp") as tmp:
        tmp = Path(tmp)
        wheels = wheelhouse(tmp / "wheels")
        ref = f"{REPOSITORY}:{content_tag(wheels)}"
        try:
            client.images.get(ref)
            log(f"reusing {ref}")
            return ref
        except docker.errors.ImageNotFound:
            pass
        t0 = time.monotonic()
        root = tmp / "root"
        build_root(root, wheels)
        log(f"root ready in {time.monotonic() - t0:.0f}s; importing")
        tarball = tmp / "root.tar"
        _run(
            [
                "tar",
                "-C",
                str(root),
                "--numeric-owner",
                "--exclude=./proc/*",
                "--exclude=./sys/*",
                "-cf",
                str(tarball),
                ".",
            ]
        )
        shutil.rmtree(root)
        repo, tag = ref.split(":")
        env_path = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        client.api.import_image_from_file(
            str(tarball),
            repository=repo,
            tag=tag,
            changes=[
                f"ENV PATH={env_path}",
                "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
                *(f"ENV {k}={v}" for k, v in proxy_env().items()),
                'CMD ["/bin/bash"]',
            ],
        )
        client.images.get(ref)  # raises if the import did not produce it
        log(f"built {ref} in {time.monotonic() - t0:.0f}s")
        return ref


if __name__ == "__main__":
    print(ensure())
