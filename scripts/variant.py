"""Variant names and the loader's choice among built variants, computed with the `kernels` loader's
own classes (so they are the names the loader looks for).

This is the one pipeline module that imports the loader's variant and backend classes: kernels 0.19
moved them under `kernels._internals`, and the other stages go through the functions here, so a future
move changes only this file (tests that hold the pipeline to those classes import them too).
"""

from __future__ import annotations

import platform
from pathlib import Path

from kernels._internals.backends import CPU, Backend, ROCm, _backend
from kernels._internals.variants import (
    ArchVariant,
    Python,
    System,
    Torch,
    get_variants_local,
    parse_variant,
    resolve_variant,
    variants_trace_str,
)
from packaging.version import Version

PLATFORM = "x86_64"
OS = "linux"


def torch_backend() -> Backend:
    """The backend the installed torch computes on (CPU, CUDA x.y or ROCm x.y), as `kernels` sees it.

    ROCm's version comes from `torch.version.rocm` where torch has it (2.10 and later), not from
    `torch.version.hip`: from ROCm 10 on HIP has its own, lower version (docker/README.md).
    """
    return _backend()


def backend_name(backend: Backend) -> str:
    return backend.name  # "cpu", "cuda", "rocm", ...


def name_for(
    torch_version: str, backend: Backend, *, cxx11: bool | None = True, platform: str = PLATFORM, os: str = OS
) -> str:
    """The variant name (legacy form, which every loader since 0.17 reads) for a torch release and
    a backend, e.g. torch29-cxx11-rocm64-x86_64-linux."""
    tv = Version(torch_version)
    return ArchVariant(
        framework=Torch(version=Version(f"{tv.major}.{tv.minor}"), cxx11_abi=cxx11),
        backend=backend,
        python=Python(),
        system=System(platform=platform, os=os),
    ).variant_str


def rocm_backend(rocm_version: str) -> Backend:
    """The kernels ROCm backend for a ROCm release ("6.4" -> rocm64)."""
    return ROCm(version=Version(rocm_version))


def variant_name(backend: Backend | None = None) -> str:
    """E.g. torch213-cxx11-cpu-x86_64-linux for this interpreter's torch."""
    import torch

    return name_for(
        torch.__version__,
        backend or torch_backend(),
        cxx11=torch.compiled_with_cxx11_abi() if platform.system() == "Linux" else None,
        platform=platform.machine(),
        os=platform.system().lower(),
    )


def backend_for(name: str) -> Backend:
    """The kernels Backend object for a backend name we build ("cpu" or this torch's GPU backend)."""
    if name == "cpu":
        return CPU()
    backend = torch_backend()
    if backend.name != name:
        raise ValueError(f"this torch computes on {backend.name}, it cannot build the {name} backend")
    return backend


def named_backend(name: str) -> str:
    """The backend a variant name declares ("cpu", "cuda", "rocm"), by the loader's own parser.

    Raises ValueError for a name the loader does not accept, or one that is not an arch variant."""
    parsed = parse_variant(name)
    if not isinstance(parsed, ArchVariant):
        raise ValueError(f"{name!r} is not an arch variant (a compiled kernel's name)")
    return parsed.backend.name


def loader_choice(build_dir: Path, backend: str | None = None) -> str | None:
    """The variant directory under `build_dir` that `kernels` would load here, or None."""
    variant, _trace = resolve_variant(get_variants_local(build_dir), backend)
    return None if variant is None else variant.variant_str


def loader_trace(build_dir: Path) -> tuple[str | None, str]:
    """The loader's choice under `build_dir` and its account of every variant it accepted or rejected."""
    variant, trace = resolve_variant(get_variants_local(build_dir))
    return (None if variant is None else variant.variant_str), variants_trace_str(trace)
