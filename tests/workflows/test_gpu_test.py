"""scripts.gpu_test without a GPU: the plan, the container it asks Docker for, that the container
is always removed, what lands in metadata.json, the loader check against the real built variant,
and the cleanup step (against a recording stand-in for the docker CLI)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from scripts import gpu_test
from tests.benchmarks.results_files import ours_and_torch
from tests.conftest import REPO_ROOT as REPO
from tests.workflows import wf

# Fictional versions: the real pairs live only in docker/matrix.yaml.
VARIANT = "torch299-cxx11-rocm98-x86_64-linux"
IMAGE = "rocm/pytorch:rocm9.8_ubuntu24.04_py3.12_pytorch_release_2.99.0@sha256:" + "ab" * 32


def fake_artifact(root: Path, name: str = VARIANT) -> Path:
    art = root / "download" / name
    art.mkdir(parents=True)
    (art / "__init__.py").write_text("from ._ops import ops\n")
    (art / "_gemm_rocm_0123abc.abi3.so").write_bytes(os.urandom(64))
    (art / "metadata.json").write_text(json.dumps({"name": "gemm", "checks": {"abi": {"ok": False}}}))
    return art


def fake_devices(root: Path) -> str:
    """Stand-ins for /dev/kfd and /dev/dri (the plan only checks that they exist)."""
    (root / "dev" / "dri").mkdir(parents=True, exist_ok=True)
    (root / "dev" / "kfd").touch()
    return f"{root}/dev/kfd,{root}/dev/dri"


def run_args(tmp_path: Path, **over) -> argparse.Namespace:
    argv = ["run", "--artifact", str(fake_artifact(tmp_path)), "--image", IMAGE, "--out", str(tmp_path / "out")]
    ns = gpu_test.build_parser().parse_args([*argv, "--devices", fake_devices(tmp_path)])
    for k, v in over.items():
        setattr(ns, k, v)
    return ns


def test_plan_and_container_request(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_RUN_ID", "77")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "2")
    plan = gpu_test.make_plan(run_args(tmp_path))
    assert plan.variant == VARIANT and plan.staged == tmp_path / "out" / "kernel" / "build" / VARIANT
    assert plan.container_name == f"gemm-gpu-test-{VARIANT}-77-2"
    kw = plan.container_kwargs(tmp_path / "src", ["44", "109"])
    assert kw["image"] == IMAGE
    assert kw["devices"] == [f"{tmp_path}/dev/kfd:{tmp_path}/dev/kfd:rwm", f"{tmp_path}/dev/dri:{tmp_path}/dev/dri:rwm"]
    assert gpu_test.build_parser().parse_args(["run", "--artifact", "a", "--image", "i", "--out", "o"]).devices == (
        "/dev/kfd,/dev/dri"
    )
    assert kw["group_add"] == ["44", "109"]
    assert kw["security_opt"] == ["seccomp=unconfined"] and kw["ipc_mode"] == "host"
    assert kw["entrypoint"] == ["python3", "-m", "scripts.gpu_test", "inside"]
    assert kw["command"][:2] == ["--variant", VARIANT]
    vols = kw["volumes"]
    assert vols[str(tmp_path / "src")] == {"bind": "/src", "mode": "ro"}
    assert vols[str(plan.staged.parent)] == {"bind": "/kernel/build", "mode": "ro"}
    assert vols[str(plan.results)] == {"bind": "/results", "mode": "rw"}
    assert kw["environment"]["GEMM_BUILD_DIR"] == "/kernel/build"
    assert kw["labels"][gpu_test.LABEL_RUN] == "77-2"
    assert (
        "--no-bench"
        in gpu_test.make_plan(run_args(tmp_path / "b", bench="false")).container_kwargs(tmp_path, [])["command"]
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: shutil.rmtree(a) or a, "--artifact: .* is not a directory"),
        (lambda a: a.rename(a.with_name("gemm-build")), "--artifact: .*not a variant directory"),
        (lambda a: (a / "metadata.json").unlink() or a, "--artifact: .*no metadata.json"),
        (lambda a: next(a.glob("*.so")).unlink() or a, "--artifact: .*no compiled .so"),
    ],
)
def test_bad_artifact_is_named(tmp_path, mutate, message):
    args = run_args(tmp_path)
    args.artifact = mutate(args.artifact) or args.artifact
    with pytest.raises(gpu_test.UsageError, match=message):
        gpu_test.make_plan(args)


def test_missing_device_and_outside_test_paths_are_named(tmp_path):
    with pytest.raises(gpu_test.UsageError, match="--devices: '/dev/kfd-nope'"):
        gpu_test.make_plan(run_args(tmp_path, devices="/dev/kfd-nope"))
    with pytest.raises(gpu_test.UsageError, match="--tests"):
        gpu_test.make_plan(run_args(tmp_path / "t", tests=["../elsewhere/test_x.py"]))
    plan = gpu_test.make_plan(run_args(tmp_path / "u", devices="", tests=["tests/a.py", "tests/b"]))
    kw = plan.container_kwargs(tmp_path, [])
    assert kw["devices"] == [] and kw["command"][-6:-2] == ["--tests", "tests/a.py", "--tests", "tests/b"]


@pytest.mark.parametrize("image", ["", "rocm/pytorch:tag@sha256:short", "Upper/Case:x", "a b"])
def test_bad_image_is_named(tmp_path, image):
    with pytest.raises(gpu_test.UsageError, match="--image"):
        gpu_test.make_plan(run_args(tmp_path, image=image))


def test_staging_copies_the_variant_alone_into_a_fresh_dir(tmp_path):
    plan = gpu_test.make_plan(run_args(tmp_path))
    gpu_test.stage_artifact(plan)
    assert sorted(p.name for p in plan.staged.parent.iterdir()) == [VARIANT]
    assert sorted(p.name for p in plan.staged.iterdir()) == sorted(p.name for p in plan.artifact.iterdir())
    with pytest.raises(gpu_test.UsageError, match="--out: .* not empty"):
        gpu_test.stage_artifact(plan)


def test_pull_ref_prefers_the_digest():
    assert gpu_test.pull_ref(IMAGE) == "rocm/pytorch@sha256:" + "ab" * 32
    assert gpu_test.pull_ref("localhost:5000/img:t@sha256:" + "0" * 64) == "localhost:5000/img@sha256:" + "0" * 64
    assert gpu_test.pull_ref("rocm/pytorch:tag") == "rocm/pytorch:tag"


class FakeContainer:
    def __init__(self, wait_result):
        self.wait_result = wait_result
        self.calls: list[str] = []

    def logs(self, stream, follow):
        yield b"hello from the container\n"

    def wait(self, timeout):
        self.calls.append(f"wait {timeout}")
        if isinstance(self.wait_result, Exception):
            raise self.wait_result
        return self.wait_result

    def kill(self):
        self.calls.append("kill")

    def remove(self, force):
        self.calls.append(f"remove force={force}")


class FakeClient:
    def __init__(self, container):
        self.container = container
        self.run_kwargs = None
        self.images = self
        self.containers = self
        self.pulled = []

    def get(self, ref):
        return object()

    def pull(self, ref):
        self.pulled.append(ref)

    def run(self, **kwargs):
        if self.run_kwargs is None:
            self.run_kwargs = kwargs
        else:  # a later container (reclaim_results)
            self.later = [*getattr(self, "later", []), kwargs]
        return self.container


def test_container_removed_after_success(tmp_path):
    plan = gpu_test.make_plan(run_args(tmp_path))
    gpu_test.stage_artifact(plan)
    container = FakeContainer({"StatusCode": 3})
    client = FakeClient(container)
    assert gpu_test.run_container(plan, client, tmp_path / "src") == 3
    assert container.calls[-1] == "remove force=True"
    assert client.run_kwargs["name"] == plan.container_name
    assert plan.log.read_bytes() == b"hello from the container\n"


def test_container_killed_and_removed_on_timeout(tmp_path):
    plan = gpu_test.make_plan(run_args(tmp_path, timeout_min=0.01))
    gpu_test.stage_artifact(plan)
    container = FakeContainer(requests.exceptions.ReadTimeout("slow"))
    with pytest.raises(gpu_test.GpuTestError, match="exceeded"):
        gpu_test.run_container(plan, FakeClient(container), tmp_path / "src")
    assert container.calls[-2:] == ["kill", "remove force=True"]


def test_a_killed_container_hands_its_results_back_to_the_runner(tmp_path, monkeypatch):
    """The container runs as root and chowns its results only when it finishes: after a kill, one short
    container of the same image hands them back, or root-owned files would block the runner's next jobs."""
    import docker.errors

    monkeypatch.setattr(gpu_test.os, "getuid", lambda: 1001)
    monkeypatch.setattr(gpu_test.os, "getgid", lambda: 1002)
    plan = gpu_test.make_plan(run_args(tmp_path, timeout_min=0.01))
    gpu_test.stage_artifact(plan)
    container = FakeContainer(requests.exceptions.ReadTimeout("slow"))

    def gone(force):  # someone removed it first: not an error of this job
        container.calls.append("remove")
        raise docker.errors.NotFound("no such container")

    container.remove = gone
    client = FakeClient(container)
    with pytest.raises(gpu_test.GpuTestError, match="exceeded"):
        gpu_test.run_container(plan, client, tmp_path / "src")
    (reclaim,) = client.later
    assert reclaim["image"] == plan.image and reclaim["remove"] is True
    assert reclaim["entrypoint"] == ["chown", "-R", "1001:1002", gpu_test.RESULTS_MOUNT]
    assert reclaim["volumes"] == {str(plan.results): {"bind": gpu_test.RESULTS_MOUNT, "mode": "rw"}}
    # A container killed after its early report.json (during the LDS profile) still left root's files.
    (plan.results / "report.json").write_text("{}")
    client = FakeClient(FakeContainer({"StatusCode": 137}))
    assert gpu_test.run_container(plan, client, tmp_path / "src") == 137
    assert len(client.later) == 1
    # A container that finished marked and chowned its results itself: no second container.
    (plan.results / gpu_test.HANDED_BACK).write_text("")
    client = FakeClient(FakeContainer({"StatusCode": 0}))
    assert gpu_test.run_container(plan, client, tmp_path / "src") == 0
    assert not hasattr(client, "later")


def test_record_tests_writes_checks_tests(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_NAME", "mi300x-07")
    plan = gpu_test.make_plan(run_args(tmp_path))
    gpu_test.stage_artifact(plan)
    report = {"ok": True, "loader": {"ok": True}, "pytest": {"ok": True, "exit_code": 0}}
    gpu_test.record_tests(plan, report)
    meta = json.loads((plan.staged / "metadata.json").read_text())
    assert meta["checks"]["tests"]["ok"] is True and meta["checks"]["tests"]["runner"] == "mi300x-07"
    assert meta["checks"]["abi"] == {"ok": False}  # other checks untouched
    assert meta["name"] == "gemm"
    # the artifact that was downloaded is never modified
    assert "tests" not in json.loads((plan.artifact / "metadata.json").read_text())["checks"]


def test_run_refuses_a_checkout_with_a_build_tree(tmp_path):
    src = tmp_path / "src"
    (src / "build").mkdir(parents=True)
    args = run_args(tmp_path, src=src)
    with pytest.raises(gpu_test.UsageError, match="--src: .*build exists"):
        gpu_test.cmd_run(args)


def _loader_check_in_a_fresh_interpreter(kernel_dir: Path, variant: str) -> dict:
    """As the container runs it: kernels 0.19 reuses a build already imported in the process (the
    test session's own), so the check gets a process of its own."""
    code = "import json, sys; from pathlib import Path; from scripts import gpu_test; "
    code += "print(json.dumps(gpu_test.loader_check(Path(sys.argv[1]), sys.argv[2])))"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(kernel_dir), variant], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_loader_check_against_the_built_variant(variant_dir, tmp_path):
    """The check the container runs, here with this machine's torch and its own built variant."""
    kdir = tmp_path / "kernel" / "build"
    shutil.copytree(variant_dir, kdir / variant_dir.name)
    info = _loader_check_in_a_fresh_interpreter(kdir, variant_dir.name)
    assert info["ok"], info
    assert Path(info["module"]).is_relative_to(kdir / variant_dir.name)
    wrong = _loader_check_in_a_fresh_interpreter(kdir, VARIANT)
    assert not wrong["ok"] and "must hold only" in wrong["error"]
    # A variant for another torch is present but not what this interpreter's loader selects.
    other = tmp_path / "other" / "build"
    renamed = "torch29-cxx11-cpu-x86_64-linux" if "cpu" in variant_dir.name else "torch29-cxx11-rocm64-x86_64-linux"
    shutil.copytree(variant_dir, other / renamed)
    refused = _loader_check_in_a_fresh_interpreter(other, renamed)
    assert not refused["ok"] and "loader selects None" in refused["error"]


def test_inside_reports_failure_when_the_build_tree_is_visible(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").mkdir()
    results = tmp_path / "results"
    args = gpu_test.build_parser().parse_args(
        ["inside", "--variant", VARIANT, "--kernel-dir", str(tmp_path / "k"), "--results", str(results)]
    )
    assert gpu_test.cmd_inside(args) == 1
    report = json.loads((results / "report.json").read_text())
    assert report["ok"] is False and "build is visible" in report["error"]
    assert (results / gpu_test.HANDED_BACK).is_file()  # it finished: the host need not reclaim its results


def _fake_docker(tmp_path: Path, ps_output: str) -> Path:
    """A stand-in `docker` CLI that records its arguments."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "docker.log"
    script = bindir / "docker"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nif [ "$1" = ps ]; then printf "%s" "{ps_output}"; fi\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return log


def test_cleanup_removes_this_runs_containers(tmp_path, monkeypatch, capsys):
    log = _fake_docker(tmp_path, "c1 c2")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("GITHUB_RUN_ID", "99")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "1")
    assert gpu_test.main(["cleanup"]) == 0
    lines = log.read_text().splitlines()
    assert lines[0] == f"ps -aq --filter label={gpu_test.LABEL_RUN}=99-1"
    assert lines[1] == "rm -f c1 c2"
    assert "2 container(s)" in capsys.readouterr().out


def test_cleanup_of_one_job_spares_the_other_variants_of_its_run(tmp_path, monkeypatch, capsys):
    """A run tests its variants in parallel, possibly on runners sharing one engine: the workflow's cleanup
    step names its variant, and only that variant's containers of this run are removed."""
    log = _fake_docker(tmp_path, "c1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("GITHUB_RUN_ID", "99")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "2")
    assert gpu_test.main(["cleanup", "--variant", VARIANT]) == 0
    ps = log.read_text().splitlines()[0]
    assert ps == f"ps -aq --filter label={gpu_test.LABEL_RUN}=99-2 --filter label={gpu_test.LABEL_VARIANT}={VARIANT}"
    step = [
        s for s in wf.load(wf.WORKFLOWS / "gpu-test.yml")["jobs"]["gpu-test"]["steps"] if "cleanup" in s.get("run", "")
    ]
    assert step and step[0]["run"].endswith('cleanup --variant "$VARIANT"')
    assert step[0]["env"]["VARIANT"] == "${{ matrix.variant }}"


def test_cleanup_without_docker_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_test.shutil, "which", lambda name: None)
    assert gpu_test.main(["cleanup"]) == 0


def test_artifact_must_match_its_digest(variant_dir, tmp_path):
    art = tmp_path / variant_dir.name
    shutil.copytree(variant_dir, art)
    gpu_test.verify_artifact(art)  # intact: passes
    so = next(art.glob("*.so"))
    so.write_bytes(so.read_bytes()[:-1])  # a truncated download
    with pytest.raises(gpu_test.GpuTestError, match="--artifact: .*digest"):
        gpu_test.verify_artifact(art)


def test_junit_counts_and_all_skipped_is_not_a_pass(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="5" failures="0" errors="0" '
        'skipped="5"></testsuite></testsuites>'
    )
    assert gpu_test.junit_counts(junit) == {"tests": 5, "failures": 0, "errors": 0, "skipped": 5}
    assert gpu_test.junit_counts(tmp_path / "none.xml") == {}


def test_require_arch_reaches_the_container_and_defaults_to_gfx942(tmp_path):
    plan = gpu_test.make_plan(run_args(tmp_path))
    assert plan.require_arch == "gfx942"
    assert plan.container_kwargs(tmp_path, [])["command"][-2:] == ["--require-arch", "gfx942"]


def test_benchmark_results_are_compared_with_the_committed_file_of_their_variant(tmp_path):
    """After the benchmark, each results file is set beside the checkout's committed one of its platform and
    variant (benchmarks.compare): the drift and the flagged shapes go to the report, the table next to the
    results; a variant with no committed file is skipped; a committed file that cannot be compared (broken
    JSON, a round median that is not a number) is reported, never raised."""
    bench, checkout = tmp_path / "bench", tmp_path / "src"
    committed_dir = checkout / "benchmarks" / "results" / "mi300x"
    for d in (bench, committed_dir):
        d.mkdir(parents=True)
    old, new = ours_and_torch(10.0, 20.0, platform="mi300x"), ours_and_torch(12.0, 20.0, platform="mi300x")
    (committed_dir / f"{VARIANT}.json").write_text(json.dumps(old))
    odd = json.loads(json.dumps(old))
    odd["records"][0]["round_us"] = ["fast", 10.0]
    (committed_dir / "torch202-odd.json").write_text(json.dumps(odd))
    (committed_dir / "torch201-broken.json").write_text("{")
    for name in (f"{VARIANT}.json", "torch200-other.json", "torch201-broken.json", "torch202-odd.json"):
        (bench / name).write_text(json.dumps(new))  # torch200-other: nothing committed for it
    got = {entry["results"]: entry for entry in gpu_test.compare_with_committed(bench, checkout)}
    assert sorted(got) == sorted([f"{VARIANT}.json", "torch201-broken.json", "torch202-odd.json"])
    assert "cannot read results file" in got["torch201-broken.json"]["error"]
    assert got["torch202-odd.json"]["error"].startswith("ValueError")
    assert got[f"{VARIANT}.json"] == {
        "results": f"{VARIANT}.json",
        "against": f"benchmarks/results/mi300x/{VARIANT}.json",
        "drift": 1.0,
        "slower": ["64x256x512 natural"],
        "faster": [],
    }
    assert "slower" in (bench / f"{VARIANT}.compare.txt").read_text()


def _inside_with_stub_steps(tmp_path, monkeypatch, lds_profile_step) -> tuple[int, list[list[str]], dict]:
    """cmd_inside with the benchmark on and every step stubbed: the GPU test paths exist, the loader check
    passes, pytest reports 3 tests run, and the LDS profile's step is `lds_profile_step(cmd)`. Returns
    the exit status, the commands run and report.json."""
    monkeypatch.chdir(tmp_path)
    for path in gpu_test.GPU_TESTS:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    results = tmp_path / "results"
    ran: list[list[str]] = []

    def fake_run(cmd, env, log):
        ran.append(cmd)
        if "benchmarks.lds_profile" in cmd:
            return lds_profile_step(cmd)
        if "pytest" in cmd:
            (results / "junit.xml").write_text(
                '<testsuites><testsuite tests="3" failures="0" errors="0" skipped="0"/></testsuites>'
            )
        return 0

    monkeypatch.setattr(gpu_test, "_run_logged", fake_run)
    monkeypatch.setattr(gpu_test, "loader_check", lambda kdir, variant: {"ok": True, "device": {"arch": "gfx942"}})
    monkeypatch.setattr(gpu_test, "compare_with_committed", lambda bench, checkout: [])
    args = gpu_test.build_parser().parse_args(
        ["inside", "--variant", VARIANT, "--kernel-dir", str(tmp_path / "k"), "--results", str(results),
         "--requirements", ""]
    )  # fmt: skip
    rc = gpu_test.cmd_inside(args)
    return rc, ran, json.loads((results / "report.json").read_text())


def test_inside_runs_the_lds_profile_after_the_benchmark_and_never_fails_on_it(tmp_path, monkeypatch):
    """With the benchmark on, the LDS bank-conflict profile (benchmarks.lds_profile) runs last, into
    results/lds_profile/; its exit status is reported but does not decide report["ok"]."""
    rc, ran, report = _inside_with_stub_steps(tmp_path, monkeypatch, lambda cmd: 7)
    assert rc == 0
    modules = [cmd[cmd.index("-m") + 1] for cmd in ran]
    assert modules == ["pytest", "benchmarks.run", "benchmarks.lds_profile"]
    profile = ran[-1]
    assert profile[profile.index("--out") + 1] == str(tmp_path / "results" / "lds_profile")
    assert profile[profile.index("--build-dir") + 1] == str(tmp_path / "k")
    assert report["ok"] is True and report["lds_profile"]["exit_code"] == 7


def test_inside_survives_an_exception_in_the_lds_profile_step(tmp_path, monkeypatch):
    def exec_fails(cmd):
        raise OSError("exec failed")

    rc, _, report = _inside_with_stub_steps(tmp_path, monkeypatch, exec_fails)
    assert rc == 0
    assert report["ok"] is True and "exec failed" in report["lds_profile"]["error"]


def test_inside_installs_its_requirements_into_the_images_python_even_when_pep668_marks_it(tmp_path, monkeypatch):
    """The GPU test runs in the build's rocm/pytorch image, whose torch can sit in an externally managed
    system Python: the Dockerfile's pip install passes PIP_BREAK_SYSTEM_PACKAGES=1, and so must this one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "req.txt").write_text("pytest\n")
    seen: list[tuple[list[str], dict]] = []

    def fake_run(cmd, env, log):
        seen.append((cmd, env))
        return 5  # pip fails: the test stops there, naming it

    monkeypatch.setattr(gpu_test, "_run_logged", fake_run)
    args = gpu_test.build_parser().parse_args(
        ["inside", "--variant", VARIANT, "--kernel-dir", str(tmp_path / "k"), "--results", str(tmp_path / "r"),
         "--requirements", "req.txt"]
    )  # fmt: skip
    assert gpu_test.cmd_inside(args) != 0
    ((cmd, env),) = seen
    assert cmd[1:4] == ["-m", "pip", "install"] and env["PIP_BREAK_SYSTEM_PACKAGES"] == "1"
    assert "pip install -r req.txt exited 5" in json.loads((tmp_path / "r" / "report.json").read_text())["error"]


class _Image:
    def __init__(self, digest: str):
        self.id = "sha256:" + "0" * 64
        self.attrs = {"RepoDigests": [f"rocm/pytorch@{digest}"]}


class ImagesByDigest(FakeClient):
    """A runner that holds `local` under the tag; a pull replaces it with `upstream`."""

    def __init__(self, container, local: str | None, upstream: str):
        super().__init__(container)
        self.current, self.upstream = local, upstream

    def get(self, ref):
        import docker.errors

        if self.current is None:
            raise docker.errors.ImageNotFound("no such image")
        return _Image(self.current)

    def pull(self, ref):
        super().pull(ref)
        self.current = self.upstream


BUILT = "sha256:" + "b1" * 32
OLDER = "sha256:" + "01" * 32


@pytest.mark.parametrize(
    ("local", "upstream", "pulls", "runs"),
    [
        (BUILT, BUILT, 0, True),  # the runner holds the build's image: used as it is
        (OLDER, BUILT, 1, True),  # an older image under the tag: pulled again, then it is the build's
        (None, BUILT, 1, True),  # none yet: pulled
        (OLDER, OLDER, 1, False),  # still not the build's after a pull: refused, no container
    ],
)
def test_the_variant_is_tested_in_the_image_it_was_built_in(tmp_path, local, upstream, pulls, runs):
    art = fake_artifact(tmp_path)
    meta = json.loads((art / "metadata.json").read_text())
    meta["build"] = {"image": {"ref": "rocm/pytorch:tag", "digest": BUILT}}
    (art / "metadata.json").write_text(json.dumps(meta))
    args = run_args(tmp_path / "other")
    args.artifact = art
    plan = gpu_test.make_plan(args)
    assert plan.built_digest == BUILT
    gpu_test.stage_artifact(plan)
    client = ImagesByDigest(FakeContainer({"StatusCode": 0}), local, upstream)
    if runs:
        assert gpu_test.run_container(plan, client, tmp_path / "src") == 0
        assert client.run_kwargs is not None
    else:
        with pytest.raises(gpu_test.GpuTestError, match="not the image .* was built in"):
            gpu_test.run_container(plan, client, tmp_path / "src")
        assert client.run_kwargs is None
    assert len(client.pulled) == pulls
