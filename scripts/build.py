"""Build stage: compile the backend the installed torch supports into `build/<variant>/`.

    python -m scripts.build [--out build] [--backend cpu|cuda|rocm] [--image-ref REF --image-digest D]

The variant directory is flat, as the `kernels` loader expects: the package files from
torch-ext/gemm/, a generated `_ops.py`, `<ops_name>.abi3.so` and `metadata.json`. It is assembled in a
staging directory and moved into place only when complete, then checked (scripts/check.py). The last line
on stdout is the variant directory.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from . import buildconfig, check, loaders, variant
from .common import REPO_ROOT, BuildError, log, main_wrapper, run, step

PY_LIMITED_API = "0x03090000"  # abi3 for Python >= 3.9, what the Hub's ABI check expects
BUILDER_VERSION = "gemm-scripts-1"  # recorded as provenance.kernel-builder.version
COMPILED_SUFFIXES = {".cpp", ".cc", ".cu", ".hip"}


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    """Everything a build needs, resolved before anything runs (printed by --dry-run)."""

    backend: str
    variant: str
    ops_name: str
    sources: tuple[Path, ...]
    compile_cmds: tuple[tuple[str, ...], ...]
    link_cmd: tuple[str, ...]
    compiler: str
    flags: tuple[str, ...]
    archs: tuple[str, ...]
    objects: tuple[Path, ...] = field(default=())


def source_hash(files: list[Path], root: Path) -> str:
    """7 hex digits over the content of every file that goes into the build."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:7]


def _cxx() -> str:
    return os.environ.get("CXX", "c++")


def _launcher() -> list[str]:
    """ccache in front of compilers when asked for (the container build mounts its cache)."""
    if os.environ.get("GEMM_CCACHE") == "1" and shutil.which("ccache"):
        return ["ccache"]
    return []


def _torch_flags(ops_name: str, backend: str) -> list[str]:
    import torch
    from torch.utils import cpp_extension

    device = "cpu" if backend == "cpu" else "cuda"
    includes = cpp_extension.include_paths(device) + [sysconfig.get_paths()["include"]]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        *(f"-I{p}" for p in includes),
        f"-DTORCH_EXTENSION_NAME={ops_name}",
        f"-DPy_LIMITED_API={PY_LIMITED_API}",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-D{backend.upper()}_KERNEL",
    ]


def _cuda_gencode(capability: str) -> str:
    """'9.0a' -> -gencode=arch=compute_90a,code=sm_90a"""
    major, minor = capability.split(".", 1)
    arch = f"{major}{minor}"
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def cutlass_include_dirs() -> list[Path]:
    """CUTLASS headers from the nvidia-cutlass wheel (found without importing its generator's deps)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(
            "the cuda backend needs the CUTLASS headers: pip install --no-deps -r requirements/cuda-headers.txt"
        )
    source = Path(list(spec.submodule_search_locations)[0]) / "source"
    return [source / "include", source / "tools" / "util" / "include"]


def make_plan(config: buildconfig.BuildConfig, backend: str, objdir: Path) -> BuildPlan:
    from torch.utils import cpp_extension

    spec = config.kernel_for(backend)
    files = config.source_files(backend)
    ops_name = f"_{config.python_name}_{backend}_{source_hash(files, config.root)}"
    try:
        name = variant.variant_name(variant.backend_for(backend))
    except ValueError as e:  # --backend rocm with a CPU or CUDA torch, and the like
        raise BuildError(str(e)) from None
    base = ["-O3", *_torch_flags(ops_name, backend)]
    base += [f"-I{config.root / inc}" for inc in (*config.torch_include, *spec.include)]
    if backend == "cuda":
        base += [f"-I{d}" for d in cutlass_include_dirs()]
    host_flags = [
        *base,
        "-std=c++17",
        "-fPIC",
        "-fno-gnu-unique",
        "-fvisibility=hidden",
        *config.torch_cxx_flags,
        *spec.cxx_flags,
    ]
    # build.toml may ask for another standard for device code (CUTLASS 4 wants C++20).
    device_std = [] if any(f.startswith("-std=") for f in spec.device_flags) else ["-std=c++17"]

    sources = [f for f in files if f.suffix in COMPILED_SUFFIXES]
    torch_lib = cpp_extension.library_paths("cpu")[0]
    libs = [f"-L{torch_lib}", "-lc10", "-ltorch", "-ltorch_cpu"]
    device_cc: list[str] = []
    device_flags: list[str] = []
    linker = [_cxx()]
    if backend == "cuda":
        cuda_home = cpp_extension.CUDA_HOME
        if not cuda_home:
            raise BuildError("the cuda backend needs the CUDA toolkit (nvcc); set CUDA_HOME")
        device_cc = [str(Path(cuda_home) / "bin" / "nvcc")]
        device_flags = [
            *base,
            *device_std,
            *(_cuda_gencode(c) for c in spec.archs),
            "--expt-relaxed-constexpr",
            "-Xcompiler=-fPIC,-fvisibility=hidden",
            *spec.device_flags,
        ]
        libs += [f"-L{Path(cuda_home) / 'lib64'}", "-lc10_cuda", "-ltorch_cuda", "-lcudart"]
    elif backend == "rocm":
        rocm_home = cpp_extension.ROCM_HOME
        if not rocm_home:
            raise BuildError("the rocm backend needs ROCm (hipcc); set ROCM_HOME")
        device_cc = [str(Path(rocm_home) / "bin" / "hipcc")]
        device_flags = [
            *base,
            *device_std,
            *(f"--offload-arch={a}" for a in spec.archs),
            "-fPIC",
            "-fvisibility=hidden",
            "-D__HIP_PLATFORM_AMD__=1",
            "-DUSE_ROCM=1",
            *spec.device_flags,
        ]
        libs += [f"-L{Path(rocm_home) / 'lib'}", "-lc10_hip", "-ltorch_hip", "-lamdhip64"]
        linker = device_cc

    compile_cmds, objects = [], []
    for src in sources:
        obj = objdir / (src.relative_to(config.root).as_posix().replace("/", "__") + ".o")
        if src.suffix in {".cu", ".hip"}:
            cmd = [*_launcher(), *device_cc, *device_flags, "-c", str(src), "-o", str(obj)]
        else:
            cmd = [*_launcher(), _cxx(), *host_flags, "-c", str(src), "-o", str(obj)]
        compile_cmds.append(tuple(cmd))
        objects.append(obj)
    so = objdir / f"{ops_name}.abi3.so"
    link_cmd = (*linker, "-shared", *map(str, objects), "-o", str(so), *libs)
    compiler = " ".join(device_cc) if device_cc else _cxx()
    return BuildPlan(
        backend=backend,
        variant=name,
        ops_name=ops_name,
        sources=tuple(sources),
        compile_cmds=tuple(compile_cmds),
        link_cmd=link_cmd,
        compiler=compiler,
        flags=tuple(device_flags or host_flags),
        archs=spec.archs,
        objects=tuple(objects),
    )


def _compiler_version(compiler: str) -> str:
    try:
        return run([compiler.split()[0], "--version"]).splitlines()[0]
    except (BuildError, OSError):
        return compiler


# What a build reads: the manifest, the kernel sources and the binding with its Python package (copied
# whole into the variant). A file here that git does not track makes the build unreproducible from its commit.
BUILD_INPUTS = ("build.toml", "gemm", "torch-ext")


def _git_state(root: Path) -> dict | None:
    """HEAD commit and whether the build differs from it; None outside a git checkout.

    Dirty: a tracked file differs from HEAD, or a build input is not tracked at all, ignored files included
    (a stray module or an old .so in torch-ext/gemm/ would ship inside the variant)."""
    git = ["git", "-c", "safe.directory=*", "-C", str(root)]
    try:
        commit = run([*git, "rev-parse", "HEAD"]).strip()
        changed = run([*git, "status", "--porcelain", "--untracked-files=no"]).strip()
        others = run([*git, "ls-files", "--others", "--", *BUILD_INPUTS]).split()
    except (BuildError, OSError):
        return None
    # Never shipped or compiled: the layout skips caches (and git status does not list empty directories).
    untracked = [f for f in others if "__pycache__/" not in f and not f.endswith(".pyc")]
    if untracked:
        log(f"    not in git, so the build is marked dirty: {', '.join(untracked[:10])}")
    return {"commit": commit, "dirty": bool(changed or untracked)}


def _ops_py(ops_name: str, backend: str) -> str:
    return (
        "# Generated by scripts/build.py: binds the package to this build's op namespace.\n"
        "import torch\n\n"
        f"from . import {ops_name}  # noqa: F401  (loads the .so, which registers the ops)\n\n"
        f"ops = torch.ops.{ops_name}\n"
        f'BACKEND = "{backend}"\n\n\n'
        "def add_op_namespace_prefix(op_name: str) -> str:\n"
        f'    return f"{ops_name}::{{op_name}}"\n'
    )


def symbols(package: Path) -> dict:
    """symbols.json, which `kernels describe-api` (0.18.3 and later) reads to list a kernel's public functions and
    layers without importing it: the functions named in `__all__` of the package's __init__.py (defined
    there or imported from a module of the package) and the nn.Module classes of layers.py with the
    two flags kernelize reads. Read from the source, so the build never imports the library."""

    def tree(name: str) -> ast.Module:
        return ast.parse((package / name).read_text())

    init = tree("__init__.py")
    exported = next(
        (
            ast.literal_eval(node.value)
            for node in init.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        ),
        None,
    )
    if not isinstance(exported, list):
        raise BuildError(f"{package}/__init__.py needs a literal __all__ list (symbols.json is written from it)")
    defined = {n.name for n in init.body if isinstance(n, ast.FunctionDef)}
    for node in init.body:  # `from .quantize import f`: f counts if that module defines it with `def`
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 1
            and node.module
            and (package / f"{node.module}.py").is_file()
        ):
            module_defs = {n.name for n in tree(f"{node.module}.py").body if isinstance(n, ast.FunctionDef)}
            defined |= {a.asname or a.name for a in node.names if a.name in module_defs}
    layers = []
    if (package / "layers.py").is_file():
        for cls in tree("layers.py").body:
            if not isinstance(cls, ast.ClassDef) or not any(
                ast.unparse(b) in ("nn.Module", "torch.nn.Module") for b in cls.bases
            ):
                continue
            flags = {
                t.id: n.value.value
                for n in cls.body
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, bool)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            attributes = {key: flags.get(key) for key in ("has_backward", "can_torch_compile")}
            layers.append({"name": cls.name, "attributes": attributes})
    functions = [{"name": name} for name in exported if name in defined]
    return {"schema_version": 1, "functions": functions, "layers": layers}


def _rocm_release(backend: str) -> str | None:
    """The ROCm major.minor the variant is named after (rocm builds only)."""
    if backend != "rocm":
        return None
    version = variant.torch_backend().version
    return f"{version.major}.{version.minor}"


def metadata(config: buildconfig.BuildConfig, plan: BuildPlan, image: dict | None) -> dict:
    import torch

    git = _git_state(config.root)
    backend: dict = {"type": plan.backend}
    if plan.archs:
        backend["archs"] = list(plan.archs)
    provenance: dict = {"kernel-builder": {"version": BUILDER_VERSION}}
    if git is not None:
        provenance["kernel"] = git
    return {
        "name": config.name,
        "id": plan.ops_name,
        "version": config.version,
        "license": config.license,
        "python-depends": list(config.python_depends),
        "backend": backend,
        "kernels-minver": loaders.minver(plan.backend, _rocm_release(plan.backend)),
        "provenance": provenance,
        "build": {
            "variant": plan.variant,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "compiler": _compiler_version(plan.compiler),
            "flags": [f for f in plan.flags if not f.startswith("-I")],
            "host": socket.gethostname(),
            "image": image,
        },
    }


def build(
    *,
    out: Path,
    backend: str | None = None,
    root: Path = REPO_ROOT,
    image: dict | None = None,
    run_checks: bool = True,
    with_loaders: bool = False,
) -> Path:
    """Build one variant into `out/<variant>/` and return that directory."""
    config = buildconfig.load(root)
    backend = backend or variant.torch_backend().name
    if backend not in config.backends:
        raise BuildError(f"build.toml does not list backend {backend!r} (it has {', '.join(config.backends)})")
    out.mkdir(parents=True, exist_ok=True)
    objdir = out / ".obj" / backend
    objdir.mkdir(parents=True, exist_ok=True)
    plan = make_plan(config, backend, objdir)
    log(f"variant {plan.variant}, ops {plan.ops_name}, {len(plan.sources)} sources")

    with step(f"compile {plan.backend} ({len(plan.compile_cmds)} translation units)"):
        jobs = max(1, min(len(plan.compile_cmds), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            for result in pool.map(lambda cmd: run(list(cmd)), plan.compile_cmds):
                del result
    with step("link"):
        run(list(plan.link_cmd))

    staging = out / f".staging-{plan.variant}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with step("lay out the variant"):
            package = root / "torch-ext" / config.python_name
            shutil.copytree(package, staging, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            (staging / "_ops.py").write_text(_ops_py(plan.ops_name, plan.backend))
            (staging / "symbols.json").write_text(json.dumps(symbols(package), indent=2) + "\n")
            shutil.copy2(objdir / f"{plan.ops_name}.abi3.so", staging / f"{plan.ops_name}.abi3.so")
            meta = metadata(config, plan, image)
            meta["digest"] = check.digest_json(staging)
            check.write_metadata(staging, meta)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # no half-laid-out directory left beside the variants
        raise

    final = out / plan.variant
    # Replace the old variant only now that the new one is complete. If a check then fails, the new one
    # stays, its metadata recording the failure (scripts.check), which the publisher refuses.
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)
    if run_checks:
        check.check_variant(final, build_dir=out, with_loaders=with_loaders)
    return final


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build", help="build directory (default: build/)")
    parser.add_argument("--backend", choices=buildconfig.BACKENDS, help="default: the backend torch computes on")
    parser.add_argument("--image-ref", help="container image the build runs in (recorded in metadata)")
    parser.add_argument("--image-digest", help="that image's digest (recorded in metadata)")
    parser.add_argument("--no-check", action="store_true", help="skip the checks (not for releases)")
    parser.add_argument(
        "--loaders", action="store_true", help="check: load it with each kernels release of requirements/loaders.txt"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    args = parser.parse_args()
    image = {"ref": args.image_ref, "digest": args.image_digest} if args.image_ref else None
    if args.dry_run:
        config = buildconfig.load()
        backend = args.backend or variant.torch_backend().name
        plan = make_plan(config, backend, args.out / ".obj" / backend)
        print(json.dumps({k: str(v) for k, v in plan.__dict__.items()}, indent=2))
        return 0
    final = build(
        out=args.out, backend=args.backend, image=image, run_checks=not args.no_check, with_loaders=args.loaders
    )
    print(final)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
