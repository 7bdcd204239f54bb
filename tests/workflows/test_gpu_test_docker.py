"""scripts.gpu_test run against a real Docker engine, GPU-less: the CPU stand-in of a rocm/pytorch
image (tests/docker/standin.py), this machine's built CPU variant, no device nodes, no benchmark.
Everything else is the MI300X path: fresh container, checkout read-only, the artifact alone at
/kernel/build, requirements installed inside, loader check in that image's torch, pytest through the
shared conftest, report, checks.tests in metadata.json, container removed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from scripts import gpu_test
from tests.workflows import wf

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PROBE = "tests/workflows/data/probe_gpu_stage.py"


def engine():
    import docker.errors

    try:
        client = docker.from_env(timeout=1800)
        client.ping()
    except docker.errors.DockerException as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"docker info fails outside CI: {exc}")
    return client


def checkout_copy(dest: Path) -> Path:
    """What the GPU runner's fresh checkout holds (no build/)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results")
    for name in ("scripts", "tests", "benchmarks", "requirements"):
        shutil.copytree(wf.REPO_ROOT / name, dest / name, ignore=ignore)
    for name in ("build.toml", "pyproject.toml"):
        shutil.copy2(wf.REPO_ROOT / name, dest / name)
    req = dest / gpu_test.DEFAULT_REQUIREMENTS
    if not req.exists():  # until requirements/gpu-test.txt lands: what it must hold
        req.write_text("-r build.txt\npytest>=8\n")
    return dest


def test_run_in_a_fresh_container(variant_dir, tmp_path):
    client = engine()
    from tests.docker import standin

    image = standin.ensure(client)
    src = checkout_copy(tmp_path / "src")
    out = tmp_path / "out"
    argv = ["run", "--artifact", str(variant_dir), "--image", image, "--out", str(out), "--src", str(src),
            "--devices", "", "--require-arch", "", "--network", "host", "--bench", "false", "--tests", PROBE,
            "--timeout-min", "20"]  # fmt: skip
    rc = gpu_test.main(argv)
    log = (out / "container.log").read_text() if (out / "container.log").exists() else "(no log)"
    report = json.loads((out / "results" / "report.json").read_text())
    assert rc == 0, (report, log[-4000:])
    assert report["loader"]["ok"] and report["loader"]["present"] == [variant_dir.name]
    assert report["loader"]["module"].startswith(f"/kernel/build/{variant_dir.name}/")
    assert report["pytest"] == {"ok": True, "exit_code": 0, "paths": [PROBE], "tests": 1, "failures": 0,
                                "errors": 0, "skipped": 0}  # fmt: skip
    assert 'tests="1"' in (out / "results" / "junit.xml").read_text()
    meta = json.loads((out / "kernel" / "build" / variant_dir.name / "metadata.json").read_text())
    assert meta["checks"]["tests"]["ok"] is True and meta["checks"]["tests"]["image"] == image
    assert "tests" not in json.loads((variant_dir / "metadata.json").read_text()).get("checks", {})
    left = client.containers.list(all=True, filters={"label": f"{gpu_test.LABEL_RUN}={gpu_test.run_label()}"})
    assert left == []
