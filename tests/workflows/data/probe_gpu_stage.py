"""Run inside the GPU-test container by tests/workflows/test_gpu_test_docker.py (named explicitly, never
collected on its own): the kernel the tests get is the installed artifact, not a build tree."""

from pathlib import Path


def test_kernel_is_the_installed_artifact(kernel, variant_dir):
    assert variant_dir.parent == Path("/kernel/build")
    assert Path(kernel.__file__).resolve().is_relative_to(variant_dir.resolve())
    assert not (Path.cwd() / "build").exists()
