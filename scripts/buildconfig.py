"""Read build.toml: validated by the official parser shipped inside `kernels`, then the source lists
and flags read with tomllib (the parser does not expose them). Everything downstream reads this."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import tomllib
from kernels._rust import Build

from .common import REPO_ROOT, ConfigError

BACKENDS = ("cpu", "cuda", "rocm")
# Edition 6 names a [kernel.*] section's language, which implies its backend (edition 5 named the backend).
# The parser knows more languages (rust-*, cpp-metal, cpp-xpu); this build stage compiles these.
LANGUAGE_BACKENDS = {"cpp-cpu": "cpu", "cpp-cuda": "cuda", "cpp-rocm": "rocm"}


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """One `[kernel.*]` section: the sources and flags of one backend."""

    name: str
    backend: str
    src: tuple[str, ...]
    archs: tuple[str, ...]  # cuda-capabilities or rocm-archs; empty for cpu
    cxx_flags: tuple[str, ...] = ()
    device_flags: tuple[str, ...] = ()  # cuda-flags or hip-flags
    include: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BuildConfig:
    root: Path
    name: str
    version: int
    license: str
    backends: tuple[str, ...]
    repo_id: str | None
    python_depends: tuple[str, ...]  # [general] python-depends: recorded in metadata.json for the loader
    torch_src: tuple[str, ...]
    torch_include: tuple[str, ...] = ()  # [torch] include and cxx-flags: every translation unit / host one
    torch_cxx_flags: tuple[str, ...] = ()
    kernels: dict[str, KernelSpec]  # keyed by backend

    @property
    def python_name(self) -> str:
        return self.name.replace("-", "_")

    def kernel_for(self, backend: str) -> KernelSpec:
        if backend not in self.kernels:
            raise ConfigError(f"build.toml has no [kernel.*] section for backend {backend!r}")
        return self.kernels[backend]

    def source_files(self, backend: str) -> list[Path]:
        """Every file whose content goes into a build of `backend` (for the source hash)."""
        spec = self.kernel_for(backend)
        names = [*self.torch_src, *spec.src]
        missing = [n for n in names if not (self.root / n).is_file()]
        if missing:
            raise ConfigError(f"build.toml: [kernel.{spec.name}] or [torch] lists missing files: {', '.join(missing)}")
        package = self.root / "torch-ext" / self.python_name
        files = [self.root / n for n in names] + sorted(
            p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
        return files


def load(root: Path = REPO_ROOT) -> BuildConfig:
    """Parse and validate `root/build.toml`; ConfigError names what is wrong."""
    path = root / "build.toml"
    if not path.is_file():
        raise ConfigError(f"no build.toml in {root}")
    try:
        build = Build.open(root)
    except ValueError as err:
        raise ConfigError(f"{path} is invalid: {err}") from None
    data = tomllib.loads(path.read_text())
    general = data["general"]
    backends = tuple(str(b).lower() for b in build.general.backends)

    kernels: dict[str, KernelSpec] = {}
    for name, section in data.get("kernel", {}).items():
        if "language" in section:
            backend = LANGUAGE_BACKENDS.get(section["language"])
            if backend is None:
                raise ConfigError(
                    f"{path}: [kernel.{name}] language {section['language']!r}: scripts/build.py builds "
                    f"{', '.join(LANGUAGE_BACKENDS)} only"
                )
        else:
            backend = section["backend"]
        if backend in kernels:
            raise ConfigError(f"{path}: two [kernel.*] sections for backend {backend!r}")
        spec = KernelSpec(
            name=name,
            backend=backend,
            src=tuple(section.get("src", ())),
            archs=tuple(section.get("cuda-capabilities", section.get("rocm-archs", ()))),
            cxx_flags=tuple(section.get("cxx-flags", ())),
            device_flags=tuple(section.get("cuda-flags", section.get("hip-flags", ()))),
            include=tuple(section.get("include", ())),
        )
        kernels[backend] = spec

    torch_section = data.get("torch", {})

    return BuildConfig(
        root=root,
        name=general["name"],
        version=int(general["version"]),
        license=general["license"],
        backends=backends,
        repo_id=general.get("hub", {}).get("repo-id"),
        python_depends=tuple(general.get("python-depends", ())),
        torch_src=tuple(torch_section.get("src", ())),
        torch_include=tuple(torch_section.get("include", ())),
        torch_cxx_flags=tuple(torch_section.get("cxx-flags", ())),
        kernels=kernels,
    )
