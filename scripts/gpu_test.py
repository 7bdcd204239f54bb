"""GPU-test one built variant on an MI300X runner, as a user would get it.

On the runner host (docker SDK; the job ran ``python -m scripts.preflight`` first)::

    python -m scripts.gpu_test run --artifact DIR --image REF --out DIR [--no-bench]

1. ``DIR`` must be one variant directory (``torch<MA><MI>-cxx11-rocm<MA><MI>-x86_64-linux``) whose files
   match the digest in its ``metadata.json``; it is copied alone into ``OUT/kernel/build/<variant>``
   (never the build tree).
2. A fresh container of ``REF`` (the rocm/pytorch image the variant was built in, pinned
   ``tag@sha256`` where the matrix knows the digest; a local image that is not the one metadata.json's
   ``build.image.digest`` records is pulled again, and refused if it still is not) starts with the AMD
   device flags (``/dev/kfd``, ``/dev/dri``, group ``video``
   and the host's ``render`` group, ``seccomp=unconfined``, ``ipc=host``); the checkout is mounted
   read-only at /src (tests and benchmarks only; a ``build/`` there is refused), the variant at
   /kernel/build, results at /results. Its log streams to ``OUT/container.log``; the container
   is removed whatever happens (timeout, failure, cancel).
3. Inside, ``python -m scripts.gpu_test inside`` installs ``--requirements`` (default
   requirements/gpu-test.txt), checks that the ``kernels`` loader, in that image's torch, selects
   exactly this variant and imports it from /kernel/build, runs the GPU tests (pytest on
   tests/rocm/test_rocm_gpu.py and tests/kernel, ``GEMM_BUILD_DIR=/kernel/build``) and the
   benchmark (``python -m benchmarks.run``, then ``benchmarks.compare`` against the checkout's committed
   results of the variant, if any: information, never a failure), then the LDS bank-conflict profile
   (``python -m benchmarks.lds_profile``: the MI300X's own counters per GEMM kernel, which settle the
   bank model of gemm/rocm/DESIGN.md; information, never a failure), and writes ``/results/report.json``.
4. The host writes ``checks.tests`` into the copied variant's metadata.json (the digest covers
   every file but metadata.json, so the artifact's bytes are unchanged): ``OUT/kernel/build/<variant>``
   is the tested artifact the release publishes.

Exit status 0 when every step passed; 1 when a check or test failed; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.preflight import VISIBILITY_VARS  # stdlib only, as this module at import

REPO_ROOT = Path(__file__).resolve().parent.parent
GPU_TESTS = ("tests/rocm/test_rocm_gpu.py", "tests/kernel")
DEFAULT_REQUIREMENTS = "requirements/gpu-test.txt"
KERNEL_MOUNT = "/kernel/build"
SRC_MOUNT = "/src"
RESULTS_MOUNT = "/results"
AMD_DEVICES = ("/dev/kfd", "/dev/dri")
LABEL_VARIANT = "org.gemm.gpu-test.variant"
LABEL_RUN = "org.gemm.gpu-test.run"
_VARIANT = re.compile(r"torch[0-9]+-cxx11-(?:rocm[0-9]+|cu[0-9]+|cpu)-x86_64-linux")
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?")


class GpuTestError(RuntimeError):
    """A precondition or step failed; the message says which and why."""


class UsageError(GpuTestError):
    """A command-line argument is wrong; the message names it."""


# ----------------------------------------------------------------------------------------------
# host side


@dataclass(frozen=True)
class Plan:
    """Everything `run` will do, resolved before any container starts."""

    variant: str
    artifact: Path
    image: str
    out: Path
    staged: Path  # OUT/kernel/build/<variant>
    results: Path  # OUT/results
    log: Path  # OUT/container.log
    requirements: str
    bench: bool
    devices: tuple[str, ...]
    tests: tuple[str, ...]
    network: str
    require_arch: str
    timeout_s: int
    container_name: str
    # The digest of the image the variant was built in (metadata build.image.digest: a registry digest, or
    # the image id of a local-only base); None when the build did not record one.
    built_digest: str | None = None

    def container_kwargs(self, src: Path, group_add: list[str]) -> dict[str, Any]:
        """Arguments for docker's ``containers.run`` (device flags, mounts, env)."""
        args = ["--variant", self.variant, "--kernel-dir", KERNEL_MOUNT, "--results", RESULTS_MOUNT]
        if self.requirements:
            args += ["--requirements", self.requirements]
        if not self.bench:
            args.append("--no-bench")
        for t in self.tests:
            args += ["--tests", t]
        if self.require_arch:
            args += ["--require-arch", self.require_arch]
        return {
            "image": self.image,
            "entrypoint": ["python3", "-m", "scripts.gpu_test", "inside"],  # images need not have `python`
            "command": args,
            "name": self.container_name,
            "detach": True,
            "devices": [f"{d}:{d}:rwm" for d in self.devices],
            "group_add": group_add,
            "security_opt": ["seccomp=unconfined"],
            "ipc_mode": "host",
            **({"network_mode": self.network} if self.network else {}),
            "working_dir": SRC_MOUNT,
            "volumes": {
                str(src): {"bind": SRC_MOUNT, "mode": "ro"},
                str(self.staged.parent): {"bind": KERNEL_MOUNT, "mode": "ro"},
                str(self.results): {"bind": RESULTS_MOUNT, "mode": "rw"},
            },
            "environment": {
                "GEMM_BUILD_DIR": KERNEL_MOUNT,
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "HOST_UID": str(os.getuid()),
                "HOST_GID": str(os.getgid()),
                **{k: os.environ[k] for k in VISIBILITY_VARS if k in os.environ},  # the GPU preflight accepted
            },
            "labels": {LABEL_VARIANT: self.variant, LABEL_RUN: run_label()},
        }


def make_plan(args: argparse.Namespace) -> Plan:
    artifact = args.artifact.resolve()
    if not artifact.is_dir():
        raise UsageError(f"--artifact: {args.artifact} is not a directory")
    variant = artifact.name
    if not _VARIANT.fullmatch(variant):
        raise UsageError(
            f"--artifact: {variant!r} is not a variant directory (torchXY-cxx11-<rocmXY|cuXY|cpu>-x86_64-linux)"
        )
    if not (artifact / "metadata.json").is_file():
        raise UsageError(f"--artifact: {artifact} has no metadata.json (is it a build output?)")
    if not any(artifact.glob("*.so")):
        raise UsageError(f"--artifact: {artifact} has no compiled .so")
    if not _IMAGE.fullmatch(args.image):
        raise UsageError(f"--image: {args.image!r} is not an image reference like repo:tag@sha256:<64 hex>")
    if args.timeout_min <= 0:
        raise UsageError(f"--timeout-min: must be positive, got {args.timeout_min}")
    devices = tuple(d for d in args.devices.split(",") if d)
    for d in devices:
        if not Path(d).is_absolute() or not Path(d).exists():
            raise UsageError(f"--devices: {d!r} is not an existing device node on this host")
    for t in args.tests or ():
        if Path(t).is_absolute() or ".." in Path(t).parts:
            raise UsageError(f"--tests: {t!r} must be a path inside the checkout")
    out = args.out.resolve()
    try:
        built_image = (json.loads((artifact / "metadata.json").read_text()).get("build") or {}).get("image")
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"--artifact: cannot read {artifact / 'metadata.json'}: {e}") from None
    built_digest = built_image.get("digest") if isinstance(built_image, dict) else None
    return Plan(
        built_digest=built_digest or None,
        variant=variant,
        artifact=artifact,
        image=args.image,
        out=out,
        staged=out / "kernel" / "build" / variant,
        results=out / "results",
        log=out / "container.log",
        requirements=args.requirements,
        bench=args.bench == "true",
        devices=devices,
        tests=tuple(args.tests or GPU_TESTS),
        network=args.network,
        require_arch=args.require_arch,
        timeout_s=int(args.timeout_min * 60),
        container_name=f"gemm-gpu-test-{variant}-{run_label()}",
    )


def run_label() -> str:
    """This workflow run and attempt (or this process outside Actions): names and labels containers."""
    run_id = os.environ.get("GITHUB_RUN_ID") or f"local{os.getpid()}"
    attempt = os.environ.get("GITHUB_RUN_ATTEMPT", "1")
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{run_id}-{attempt}")


def verify_artifact(artifact: Path) -> None:
    """The downloaded files must match the digest in their metadata.json (scripts.check's own check)."""
    from scripts.check import verify_digest
    from scripts.common import StageError

    try:
        verify_digest(artifact)
    except (StageError, OSError, ValueError) as exc:
        raise GpuTestError(f"--artifact: {exc}") from exc


def stage_artifact(plan: Plan) -> None:
    """Copy the one variant into a fresh OUT/kernel/build/ (nothing else lives there)."""
    if plan.out.exists() and any(plan.out.iterdir()):
        raise UsageError(f"--out: {plan.out} is not empty; give a fresh directory")
    plan.staged.parent.mkdir(parents=True)
    shutil.copytree(plan.artifact, plan.staged, symlinks=False)
    plan.results.mkdir(parents=True)


def host_group_ids() -> list[str]:
    """video and render groups as numeric gids of the host (the image may lack the names)."""
    gids = []
    for name in ("video", "render"):
        try:
            gids.append(str(grp.getgrnam(name).gr_gid))
        except KeyError:
            continue
    return gids or ["video"]


def pull_ref(image: str) -> str:
    """docker pull wants repo@digest or repo:tag; for tag@digest the digest is what counts."""
    if "@" in image:
        name, digest = image.split("@", 1)
        repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
        return f"{repo}@{digest}"
    return image


def _is_build_image(image: Any, digest: str | None) -> bool:
    """Whether a local image is the build's: its registry digests or its id hold the recorded digest."""
    if not digest:
        return True
    attrs = getattr(image, "attrs", None) or {}
    digests = {rd.split("@", 1)[1] for rd in attrs.get("RepoDigests") or [] if "@" in rd}
    return digest in digests or getattr(image, "id", None) == digest


def run_container(plan: Plan, client: Any, src: Path) -> int:
    """Start the container, stream its log, wait (bounded), and always remove it. Returns its exit code."""
    import docker.errors
    import requests.exceptions

    try:
        image = client.images.get(plan.image)
    except (docker.errors.ImageNotFound, docker.errors.APIError):
        image = None
    # A tag-only --image may name an older image this runner holds: the variant is tested in the image it
    # was built in, or not at all.
    if image is None or not _is_build_image(image, plan.built_digest):
        print(f"pulling {pull_ref(plan.image)}", flush=True)
        client.images.pull(pull_ref(plan.image))
        image = client.images.get(plan.image)
        if not _is_build_image(image, plan.built_digest):
            raise GpuTestError(
                f"--image {plan.image} is not the image {plan.variant} was built in (digest {plan.built_digest}), "
                "even after a pull: test it in that image (pass its tag@digest)"
            )
    container = None
    try:
        container = client.containers.run(**plan.container_kwargs(src, host_group_ids()))
        streamer = threading.Thread(target=_stream_logs, args=(container, plan.log), daemon=True)
        streamer.start()
        try:
            status = container.wait(timeout=plan.timeout_s)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            container.kill()
            raise GpuTestError(f"container {plan.container_name} exceeded {plan.timeout_s}s; killed") from exc
        streamer.join(timeout=30)
        return int(status.get("StatusCode", 1))
    finally:
        if container is not None:
            try:
                container.remove(force=True)
                print(f"removed container {plan.container_name}", flush=True)
            except docker.errors.NotFound:
                print(f"container {plan.container_name} was already removed", flush=True)
            if not (plan.results / HANDED_BACK).is_file():
                reclaim_results(plan, client)


# Written by `inside` as its last act, just before it chowns its results: a container that ended without
# it (killed, timed out, cancelled, even after report.json was written) left root-owned results behind.
HANDED_BACK = ".handed-back"


def reclaim_results(plan: Plan, client: Any) -> None:
    """Hand the results back to the runner's user after the container ended without finishing (killed,
    timed out, cancelled): it runs as root, and `inside` chowns its results only when it finishes. Root-owned
    files would survive the runner's cleanup of RUNNER_TEMP and make every later job on it fail (--out not
    empty). One short container of the same image does it; best effort, since the job has failed already."""
    if os.getuid() == 0 or not plan.results.is_dir():
        return
    try:
        client.containers.run(
            image=plan.image,
            entrypoint=["chown", "-R", f"{os.getuid()}:{os.getgid()}", RESULTS_MOUNT],
            command=[],
            volumes={str(plan.results): {"bind": RESULTS_MOUNT, "mode": "rw"}},
            remove=True,
            labels={LABEL_VARIANT: plan.variant, LABEL_RUN: run_label()},
        )
        print(f"results handed back to uid {os.getuid()}", flush=True)
    except Exception as exc:  # noqa: BLE001 (never mask the job's own failure)
        print(f"warning: could not hand the results back ({exc}); remove {plan.results} as root", flush=True)


def _stream_logs(container: Any, log: Path) -> None:
    with log.open("wb") as fh:
        for chunk in container.logs(stream=True, follow=True):
            fh.write(chunk)
            fh.flush()
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


def record_tests(plan: Plan, report: dict[str, Any]) -> None:
    """Write checks.tests into the staged variant's metadata.json."""
    meta_path = plan.staged / "metadata.json"
    meta = json.loads(meta_path.read_text())
    checks = meta.setdefault("checks", {})
    checks["tests"] = {
        "ok": bool(report.get("ok")),
        "stage": "gpu_test",
        "image": plan.image,
        "runner": os.environ.get("RUNNER_NAME", ""),
        "run": os.environ.get("GITHUB_RUN_ID", ""),
        "loader": report.get("loader", {}),
        "pytest": report.get("pytest", {}),
        "bench": report.get("bench", {}),
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def cmd_run(args: argparse.Namespace) -> int:
    plan = make_plan(args)
    src = args.src.resolve()
    if (src / "build").exists():
        raise UsageError(f"--src: {src}/build exists; the GPU test must see only the artifact, not a build tree")
    verify_artifact(plan.artifact)
    stage_artifact(plan)
    import docker  # the runner host's venv (make venv) has the docker SDK

    code = run_container(plan, docker.from_env(), src)
    report_path = plan.results / "report.json"
    if not report_path.is_file():
        raise GpuTestError(f"container exited {code} without writing {report_path}; see {plan.log}")
    report = json.loads(report_path.read_text())
    report["ok"] = bool(report.get("ok")) and code == 0
    record_tests(plan, report)
    print(f"gpu_test {plan.variant}: {'ok' if report['ok'] else 'FAILED'} (tested artifact: {plan.staged})")
    return 0 if report["ok"] else 1


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Remove this run's containers (the `if: always()` step; `run` already removes its own).

    Uses the docker CLI, not the SDK, so it works even when the venv was never created."""
    docker = shutil.which("docker")
    if docker is None:
        print("cleanup: no docker CLI on this runner; nothing to remove")
        return 0
    # One workflow run tests several variants at once, and several single-GPU runners can share one host's
    # engine: a job removes only its own variant's containers, or it would kill its neighbours' tests.
    filters = [f"label={LABEL_RUN}={run_label()}"]
    if args.variant:
        filters.append(f"label={LABEL_VARIANT}={args.variant}")
    found = subprocess.run(
        [docker, "ps", "-aq", *(w for f in filters for w in ("--filter", f))],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode:
        raise GpuTestError(f"docker ps failed: {found.stderr.strip()}")
    ids = found.stdout.split()
    label = " and ".join(filters)
    print(f"cleanup: {len(ids)} container(s) with {label}")
    if ids and not args.dry_run:
        rm = subprocess.run([docker, "rm", "-f", *ids], capture_output=True, text=True, check=False)
        if rm.returncode:
            raise GpuTestError(f"docker rm -f failed: {rm.stderr.strip()}")
    return 0


# ----------------------------------------------------------------------------------------------
# container side


def loader_check(kernel_dir: Path, variant: str) -> dict[str, Any]:
    """The kernels loader, in this interpreter's torch, must pick exactly `variant` and import it."""
    import torch
    from kernels import get_local_kernel

    from scripts.variant import loader_trace

    present = sorted(p.name for p in kernel_dir.iterdir() if p.is_dir())
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "rocm": getattr(torch.version, "rocm", None),
        "present": present,
    }
    if present != [variant]:
        return info | {"ok": False, "error": f"{kernel_dir} must hold only {variant}, holds {present}"}
    chosen, info["trace"] = loader_trace(kernel_dir)
    if chosen != variant:
        return info | {"ok": False, "error": f"loader selects {chosen}, not {variant}: {info['trace']}"}
    module = get_local_kernel(kernel_dir)
    origin = Path(getattr(module, "__file__", "") or "").resolve()
    if (kernel_dir / variant).resolve() not in origin.parents:
        return info | {"ok": False, "error": f"imported module comes from {origin}, not {kernel_dir / variant}"}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["device"] = {
            "name": props.name,
            "arch": getattr(props, "gcnArchName", ""),
            "count": torch.cuda.device_count(),
        }
    return info | {"ok": True, "module": str(origin)}


def _run_logged(cmd: list[str], env: dict[str, str], log: Path) -> int:
    print("+ " + " ".join(cmd), flush=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            fh.write(line)
            fh.flush()  # a container killed at its time limit keeps the log up to its last line
        return proc.wait()


def junit_counts(path: Path) -> dict[str, int]:
    """tests/failures/errors/skipped totals of a pytest junit XML (empty if pytest wrote none)."""
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def _chown_tree(root: Path) -> None:
    uid, gid = os.environ.get("HOST_UID"), os.environ.get("HOST_GID")
    if not (uid and gid and uid.isdigit() and gid.isdigit()) or os.getuid() != 0:
        return
    for path in [root, *root.rglob("*")]:
        os.chown(path, int(uid), int(gid))


def compare_with_committed(bench_dir: Path, checkout: Path) -> list[dict[str, Any]]:
    """Each results file the benchmark wrote, against the checkout's committed file of the same platform and
    variant (benchmarks/results/<platform>/<variant>.json) when there is one: the table next to the results
    (<variant>.compare.txt) and the shapes benchmarks.compare flags, for the report. Information only: a
    drift correction cannot make two runs on different days equal, so it never fails the job."""
    from benchmarks import compare
    from benchmarks import report as results

    out: list[dict[str, Any]] = []
    for new_path in sorted(bench_dir.glob("*.json")):
        try:
            new = results.read(new_path)
            committed = checkout / "benchmarks" / "results" / new["platform"] / new_path.name
            if not committed.is_file():
                continue
            result = compare.compare(results.read(committed), new)
            (bench_dir / f"{new_path.stem}.compare.txt").write_text(compare.table(result) + "\n")
        except Exception as exc:  # noqa: BLE001 (a committed file of any shape must not fail the GPU job)
            out.append({"results": new_path.name, "error": f"{type(exc).__name__}: {exc}"})
            continue
        flagged = {v: [f"{r['m']}x{r['n']}x{r['k']} {r['layout']}" for r in result["rows"] if r["verdict"] == v]
                   for v in ("slower", "faster")}  # fmt: skip
        out.append({"results": new_path.name, "against": str(committed.relative_to(checkout)),
                    "drift": result["drift"], **flagged})  # fmt: skip
    return out


def cmd_inside(args: argparse.Namespace) -> int:
    results = args.results
    results.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"variant": args.variant, "ok": False}
    try:
        if (Path.cwd() / "build").exists():
            raise GpuTestError(
                f"{Path.cwd()}/build is visible in the container; only {args.kernel_dir} may hold kernels"
            )
        env = dict(os.environ, GEMM_BUILD_DIR=str(args.kernel_dir))
        if args.requirements:
            req = Path(args.requirements)
            if not req.is_file():
                raise GpuTestError(f"--requirements: {req} not found in the checkout")
            cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "-r", str(req)]
            # As in docker/Dockerfile: some rocm/pytorch tags keep torch in the system Python (PEP 668).
            rc = _run_logged(cmd, dict(env, PIP_BREAK_SYSTEM_PACKAGES="1"), results / "pip.log")
            if rc:
                raise GpuTestError(f"pip install -r {req} exited {rc}")
        report["loader"] = loader_check(args.kernel_dir, args.variant)
        print(f"loader: {json.dumps(report['loader'], indent=2)}", flush=True)
        if not report["loader"]["ok"]:
            raise GpuTestError(f"loader check: {report['loader']['error']}")
        if args.require_arch:
            device = report["loader"].get("device") or {}
            if not str(device.get("arch", "")).startswith(args.require_arch):
                raise GpuTestError(
                    f"--require-arch: no {args.require_arch} GPU visible in the container "
                    f"(torch sees {device or 'none'}); check the device flags and the runner"
                )
        wanted = args.tests or list(GPU_TESTS)
        tests = [t for t in wanted if Path(t).exists()]
        missing = sorted(set(wanted) - set(tests))
        if missing:
            raise GpuTestError(f"GPU test paths missing from the checkout: {', '.join(missing)}")
        # -v names each test as it starts, and faulthandler dumps the stacks of one stuck for 10 min: kernel
        # code that never ran on a GPU before may hang there the first time.
        pytest_cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra", "-v",
                      "-o", "faulthandler_timeout=600", f"--junitxml={results / 'junit.xml'}", *tests]  # fmt: skip
        rc = _run_logged(pytest_cmd, env, results / "pytest.log")
        counts = junit_counts(results / "junit.xml")
        ran = counts.get("tests", 0) - counts.get("skipped", 0)
        report["pytest"] = {"ok": rc == 0 and ran > 0, "exit_code": rc, "paths": tests, **counts}
        if rc == 0 and ran == 0:
            report["pytest"]["error"] = "every test was skipped or none was collected: nothing was tested"
        if args.bench:
            bench_cmd = [sys.executable, "-m", "benchmarks.run", "--build-dir", str(args.kernel_dir),
                         "--out", str(results / "bench"), "--no-plot", "--no-progress"]  # fmt: skip
            rc = _run_logged(bench_cmd, env, results / "bench.log")
            report["bench"] = {"ok": rc == 0, "exit_code": rc}
            if rc == 0:
                report["bench"]["compare"] = compare_with_committed(results / "bench", Path.cwd())
        report["ok"] = all(report.get(k, {}).get("ok", True) for k in ("loader", "pytest", "bench"))
        # The verdict is written before the profile too: a profile cut short by the container's time limit
        # leaves the verdict behind (finally rewrites it with the profile's outcome).
        (results / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        if args.bench:
            # Information only, after the verdict: what the GPU counts, for the bank model's open question.
            # benchmarks.lds_profile bounds its own run (--timeout) and always writes its JSON.
            prof_cmd = [sys.executable, "-m", "benchmarks.lds_profile", "--build-dir", str(args.kernel_dir),
                        "--out", str(results / "lds_profile"), "--timeout", "600"]  # fmt: skip
            try:
                rc = _run_logged(prof_cmd, env, results / "lds_profile.log")
                report["lds_profile"] = {"exit_code": rc, "results": "lds_profile/lds_profile.json"}
            except Exception as e:  # noqa: BLE001 - never the job's failure
                report["lds_profile"] = {"error": f"{type(e).__name__}: {e}"}
    except GpuTestError as exc:
        report["error"] = str(exc)
        print(f"error: {exc}", file=sys.stderr)
    finally:
        (results / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (results / HANDED_BACK).write_text("")
        _chown_tree(results)
    return 0 if report["ok"] else 1


# ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_test", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="on the runner host: test one artifact in a fresh GPU container")
    r.add_argument("--artifact", type=Path, required=True, help="the variant directory (downloaded artifact)")
    r.add_argument("--image", required=True, help="the image the variant was built in (tag@sha256:...)")
    r.add_argument("--out", type=Path, required=True, help="fresh directory for the tested artifact, logs, results")
    r.add_argument("--src", type=Path, default=REPO_ROOT, help="checkout mounted read-only at /src")
    r.add_argument("--requirements", default=DEFAULT_REQUIREMENTS, help="pip requirements installed in the container")
    r.add_argument("--timeout-min", type=float, default=45.0, help="kill the container after this long")
    r.add_argument("--bench", choices=["true", "false"], default="true", help="run the MI300X benchmark")
    r.add_argument(
        "--devices",
        default=",".join(AMD_DEVICES),
        help="comma list of device nodes passed in (default the AMD ones; empty for a GPU-less rehearsal)",
    )
    r.add_argument(
        "--require-arch",
        default="gfx942",
        help="fail unless torch in the container sees a GPU of this arch (empty for a GPU-less rehearsal)",
    )
    r.add_argument("--network", default="", help="docker network mode (default: the engine's default; e.g. host)")
    r.add_argument(
        "--tests", action="append", help=f"pytest path inside the checkout (repeatable; default {' '.join(GPU_TESTS)})"
    )
    c = sub.add_parser("cleanup", help="remove the containers this workflow run started (docker CLI)")
    c.add_argument("--variant", default="", help="only this variant's (a matrix job's own); default: the whole run's")
    c.add_argument("--dry-run", action="store_true", help="only list them")
    i = sub.add_parser("inside", help="in the container (started by `run`)")
    i.add_argument("--variant", required=True)
    i.add_argument("--kernel-dir", type=Path, default=Path(KERNEL_MOUNT))
    i.add_argument("--results", type=Path, default=Path(RESULTS_MOUNT))
    i.add_argument("--requirements", default="")
    i.add_argument("--no-bench", dest="bench", action="store_false")
    i.add_argument("--tests", action="append")
    i.add_argument("--require-arch", default="")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run, "inside": cmd_inside, "cleanup": cmd_cleanup}[args.cmd](args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except GpuTestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
