"""Build variants inside containers, one per docker/matrix.yaml entry (`make docker-build`).

    python -m scripts.docker_build [--torch X.Y] [--rocm X.Y] [--base-image IMAGE] [--jobs N]

For each selected entry: get the base image (local, else pull; tag@digest is pulled by digest),
build or reuse the builder image docker/Dockerfile FROM it (tagged by a hash of the Dockerfile, the
requirement files and the base image's id), run the build stage in it with the checkout mounted
read-only at /src, a fresh output directory at /out and the compiler cache at /ccache, stream the
logs, and move the finished `build/<variant>/` into place. The base image's reference and digest
reach metadata.json through the build stage's --image-ref/--image-digest. A summary table ends the
run: entry, variant, ABI verdict (manylinux_2_28 + abi3), result, time.

--base-image replaces the base of the one entry being built (the default entry unless --torch/--rocm
pick another); the variant then is whatever the torch inside that image names, e.g. a CPU variant
from the CPU-torch stand-in the tests build.

The planning (what to build, in which image, where) is pure and unit-tested; Docker is only touched
by the Engine class.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import matrix
from .common import REPO_ROOT, StageError, main_wrapper

DOCKERFILE = "docker/Dockerfile"
# The files the builder image is made of (its build context); nothing else is sent to the engine.
CONTEXT_FILES = (DOCKERFILE, "requirements/build.txt", "docker/requirements.txt")
BUILDER_REPOSITORY = "gemm-builder"
STAGE_SUBDIR = ".docker"  # build/.docker/<entry>/ is mounted at /out, build/.docker/<entry>.log
CONTAINER_SRC = "/src"
CONTAINER_OUT = "/out"
CONTAINER_CCACHE = "/ccache"
DEFAULT_CCACHE = REPO_ROOT / ".cache" / "ccache"
# Forwarded to the image build and the container when the host uses a proxy.
PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def proxy_env() -> dict[str, str]:
    return {k: os.environ[k] for k in PROXY_VARS if os.environ.get(k)}


class DockerBuildError(StageError):
    """The engine is missing, an image can't be had, or a containerized build failed."""

    exit_code = 5


# --------------------------------------------------------------------------- planning (pure)


@dataclass(frozen=True)
class Job:
    """One containerized build: which entry, FROM which base, where its output lands."""

    name: str  # entry key (torch<MA.MI>-rocm<MA.MI>)
    base_image: str  # what the builder image is FROM (pullable reference)
    image_ref: str  # what metadata records as build.image.ref
    expected_variant: str | None  # None when --base-image replaced the entry's base
    stage_dir: Path  # mounted at /out
    log_path: Path


def base_reference(entry: matrix.Entry) -> str:
    """The reference to pull/FROM: repo@digest when the digest is known (the digest wins)."""
    if entry.digest:
        return f"{entry.image.split(':', 1)[0]}@{entry.digest}"
    return entry.image


def plan(
    entries: list[matrix.Entry],
    *,
    torch: str = "",
    rocm: str = "",
    base_image: str = "",
    out: Path = REPO_ROOT / "build",
) -> list[Job]:
    """Select matrix entries and turn them into jobs. Raises MatrixError/DockerBuildError on bad args."""
    selected = matrix.select(entries, torch or None, rocm or None)
    if base_image:
        if not torch and not rocm:
            selected = [matrix.default_entry(entries)]
        if len(selected) != 1:
            raise DockerBuildError(
                f"--base-image replaces the base of one entry, but the filters select {len(selected)} "
                f"({', '.join(e.key for e in selected)}): narrow them with --torch and --rocm"
            )
    jobs = []
    for e in selected:
        stage = out / STAGE_SUBDIR / e.key
        jobs.append(
            Job(
                name=e.key,
                base_image=base_image or base_reference(e),
                image_ref=base_image or e.image_ref,
                expected_variant=None if base_image else e.variant,
                stage_dir=stage,
                # Not with_suffix: the keys hold dots (torch<X.Y>-rocm<X.Y>), whose last part it would replace.
                log_path=stage.parent / f"{e.key}.log",
            )
        )
    return jobs


def context_files(root: Path = REPO_ROOT) -> dict[str, bytes]:
    files = {}
    for rel in CONTEXT_FILES:
        path = root / rel
        if not path.is_file():
            raise DockerBuildError(f"{rel} is missing: the builder image needs it")
        files[rel] = path.read_bytes()
    return files


def builder_tag(files: dict[str, bytes], base_id: str) -> str:
    """gemm-builder:<hash of the context files and the base image id>."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel] + b"\0")
    h.update(base_id.encode())
    return f"{BUILDER_REPOSITORY}:{h.hexdigest()[:16]}"


def context_tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in sorted(files):
            info = tarfile.TarInfo(rel)
            info.size = len(files[rel])
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(files[rel]))
    return buf.getvalue()


def build_command(image_ref: str, image_digest: str) -> list[str]:
    return [
        "python3",
        "-m",
        "scripts.build",
        "--out",
        CONTAINER_OUT,
        "--image-ref",
        image_ref,
        "--image-digest",
        image_digest,
        "--loaders",
    ]


def find_variant(stage: Path, printed: str | None = None) -> Path:
    """The variant directory the build stage left in `stage` (its printed last line, else the one there)."""
    if printed and printed.startswith(CONTAINER_OUT + "/"):
        cand = stage / Path(printed).relative_to(CONTAINER_OUT)
        if (cand / "metadata.json").is_file():
            return cand
    found = (
        [d for d in stage.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / "metadata.json").is_file()]
        if stage.is_dir()
        else []
    )
    if len(found) != 1:
        raise DockerBuildError(f"expected one variant directory in {stage}, found {[d.name for d in found] or 'none'}")
    return found[0]


def abi_summary(meta: dict) -> str:
    abi = (meta.get("checks") or {}).get("abi")
    if not abi:
        return "not checked"
    if abi.get("ok"):
        return f"ok ({abi.get('manylinux', '?')})"
    n = sum(
        len(f.get("manylinux_violations", [])) + len(f.get("python_abi_violations", []))
        for f in (abi.get("files") or {}).values()
    )
    return f"FAIL ({n} violations of {abi.get('manylinux', '?')}/abi3)"


@dataclass
class Result:
    job: Job
    ok: bool = False
    variant: str = "-"
    abi: str = "-"
    abi_ok: bool | None = None
    seconds: float = 0.0
    error: str = ""
    image_digest: str = ""
    builder: str = ""
    extra: dict = field(default_factory=dict)


def summary_table(results: list[Result]) -> str:
    rows = [("entry", "variant", "abi", "result", "time")]
    for r in results:
        rows.append((r.job.name, r.variant, r.abi, "ok" if r.ok else "FAILED", f"{r.seconds:.0f}s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the engine


_print_lock = threading.Lock()


def say(name: str, line: str, t0: float | None = None) -> None:
    stamp = "" if t0 is None else f" {int(time.monotonic() - t0) // 60:02d}:{int(time.monotonic() - t0) % 60:02d}"
    with _print_lock:
        print(f"[{name}{stamp}] {line}", file=sys.stderr, flush=True)


# Build containers carry this label, valued by the docker_build run that started them: an interrupted or
# cancelled run removes exactly its own.
LABEL_SESSION = "org.gemm.docker-build.session"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Engine:
    """The Docker engine through the docker SDK."""

    session = f"{os.getpid()}-{os.urandom(4).hex()}"
    build_timeout_s: float | None = None  # a build container still running after this is killed

    def __init__(self, timeout: int = 3600):
        try:
            import docker.errors

            import docker
        except ImportError as exc:  # pragma: no cover - the venv has it
            raise DockerBuildError("the docker SDK is not installed (pip install docker)") from exc
        self.errors = docker.errors
        try:
            self.client = docker.from_env(timeout=timeout)
            self.client.ping()
        except docker.errors.DockerException as exc:
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            raise DockerBuildError(
                f"no Docker engine reachable at {host} ({exc}). Start one (CI: `dockerd --iptables=false "
                f"--ip-masq=false --bridge=none --storage-driver=vfs &`) or set DOCKER_HOST."
            ) from None

    def base(self, ref: str, name: str, t0: float):
        """The base image, pulled if this engine lacks it."""
        try:
            return self.client.images.get(ref)
        except self.errors.ImageNotFound:
            pass
        except self.errors.APIError as exc:
            raise DockerBuildError(f"[{name}] cannot inspect base image {ref}: {exc}") from None
        say(name, f"pulling {ref}", t0)
        try:
            last = 0.0
            for ev in self.client.api.pull(ref, stream=True, decode=True):
                if "error" in ev:
                    raise DockerBuildError(f"[{name}] cannot pull base image {ref}: {ev['error']}")
                if time.monotonic() - last > 15:
                    last = time.monotonic()
                    say(name, f"pull: {ev.get('status', '')} {ev.get('progress', '')}".strip(), t0)
            return self.client.images.get(ref)
        except (self.errors.APIError, self.errors.ImageNotFound) as exc:
            raise DockerBuildError(
                f"[{name}] base image {ref} is not on this engine and cannot be pulled: {exc}"
            ) from None

    def builder(self, base_ref: str, base_id: str, files: dict[str, bytes], name: str, t0: float) -> str:
        tag = builder_tag(files, base_id)
        try:
            self.client.images.get(tag)
            say(name, f"reusing builder image {tag}", t0)
            return tag
        except self.errors.ImageNotFound:
            pass
        say(name, f"building builder image {tag} FROM {base_ref}", t0)
        stream = self.client.api.build(
            fileobj=io.BytesIO(context_tar(files)),
            custom_context=True,
            dockerfile=DOCKERFILE,
            tag=tag,
            buildargs={"BASE_IMAGE": base_ref, **proxy_env()},
            network_mode="host",
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for ev in stream:
            if "error" in ev:
                raise DockerBuildError(f"[{name}] building the builder image failed: {ev['error'].strip()}")
            text = ev.get("stream", "").rstrip()
            if text:
                for line in text.splitlines():
                    say(name, f"image: {line}", t0)
        self.client.images.get(tag)
        return tag

    def run_build(self, job: Job, tag: str, image_digest: str, ccache_dir: Path, t0: float) -> tuple[int, str]:
        """Run the build stage; return (exit code, last stdout line)."""
        # The checkout is mounted read-only: the check stage installs its loader releases under /tmp.
        env = {"GEMM_CCACHE": "1", "HOME": "/tmp", "GEMM_LOADERS_DIR": "/tmp/loaders", **proxy_env()}
        user = None
        if os.getuid() != 0:
            user = f"{os.getuid()}:{os.getgid()}"
        container = self.client.containers.run(
            tag,
            command=build_command(job.image_ref, image_digest),
            entrypoint=[],
            detach=True,
            network_mode="host",
            working_dir=CONTAINER_SRC,
            environment=env,
            user=user,
            labels={LABEL_SESSION: self.session},
            volumes={
                str(REPO_ROOT): {"bind": CONTAINER_SRC, "mode": "ro"},
                str(job.stage_dir): {"bind": CONTAINER_OUT, "mode": "rw"},
                str(ccache_dir): {"bind": CONTAINER_CCACHE, "mode": "rw"},
            },
        )
        # The log stream below blocks until the container ends: a watchdog kills one that runs too long.
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                container.kill()
            except self.errors.APIError:
                pass

        watchdog = threading.Timer(self.build_timeout_s, kill) if self.build_timeout_s else None
        if watchdog:
            watchdog.daemon = True
            watchdog.start()
        try:
            last_stdout = ""
            with job.log_path.open("w") as log:
                buf = b""
                for chunk in container.logs(stream=True, follow=True):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for raw in lines:
                        line = raw.decode(errors="replace")
                        log.write(line + "\n")
                        say(job.name, line, t0)
                if buf:
                    log.write(buf.decode(errors="replace") + "\n")
            code = container.wait().get("StatusCode", 1)
            if timed_out.is_set():
                raise DockerBuildError(f"[{job.name}] the build ran past {self.build_timeout_s / 60:g} min: killed")
            out = container.logs(stdout=True, stderr=False).decode(errors="replace").strip().splitlines()
            last_stdout = out[-1] if out else ""
            return code, last_stdout
        finally:
            if watchdog:
                watchdog.cancel()
            try:
                container.remove(force=True)
            except self.errors.APIError:
                pass

    def remove_session_containers(self) -> int:
        """Remove every build container this run started (after an interrupt); how many."""
        found = self.client.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={self.session}"})
        for c in found:
            try:
                c.remove(force=True)
            except self.errors.APIError:
                pass
        return len(found)


def _digest_of(image) -> str:
    """RepoDigests' sha256 for a pulled image; the image id for one that only exists locally."""
    for rd in image.attrs.get("RepoDigests") or []:
        if "@" in rd:
            return rd.split("@", 1)[1]
    return image.id


def run_job(engine: Engine, job: Job, files: dict[str, bytes], out: Path, ccache_dir: Path) -> Result:
    t0 = time.monotonic()
    res = Result(job=job)
    try:
        base = engine.base(job.base_image, job.name, t0)
        res.image_digest = _digest_of(base)
        res.builder = engine.builder(job.base_image, base.id, files, job.name, t0)
        if job.stage_dir.exists():
            shutil.rmtree(job.stage_dir)
        job.stage_dir.mkdir(parents=True)
        ccache_dir.mkdir(parents=True, exist_ok=True)
        say(job.name, f"build stage in {res.builder} (base {job.image_ref}, {res.image_digest[:19]})", t0)
        code, last = engine.run_build(job, res.builder, res.image_digest, ccache_dir, t0)
        if code != 0:
            raise DockerBuildError(f"[{job.name}] the build stage exited {code} (log: {job.log_path})")
        vdir = find_variant(job.stage_dir, last)
        res.variant = vdir.name
        meta = json.loads((vdir / "metadata.json").read_text())
        res.abi = abi_summary(meta)
        res.abi_ok = ((meta.get("checks") or {}).get("abi") or {}).get("ok")
        if job.expected_variant and vdir.name != job.expected_variant:
            raise DockerBuildError(
                f"[{job.name}] the image's torch built {vdir.name}, but the matrix entry expects "
                f"{job.expected_variant}: fix docker/matrix.yaml (torch.version.rocm names the variant)"
            )
        final = out / vdir.name
        if final.exists():
            shutil.rmtree(final)
        vdir.rename(final)
        shutil.rmtree(job.stage_dir, ignore_errors=True)
        res.ok = True
    except DockerBuildError as exc:
        res.error = str(exc)
    except Exception as exc:  # an engine/API failure in one entry must not hide the others' results
        res.error = f"[{job.name}] {type(exc).__name__}: {exc}"
    res.seconds = time.monotonic() - t0
    if res.error:
        say(job.name, f"FAILED: {res.error}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m scripts.docker_build", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--torch", default="", help="only matrix entries of this torch (empty: all)")
    ap.add_argument("--rocm", default="", help="only matrix entries of this ROCm (empty: all)")
    ap.add_argument("--base-image", default="", help="build FROM this image instead of the entry's")
    ap.add_argument("--jobs", type=int, default=1, help="entries built at once (default 1)")
    ap.add_argument(
        "--timeout-min", type=float, default=120, help="kill an entry's build container after this (default 120)"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("GEMM_BUILD_DIR") or REPO_ROOT / "build"),
        help="where variants land (default $GEMM_BUILD_DIR, else build/)",
    )
    ap.add_argument(
        "--ccache-dir",
        type=Path,
        default=Path(os.environ.get("GEMM_CCACHE_DIR") or DEFAULT_CCACHE),
        help="host directory mounted as the compiler cache (default $GEMM_CCACHE_DIR, else .cache/ccache)",
    )
    ap.add_argument(
        "--require-abi", action="store_true", help="fail an entry whose variant violates manylinux_2_28/abi3 (releases)"
    )
    ap.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    args = ap.parse_args()
    if args.jobs < 1:
        raise DockerBuildError(f"--jobs must be >= 1, got {args.jobs}")
    if args.timeout_min <= 0:
        raise DockerBuildError(f"--timeout-min must be positive, got {args.timeout_min}")
    try:
        jobs = plan(matrix.load(), torch=args.torch, rocm=args.rocm, base_image=args.base_image, out=args.out.resolve())
    except matrix.MatrixError as exc:
        raise DockerBuildError(str(exc)) from None
    files = context_files()
    engine = Engine()
    engine.build_timeout_s = args.timeout_min * 60
    args.out.mkdir(parents=True, exist_ok=True)
    ccache_dir = args.ccache_dir.resolve()
    # Ctrl-C, or a CI cancel (SIGINT, then SIGTERM): remove this run's containers at once. Their log streams
    # then end, so the workers return, instead of the builds running on to their end (or on after we die).
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            try:
                results = list(pool.map(lambda j: run_job(engine, j, files, args.out.resolve(), ccache_dir), jobs))
            except KeyboardInterrupt:
                removed = engine.remove_session_containers()
                raise DockerBuildError(f"interrupted: removed this run's {removed} build container(s)") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.require_abi:
        for r in results:
            if r.ok and not r.abi_ok:
                r.ok = False
                r.error = f"[{r.job.name}] {r.variant}: ABI verdict {r.abi} (--require-abi)"
    print(summary_table(results), file=sys.stderr)
    if args.summary_json:
        args.summary_json.write_text(
            json.dumps(
                [
                    {
                        "entry": r.job.name,
                        "variant": r.variant,
                        "abi": r.abi,
                        "abi_ok": r.abi_ok,
                        "ok": r.ok,
                        "seconds": round(r.seconds, 1),
                        "image_ref": r.job.image_ref,
                        "image_digest": r.image_digest,
                        "builder": r.builder,
                        "error": r.error,
                    }
                    for r in results
                ],
                indent=2,
            )
            + "\n"
        )
    failed = [r for r in results if not r.ok]
    if failed:
        raise DockerBuildError("; ".join(r.error for r in failed))
    for r in results:
        print(args.out / r.variant)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
