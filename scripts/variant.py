"""The variant name for this interpreter, computed with the `kernels` loader's own classes, and the
loader's own choice among built variants (which the build requires to agree)."""

from __future__ import annotations

import platform
from pathlib import Path

from kernels.backends import CPU, Backend, _backend
from kernels.variants import Arch, ArchVariant, Torch, get_variants_local, resolve_variant
from packaging.version import Version


def torch_backend() -> Backend:
    """The backend the installed torch computes on (CPU, CUDA x.y or ROCm x.y), as `kernels` sees it."""
    return _backend()


def backend_name(backend: Backend) -> str:
    return backend.name  # "cpu", "cuda", "rocm", ...


def variant_name(backend: Backend | None = None) -> str:
    """E.g. torch213-cxx11-cpu-x86_64-linux for this interpreter's torch."""
    import torch

    backend = backend or torch_backend()
    version = Version(torch.__version__)
    framework = Torch(
        version=Version(f"{version.major}.{version.minor}"),
        cxx11_abi=torch.compiled_with_cxx11_abi() if platform.system() == "Linux" else None,
    )
    arch = Arch(backend=backend, platform=platform.machine(), os=platform.system().lower())
    return ArchVariant(framework=framework, arch=arch).variant_str


def backend_for(name: str) -> Backend:
    """The kernels Backend object for a backend name we build ("cpu" or this torch's GPU backend)."""
    if name == "cpu":
        return CPU()
    backend = torch_backend()
    if backend.name != name:
        raise ValueError(f"this torch computes on {backend.name}, it cannot build the {name} backend")
    return backend


def loader_choice(build_dir: Path, backend: str | None = None) -> str | None:
    """The variant directory under `build_dir` that `kernels` would load here, or None."""
    variant, _trace = resolve_variant(get_variants_local(build_dir), backend)
    return None if variant is None else variant.variant_str
