"""Runner preflight: is this machine fit to run the job?

Run before any GPU work on a self-hosted MI300X runner (and, with ``--no-gpu``, before a container
build on any runner)::

    python -m scripts.preflight --arch gfx942 --min-gpus 1 --min-free-gb 80 --path /var/lib/docker

Checks, each reported by name:

- ``rocminfo``: the ROCm runtime answers and lists at least ``--min-gpus`` GPU agents whose ISA is
  ``--arch`` (parsed from ``rocminfo`` output; ``--rocminfo-file`` reads a recording instead; a host
  without rocminfo, its ROCm living only in the images, is read from the driver's KFD topology in sysfs);
- ``one-gpu`` (with ``--one-gpu``): more than one such GPU only when ``HIP_VISIBLE_DEVICES`` or
  ``ROCR_VISIBLE_DEVICES`` names this runner's (the test container inherits them);
- ``devices``: ``/dev/kfd`` and ``/dev/dri`` exist (the container device flags need them);
- ``disk``: every ``--path`` has at least ``--min-free-gb`` GiB free (rocm/pytorch images are ~30 GB);
  with ``--docker-prune``, a short disk first gets old stopped containers, dangling layers, old build
  cache and the rocm/pytorch images docker/matrix.yaml no longer names pruned (``prune_docker``).

Exit status 0 when every check passes, 1 when any fails (a bad runner must fail the job, not be
retried into flaky tests), 2 on bad arguments. ``--json FILE`` writes the report for the job's logs.
Only the standard library is used: the runner host needs nothing but python3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

GIB = 1024**3

_AGENT_HEADER = re.compile(r"^\s*Agent\s+\d+\s*$")
_FIELD = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][A-Za-z0-9 ._()/-]*?):\s*(?P<value>.*?)\s*$")
_ISA = re.compile(r"amdgcn-amd-amdhsa--(?P<arch>gfx[0-9a-f]+)")


@dataclass(frozen=True)
class Agent:
    """One HSA agent as rocminfo reports it."""

    name: str
    device_type: str
    marketing_name: str = ""
    compute_units: int | None = None
    isas: tuple[str, ...] = ()

    @property
    def arch(self) -> str:
        """The gfx target: the agent name (``gfx942``) or, failing that, its first ISA."""
        if self.name.startswith("gfx"):
            return self.name
        return self.isas[0] if self.isas else ""


def parse_rocminfo(text: str) -> list[Agent]:
    """Parse ``rocminfo`` output into its agents (CPU and GPU), in order.

    Only the agent's own top-level fields are read: the first ``Name:``, ``Marketing Name:``,
    ``Device Type:`` and ``Compute Unit:`` of each ``Agent N`` block; nested sections (pools,
    ISA info) repeat ``Name:`` and are not mistaken for the agent's. ISA names are collected from
    ``amdgcn-amd-amdhsa--gfxNNN`` strings anywhere in the block.
    """
    if "HSA Agents" not in text:
        raise ValueError("rocminfo output has no 'HSA Agents' section")
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if _AGENT_HEADER.match(line):
            blocks.append([])
        elif blocks:
            blocks[-1].append(line)
    agents = []
    for block in blocks:
        fields: dict[str, str] = {}
        top_indent: int | None = None
        for line in block:
            m = _FIELD.match(line)
            if not m or line.strip().startswith("*"):
                continue
            indent = len(m["indent"])
            if top_indent is None:
                top_indent = indent
            if indent == top_indent:
                fields.setdefault(m["key"].strip(), m["value"])
        isas = tuple(dict.fromkeys(m["arch"] for m in _ISA.finditer("\n".join(block))))
        cu = fields.get("Compute Unit", "")
        agents.append(
            Agent(
                name=fields.get("Name", ""),
                device_type=fields.get("Device Type", ""),
                marketing_name=fields.get("Marketing Name", ""),
                compute_units=int(cu) if cu.isdigit() else None,
                isas=isas,
            )
        )
    if not agents:
        raise ValueError("rocminfo output lists no agents")
    return agents


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    data: dict = field(default_factory=dict)


def _gpus(agents: list[Agent]) -> list[Agent]:
    return [a for a in agents if a.device_type.upper() == "GPU"]


def check_gpus(agents: list[Agent], arch: str, min_gpus: int) -> Check:
    gpus = _gpus(agents)
    matching = [a for a in gpus if a.arch == arch]
    data = {
        "gpus": [asdict(a) | {"arch": a.arch} for a in gpus],
        "matching": len(matching),
        "arch": arch,
    }
    if len(matching) < min_gpus:
        seen = ", ".join(sorted({a.arch or "?" for a in gpus})) or "none"
        return Check(
            "rocminfo",
            False,
            f"need at least {min_gpus} {arch} GPU(s), rocminfo shows {len(matching)} (GPU archs seen: {seen})",
            data,
        )
    names = sorted({a.marketing_name for a in matching if a.marketing_name})
    return Check("rocminfo", True, f"{len(matching)} {arch} GPU(s): {', '.join(names) or arch}", data)


VISIBILITY_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def check_one_gpu(agents: list[Agent], arch: str, env: dict[str, str] | os._Environ[str] = os.environ) -> Check:
    """The GPU test's container gets all of /dev/kfd and /dev/dri: on a host with several GPUs, jobs of
    runners sharing it would all run on its first GPU (mixed benchmark numbers, shared memory) unless each
    runner names its own GPU in HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES, which the container inherits."""
    count = sum(1 for a in _gpus(agents) if a.arch == arch)
    named = [f"{v}={env[v]}" for v in VISIBILITY_VARS if env.get(v)]
    if count > 1 and not named:
        return Check(
            "one-gpu",
            False,
            f"rocminfo shows {count} {arch} GPUs and neither {' nor '.join(VISIBILITY_VARS)} is set: give this "
            "runner one GPU (set one of them in its environment)",
        )
    return Check("one-gpu", True, ", ".join(named) if named else f"{count} {arch} GPU on this host")


def check_devices(dev_root: Path = Path("/dev")) -> Check:
    missing = [str(dev_root / n) for n in ("kfd", "dri") if not (dev_root / n).exists()]
    if missing:
        return Check("devices", False, f"missing device nodes: {', '.join(missing)}", {"missing": missing})
    return Check("devices", True, f"{dev_root / 'kfd'} and {dev_root / 'dri'} present")


def check_disk(paths: list[Path], min_free_gb: float) -> Check:
    data = {}
    low = []
    for p in paths:
        probe = p
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free_gb = shutil.disk_usage(probe).free / GIB
        data[str(p)] = round(free_gb, 1)
        if free_gb < min_free_gb:
            low.append(f"{p} has {free_gb:.1f} GiB free")
    if low:
        return Check("disk", False, f"need {min_free_gb:g} GiB free: " + "; ".join(low), data)
    return Check("disk", True, ", ".join(f"{k}: {v} GiB free" for k, v in data.items()), data)


# Preinstalled toolchains on GitHub-hosted Ubuntu images that a container build never uses
# (about 30 GB together); removed only on GitHub-hosted runners, never on self-hosted ones.
HOSTED_RECLAIM = (
    "/usr/share/dotnet",
    "/usr/local/lib/android",
    "/opt/ghc",
    "/usr/local/.ghcup",
    "/opt/hostedtoolcache/CodeQL",
    "/usr/local/share/boost",
)


def reclaim_hosted_disk(env: dict[str, str] | os._Environ[str] = os.environ) -> Check:
    """On a GitHub-hosted runner, delete HOSTED_RECLAIM (sudo); elsewhere do nothing."""
    if env.get("RUNNER_ENVIRONMENT") != "github-hosted":
        return Check("reclaim", True, "not a GitHub-hosted runner: nothing removed")
    present = [p for p in HOSTED_RECLAIM if Path(p).exists()]
    if present:
        proc = subprocess.run(["sudo", "rm", "-rf", *present], capture_output=True, text=True, check=False)
        if proc.returncode:
            return Check("reclaim", False, f"sudo rm -rf failed: {proc.stderr.strip()[-300:]}")
    return Check("reclaim", True, f"removed {len(present)} preinstalled toolchains", {"removed": present})


MATRIX_FILE = Path(__file__).resolve().parent.parent / "docker" / "matrix.yaml"


def matrix_images(path: Path = MATRIX_FILE) -> set[str] | None:
    """The image tags docker/matrix.yaml names, read by a regex (this script needs no pyyaml: runner hosts
    have only python3); None when the file cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return set(re.findall(r"^\s*image:\s*[\"']?([^\s\"'#]+)", text, flags=re.M))


def prune_docker(older_than_h: int = 72) -> Check:
    """Free docker disk on a low runner without touching what a neighbouring job on the same engine may be
    about to use: stopped containers created more than `older_than_h` hours ago, dangling image layers, build
    cache unused for that long, and rocm/pytorch images the current matrix does not name (removed without
    --force, so one a container still uses stays). Not `docker system prune --all --filter until=`: its
    `until` is an image's creation date, and every rocm/pytorch image was created long before it was pulled,
    so it would remove an image a neighbour pulled a minute ago."""
    docker = shutil.which("docker")
    if docker is None:
        return Check("prune", False, "disk is low and there is no docker CLI to prune with")
    steps = [
        [docker, "container", "prune", "--force", "--filter", f"until={older_than_h}h"],
        [docker, "image", "prune", "--force"],
        [docker, "builder", "prune", "--force", "--filter", f"unused-for={older_than_h}h"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode:
            return Check("prune", False, f"{' '.join(cmd[1:3])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    keep = matrix_images()
    stale: list[str] = []
    if keep is not None:  # without the matrix, no image is known to be stale
        listed = subprocess.run(
            [docker, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "rocm/pytorch"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        stale = [ref for ref in listed.stdout.split() if ref not in keep and not ref.endswith(":<none>")]
    removed = [ref for ref in stale if subprocess.run([docker, "image", "rm", ref], capture_output=True,
                                                      timeout=600, check=False).returncode == 0]  # fmt: skip
    return Check(
        "prune",
        True,
        f"pruned stopped containers and build cache older than {older_than_h}h, dangling layers, "
        f"{len(removed)} rocm/pytorch image(s) the matrix no longer names",
        {"removed_images": removed},
    )


ROCMINFO_FALLBACK = Path("/opt/rocm/bin/rocminfo")
# The amdgpu driver's own list of HSA nodes: what a host with the driver but no ROCm userspace (ROCm only
# in the images) has instead of rocminfo.
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")


def kfd_agents(root: Path) -> list[Agent]:
    """The agents the KFD topology lists: a node whose gfx_target_version is 0 is a CPU; otherwise the
    version is major * 10000 + minor * 100 + stepping (90402: gfx942; the stepping is a hex digit, 90010:
    gfx90a)."""
    agents = []
    for node in sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            text = (node / "properties").read_text()
        except PermissionError:  # a GPU outside this process's device cgroup (the driver says EPERM)
            continue
        props = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                props[key] = int(value)
        version = props.get("gfx_target_version", 0)
        if not version and not props.get("simd_count"):  # CPUs have no SIMDs (older kernels: no version)
            agents.append(Agent(f"node{node.name}", "CPU"))
            continue
        arch = f"gfx{version // 10000}{(version // 100) % 100}{version % 100:x}" if version else ""
        cus = props["simd_count"] // props["simd_per_cu"] if props.get("simd_per_cu") else None
        agents.append(Agent(arch, "GPU", compute_units=cus))
    if not agents:
        raise ValueError(f"{root} lists no nodes")
    return agents


def gpu_agents(rocminfo_file: Path | None = None) -> list[Agent]:
    """The agents from a recorded rocminfo output, else from rocminfo, else (no rocminfo on this host)
    from the KFD topology."""
    if rocminfo_file is not None:
        return parse_rocminfo(rocminfo_file.read_text())
    exe = rocminfo_path()
    if exe is None and KFD_TOPOLOGY.is_dir():
        return kfd_agents(KFD_TOPOLOGY)
    return parse_rocminfo(run_rocminfo(exe))


def rocminfo_path() -> str | None:
    return shutil.which("rocminfo") or (str(ROCMINFO_FALLBACK) if ROCMINFO_FALLBACK.exists() else None)


def run_rocminfo(exe: str | None, timeout_s: float = 120.0) -> str:
    if exe is None:
        raise RuntimeError(f"rocminfo not found on PATH or in /opt/rocm/bin, and no {KFD_TOPOLOGY}")
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"rocminfo exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc.stdout


def preflight(args: argparse.Namespace) -> list[Check]:
    checks: list[Check] = []
    if args.reclaim_hosted:
        checks.append(reclaim_hosted_disk())
    if not args.no_gpu:
        try:
            agents = gpu_agents(args.rocminfo_file)
            checks.append(check_gpus(agents, args.arch, args.min_gpus))
            if args.one_gpu:
                checks.append(check_one_gpu(agents, args.arch))
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            checks.append(Check("rocminfo", False, str(exc)))
        checks.append(check_devices(args.dev_root))
    disk = check_disk(args.path, args.min_free_gb)
    if not disk.ok and args.docker_prune:
        checks.append(prune_docker())
        disk = check_disk(args.path, args.min_free_gb)
    checks.append(disk)
    return checks


def _arch(value: str) -> str:
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", value):
        raise argparse.ArgumentTypeError(f"--arch must look like gfx942, got {value!r}")
    return value


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"--min-gpus must be a positive integer, got {value!r}")
    return int(value)


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise argparse.ArgumentTypeError(f"--min-free-gb must be a non-negative number, got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts.preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=_arch, default="gfx942", help="GPU ISA the job needs (default gfx942)")
    p.add_argument("--min-gpus", type=_positive_int, default=1, help="minimum number of such GPUs")
    p.add_argument("--min-free-gb", type=_non_negative, default=80.0, help="free GiB required on every --path")
    p.add_argument(
        "--path", type=Path, action="append", default=None, help="filesystem to check (repeatable; default: cwd)"
    )
    p.add_argument("--no-gpu", action="store_true", help="skip the GPU and device checks (build runners)")
    p.add_argument(
        "--reclaim-hosted",
        action="store_true",
        help="on GitHub-hosted runners only, first delete preinstalled toolchains a build never uses",
    )
    p.add_argument(
        "--one-gpu",
        action="store_true",
        help="fail when several GPUs are visible and neither HIP_VISIBLE_DEVICES nor ROCR_VISIBLE_DEVICES names one",
    )
    p.add_argument(
        "--docker-prune",
        action="store_true",
        help="when disk is short, prune stopped containers and build cache older than 72 h, dangling layers "
        "and rocm/pytorch images the matrix no longer names, then check again",
    )
    p.add_argument("--rocminfo-file", type=Path, help="parse this recorded rocminfo output instead of running it")
    p.add_argument("--dev-root", type=Path, default=Path("/dev"), help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, help="write the report as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.path = args.path or [Path.cwd()]
    checks = preflight(args)
    for c in checks:
        print(f"preflight {c.name}: {'ok' if c.ok else 'FAILED'}: {c.detail}")
    ok = all(c.ok for c in checks)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=2) + "\n")
    if not ok and os.environ.get("GITHUB_ACTIONS") == "true":
        failed = ", ".join(c.name for c in checks if not c.ok)
        print(f"::error title=preflight::runner failed preflight ({failed}); take it offline, do not retry")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
