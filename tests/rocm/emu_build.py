"""Build and run C++ drivers of the HIP emulator (gemm/rocm/emu) under sanitizers.

Used by tests/rocm/test_emulator_*.py. Drivers are compiled once per test session into a
temporary directory (keyed by the hash of their sources and flags) with clang++-19, either with
AddressSanitizer + UndefinedBehaviorSanitizer ("asan") or with ThreadSanitizer ("tsan").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROCM_DIR = REPO / "gemm" / "rocm"
EMU_DIR = ROCM_DIR / "emu"

CXX = os.environ.get("GEMM_EMU_CXX", "clang++-19")

COMMON_FLAGS = [
    "-std=c++17",
    "-O1",
    "-g",
    "-Wall",
    "-Wextra",
    "-Wno-psabi",
    "-fno-omit-frame-pointer",
    "-DGEMM_HIP_EMULATOR=1",
    "-pthread",
]
SANITIZER_FLAGS = {
    "asan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
    "tsan": ["-fsanitize=thread"],
}
SANITIZER_ENV = {
    # Leak checking stays on; any report aborts with a non-zero exit status.
    "asan": {
        "ASAN_OPTIONS": "abort_on_error=0:detect_leaks=1:strict_string_checks=1:check_initialization_order=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    },
    "tsan": {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1"},
}
SANITIZERS = tuple(SANITIZER_FLAGS)


def compiler() -> str:
    path = shutil.which(CXX)
    if path is None:
        pytest.fail(
            f"{CXX} not found: the emulator tests need clang-19 and libclang-rt-19-dev (listed in .ci/apt-packages.txt)"
        )
    return path


def _headers() -> list[Path]:
    return sorted(
        p for p in ROCM_DIR.rglob("*") if p.is_file() and p.suffix in {".h", ".hpp", ".cuh", ".hip", ".cpp", ".inc"}
    )


class Builder:
    """Compiles drivers into `root`, at most once per (sources, flags)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def for_session(cls, tmp_path_factory, name: str) -> Builder:
        """A builder in this session's temp dir, or in $GEMM_EMU_CACHE (kept between runs) if set."""
        cache = os.environ.get("GEMM_EMU_CACHE")
        return cls(Path(cache) / name if cache else tmp_path_factory.mktemp(name))

    def _target(self, source: Path, sanitizer: str, extra_flags=(), include_dirs=()):
        if sanitizer not in SANITIZER_FLAGS:
            raise ValueError(f"sanitizer must be one of {SANITIZERS}, got {sanitizer!r}")
        flags = COMMON_FLAGS + SANITIZER_FLAGS[sanitizer] + list(extra_flags)
        flags += [f"-I{d}" for d in include_dirs]
        h = hashlib.sha256()
        h.update(" ".join(flags).encode())
        for f in [Path(source), *_headers()]:
            h.update(str(f).encode())
            h.update(f.read_bytes())
        exe = self.root / f"{Path(source).stem}-{sanitizer}-{h.hexdigest()[:16]}"
        return exe, [compiler(), *flags, str(source), "-o", str(exe)]

    def build(
        self, source: Path, sanitizer: str, extra_flags: tuple[str, ...] = (), include_dirs: tuple[Path, ...] = ()
    ) -> Path:
        exe, cmd = self._target(source, sanitizer, extra_flags, include_dirs)
        if not exe.exists():
            self._compile_all([(exe, cmd, f"{source} ({sanitizer})")])
        return exe

    def prebuild(self, source: Path, sanitizers=SANITIZERS, jobs: int = 2) -> None:
        """Compile the sanitizer variants of one driver side by side (at most `jobs` at once)."""
        todo = []
        for san in sanitizers:
            exe, cmd = self._target(source, san)
            if not exe.exists():
                todo.append((exe, cmd, f"{source} ({san})"))
        for i in range(0, len(todo), jobs):
            self._compile_all(todo[i : i + jobs])

    @staticmethod
    def _compile_all(items) -> None:
        procs = []
        for exe, cmd, what in items:
            tmp = exe.with_name(exe.name + ".tmp")
            procs.append(
                (
                    subprocess.Popen([*cmd[:-1], str(tmp)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                    exe,
                    tmp,
                    cmd,
                    what,
                )
            )
        errors = []
        for proc, exe, tmp, cmd, what in procs:
            try:
                _, err = proc.communicate(timeout=1200)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                err = "timed out\n" + err
            if proc.returncode == 0:
                tmp.replace(exe)
            else:
                errors.append(f"compiling {what} failed:\n{' '.join(cmd)}\n{err[-6000:]}")
        if errors:
            pytest.fail("\n\n".join(errors))


def run(
    exe: Path, args: list[str], sanitizer: str, timeout: float = 600, expect_ok: bool = True
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(SANITIZER_ENV[sanitizer])
    env.setdefault("GEMM_EMU_TIMEOUT_S", "240")  # a stuck rendezvous fails the test well before `timeout`
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    if expect_ok and proc.returncode != 0:
        pytest.fail(
            f"{exe.name} {' '.join(map(str, args))} exited with {proc.returncode} under {sanitizer}:\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-8000:]}"
        )
    return proc
