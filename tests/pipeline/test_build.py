"""The build stage's promises: build.toml checked by the official parser, the variant named and chosen
as the kernels loader does, valid metadata with a digest that matches, and three ways of loading."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kernels_data import Metadata

from scripts import buildconfig, check, variant
from scripts.common import CheckError, ConfigError
from tests.conftest import REPO_ROOT


def test_build_toml_accepted_by_official_parser():
    config = buildconfig.load(REPO_ROOT)
    assert config.name == "gemm" and config.version == 1
    assert set(config.backends) == {"cpu", "cuda", "rocm"}
    assert config.kernel_for("rocm").archs == ("gfx942",)
    assert config.kernel_for("cuda").archs == ("9.0a",)


@pytest.mark.parametrize(
    "breakage",
    [
        ("edition = 6", "edition = 6\nunknown-key = 1"),
        ('language = "cpp-rocm"', 'language = "cpp-tpu-of-the-future"'),
        ('language = "cpp-rocm"', 'backend = "rocm"'),  # edition 5's key, which edition 6 no longer has
        ('name = "gemm"', 'name = "Not_A_Kernel_Name"'),
    ],
    ids=["unknown key", "unknown language", "edition 5 key", "bad name"],
)
def test_broken_build_toml_rejected(tmp_path, breakage):
    old, new = breakage
    text = (REPO_ROOT / "build.toml").read_text()
    assert old in text
    (tmp_path / "build.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match="build.toml is invalid"):
        buildconfig.load(tmp_path)


def test_build_toml_is_in_the_edition_the_installed_parser_calls_current():
    """kernels' parser upgrades older editions in memory, with a warning, and the Nix builder (flake.nix)
    refuses them: build.toml must need no upgrade."""
    code = "from kernels._rust import Build; Build.open('.')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "upgrading" not in proc.stderr and "edition" not in proc.stderr, proc.stderr


def _edited_root(tmp_path: Path, old: str, new: str) -> Path:
    """A project root whose build.toml has `old` replaced by `new`, sharing the repo's sources."""
    text = (REPO_ROOT / "build.toml").read_text()
    assert old in text
    (tmp_path / "build.toml").write_text(text.replace(old, new, 1))
    for name in ("gemm", "torch-ext"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    return tmp_path


def test_a_language_the_stage_cannot_build_is_named(tmp_path):
    root = _edited_root(tmp_path, 'language = "cpp-cpu"', 'language = "cpp-xpu"')  # valid for the parser
    with pytest.raises(ConfigError, match="language 'cpp-xpu': scripts/build.py builds cpp-cpu, cpp-cuda, cpp-rocm"):
        buildconfig.load(root)


def test_python_depends_and_torch_flags_reach_the_build(tmp_path):
    """Keys the parser accepts are applied, not dropped: [general] python-depends goes into metadata.json
    (the loader checks it), [torch] include and cxx-flags into the compile commands."""
    from scripts import build

    root = _edited_root(
        tmp_path,
        "[torch]\n",
        '[torch]\ninclude = ["gemm/cpu"]\ncxx-flags = ["-DGEMM_TORCH_FLAG"]\n',
    )
    text = (root / "build.toml").read_text().replace("backends = [", 'python-depends = ["einops"]\nbackends = [', 1)
    (root / "build.toml").write_text(text)
    config = buildconfig.load(root)
    plan = build.make_plan(config, "cpu", tmp_path / "obj")
    for cmd in plan.compile_cmds:
        assert "-DGEMM_TORCH_FLAG" in cmd and f"-I{root / 'gemm/cpu'}" in cmd, cmd
    assert build.metadata(config, plan, None)["python-depends"] == ["einops"]


def test_variant_name_is_the_loaders_choice(variant_dir, build_dir):
    assert variant_dir.name == variant.variant_name()
    assert variant.loader_choice(build_dir) == variant_dir.name


def test_metadata_valid_and_digest_matches(variant_dir):
    meta = Metadata.read_from_file(variant_dir / "metadata.json")
    raw = json.loads((variant_dir / "metadata.json").read_text())
    assert str(meta.name) == "gemm" and meta.version == 1
    assert meta.id == raw["id"] and raw["id"].startswith(f"_gemm_{raw['backend']['type']}_")
    assert (variant_dir / f"{meta.id}.abi3.so").is_file()
    assert sorted(raw["digest"]["files"]) == sorted(
        p.relative_to(variant_dir).as_posix()
        for p in variant_dir.rglob("*")
        if p.is_file() and p.name != "metadata.json" and "__pycache__" not in p.parts
    )
    check.verify_digest(variant_dir)
    assert raw["checks"]["loader"]["ok"] and raw["checks"]["smoke"]["ok"]
    assert "ok" in raw["checks"]["abi"]
    assert raw["build"]["torch"] and raw["provenance"]["kernel-builder"]["version"]


def _copy_to(variant_dir: Path, build: Path) -> Path:
    shutil.copytree(variant_dir, build / variant_dir.name, ignore=shutil.ignore_patterns("__pycache__"))
    return build / variant_dir.name


def test_tampered_variant_fails_digest(variant_dir, tmp_path):
    copy = _copy_to(variant_dir, tmp_path)
    so = next(copy.glob("*.so"))
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])  # a truncated upload
    with pytest.raises(CheckError, match="does not match its digest"):
        check.verify_digest(copy)


def test_loader_rejects_misnamed_variant(variant_dir, tmp_path):
    """A build whose directory name the loader would not choose fails the check."""
    wrong = tmp_path / variant_dir.name.replace("torch", "torch1", 1)  # torch1213: another torch
    shutil.copytree(variant_dir, wrong, ignore=shutil.ignore_patterns("__pycache__"))
    with pytest.raises(CheckError, match="the kernels loader would load"):
        check.loader_verdict(wrong, tmp_path, "cpu")


def test_a_failed_check_is_recorded_and_no_earlier_pass_survives(variant_dir, tmp_path):
    """A re-check that fails records the failure, and the checks after it as not run: the previous run's
    "ok" verdicts must not stay (the publisher reads them). Verdicts the check does not own stay."""
    copy = _copy_to(variant_dir, tmp_path / "build")
    meta = json.loads((copy / "metadata.json").read_text())
    meta.setdefault("checks", {})["tests"] = {"ok": True}  # the GPU tests' verdict, which scripts.check does not own
    (copy / "metadata.json").write_text(json.dumps(meta))
    so = next(copy.glob("*.so"))
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    with pytest.raises(CheckError, match="does not match its digest"):
        check.check_variant(copy)
    recorded = json.loads((copy / "metadata.json").read_text())["checks"]
    assert recorded["digest"]["ok"] is False and "does not match its digest" in recorded["digest"]["error"]
    for name in ("loader", "abi", "smoke"):
        assert recorded[name] == {"ok": False, "error": "not run: an earlier check failed"}, name
    assert recorded["tests"] == {"ok": True}


def test_a_check_that_breaks_unexpectedly_records_why(variant_dir, tmp_path, monkeypatch):
    """Not only CheckError: any exception inside a check is that check's failed verdict, with its type."""
    copy = _copy_to(variant_dir, tmp_path / "build")

    def garbled(*args):
        raise json.JSONDecodeError("Expecting value", "", 0)

    monkeypatch.setattr(check, "smoke_verdict", garbled)
    with pytest.raises(json.JSONDecodeError):
        check.check_variant(copy)
    recorded = json.loads((copy / "metadata.json").read_text())["checks"]
    assert recorded["digest"]["ok"] and recorded["loader"]["ok"]
    assert recorded["smoke"] == {"ok": False, "error": "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"}


@pytest.mark.parametrize("garbage", ["{bad", '{"name": "gemm"}'])
def test_unreadable_metadata_is_a_check_error_not_a_traceback(variant_dir, tmp_path, garbage):
    copy = _copy_to(variant_dir, tmp_path / "build")
    (copy / "metadata.json").write_text(garbage)
    with pytest.raises(CheckError, match="metadata.json: "):
        check.check_variant(copy)


def test_the_build_stage_names_what_it_cannot_do(tmp_path):
    """A backend this torch cannot build, and a compiler that does not exist: the stage's own error and exit
    code (3), not a traceback."""
    no_compiler = {**os.environ, "CXX": "/nonexistent/c++"}
    for args, env, words in (
        (["--backend", "rocm"], os.environ, "cannot build the rocm backend"),
        (["--backend", "cpu", "--no-check"], no_compiler, "cannot run /nonexistent/c++"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "scripts.build", *args, "--out", str(tmp_path / "out")],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 3, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_proofs_load_the_variant_checked_not_a_namesake(variant_dir, tmp_path):
    """Checked against another build directory, the loader would load that directory's variant of the same
    name: the check must fail rather than record another variant's proof."""
    copy = _copy_to(variant_dir, tmp_path / "elsewhere")
    with pytest.raises(CheckError, match="is not in"):
        check.check_variant(copy, build_dir=variant_dir.parent)
    with pytest.raises(CheckError, match="not the variant in"):
        check.smoke_verdict(copy, variant_dir.parent, "cpu")
    assert json.loads((copy / "metadata.json").read_text())["checks"]["smoke"]["ok"] is False


def test_a_build_input_git_does_not_track_marks_the_build_dirty(tmp_path):
    """The package directory is copied whole into the variant: an untracked module or an ignored old .so
    there would ship under a clean provenance. Caches and files outside the build's inputs do not count."""
    from scripts import build

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "torch-ext" / "gemm").mkdir(parents=True)
    (tmp_path / "gemm").mkdir()
    (tmp_path / "build.toml").write_text("[general]\n")
    (tmp_path / "gemm" / "k.cpp").write_text("int k;\n")
    (tmp_path / "torch-ext" / "gemm" / "__init__.py").write_text("")
    (tmp_path / ".gitignore").write_text("*.so\n__pycache__/\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    assert build._git_state(tmp_path)["dirty"] is False
    (tmp_path / "notes.txt").write_text("outside the inputs\n")
    (tmp_path / "torch-ext" / "gemm" / "__pycache__").mkdir()
    (tmp_path / "torch-ext" / "gemm" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    assert build._git_state(tmp_path)["dirty"] is False
    for stray in ("torch-ext/gemm/_gemm_cpu_old.abi3.so", "torch-ext/gemm/stray.py", "gemm/new.cpp"):
        (tmp_path / stray).write_text("x")
        assert build._git_state(tmp_path)["dirty"] is True, stray
        (tmp_path / stray).unlink()
    assert build._git_state(tmp_path)["dirty"] is False


def _run_python(code: str, env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if k != "LOCAL_KERNELS"}
    proc = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_CALL = """
import torch
k = {load}
a = torch.randn(256, 8).to(k.SUPPORTED_DTYPES[0]); b = torch.randn(256, 130).to(k.SUPPORTED_DTYPES[0])
sa = torch.randn(2, 8); sb = torch.randn(2, 2)
ok = k.reference.within_tolerance(k.gemm(a, b, sa, sb), k.reference.gemm_reference(a, b, sa, sb)).all()
print(k.__name__, bool(ok))
"""


def test_loads_with_local_kernels_override(variant_dir, build_dir):
    if variant.torch_backend().name != "cpu":
        pytest.skip("the call below runs on the CPU")
    out = _run_python(
        _CALL.format(load='__import__("kernels").get_kernel("kernels-community/gemm", version=1)'),
        {"LOCAL_KERNELS": f"kernels-community/gemm={build_dir.parent}", "HF_HUB_OFFLINE": "1"},
    )
    assert out.split()[-1] == "True"


def test_loads_from_offline_hub_cache(variant_dir, tmp_path):
    """The Hub path without a network: a cache laid out as huggingface_hub stores a downloaded kernel."""
    if variant.torch_backend().name != "cpu":
        pytest.skip("the call below runs on the CPU")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "kernels--acme--gemm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "v1").write_text(commit)
    shutil.copytree(
        variant_dir,
        repo / "snapshots" / commit / "build" / variant_dir.name,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    out = _run_python(
        _CALL.format(load='__import__("kernels").get_kernel("acme/gemm", version=1)'),
        {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"},
    )
    assert out.split()[-1] == "True"
    assert "snapshots" not in out  # loaded under the metadata id, not imported from a source tree


def _stand_in_compiler(variant_dir: Path, real_run):
    """build.run with the compile and link commands stood in for: the link writes the built variant's .so to
    the path it names, the compiles do nothing. Everything else (git, the compiler's --version, the layout,
    metadata, digest) runs for real."""
    so_bytes = next(variant_dir.glob("*.abi3.so")).read_bytes()

    def run(cmd, **kwargs):
        if "-shared" in cmd:
            Path(cmd[cmd.index("-o") + 1]).write_bytes(so_bytes)
            return ""
        if "-c" in cmd and "-o" in cmd:
            return ""
        return real_run(cmd, **kwargs)

    return run


def test_build_is_atomic_and_reproducible(variant_dir, tmp_path, monkeypatch):
    """Two builds into fresh directories lay out the same files, byte for byte (the .so aside, here the same
    bytes by construction); a build that fails while laying out leaves no staging directory and the
    variant already there untouched."""
    from scripts import build as build_stage

    monkeypatch.setattr(build_stage, "run", _stand_in_compiler(variant_dir, build_stage.run))
    a = build_stage.build(out=tmp_path / "a", backend="cpu", run_checks=False)
    b = build_stage.build(out=tmp_path / "b", backend="cpu", run_checks=False)
    assert a.name == b.name == variant.variant_name(variant.backend_for("cpu"))  # whatever torch this is

    def files(d: Path) -> dict[str, bytes]:
        return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb) and "metadata.json" in fa and "symbols.json" in fa
    differ = [name for name in fa if fa[name] != fb[name]]
    assert not differ, f"two builds of the same tree differ in {differ}"

    def fails(package):
        raise RuntimeError("planted failure while laying out")

    monkeypatch.setattr(build_stage, "symbols", fails)
    with pytest.raises(RuntimeError, match="planted failure"):
        build_stage.build(out=tmp_path / "a", backend="cpu", run_checks=False)
    assert not list((tmp_path / "a").glob(".staging-*")), "a half-built variant was left behind"
    assert files(a) == fa, "the variant already there was touched by a build that failed"


def test_symbols_json_lists_what_the_loaded_kernel_exports(variant_dir, build_dir, kernel):
    """symbols.json (read from the source at build time) against the module users load, and as
    `kernels describe-api` prints it."""
    import inspect

    from torch import nn

    symbols = json.loads((variant_dir / "symbols.json").read_text())
    assert symbols["schema_version"] == 1
    functions = [name for name in kernel.__all__ if inspect.isfunction(getattr(kernel, name))]
    assert functions and [f["name"] for f in symbols["functions"]] == functions
    layers = [
        {"name": name, "attributes": {"has_backward": cls.has_backward, "can_torch_compile": cls.can_torch_compile}}
        for name, cls in vars(kernel.layers).items()
        if inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == kernel.layers.__name__
    ]
    assert layers and symbols["layers"] == layers
    cli = "import sys; from kernels._internals.cli import main; sys.argv[0] = 'kernels'; main()"
    proc = subprocess.run(
        [sys.executable, "-c", cli, "describe-api", str(build_dir), "--json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    described = json.loads(proc.stdout)
    assert described["variant"] == variant_dir.name
    assert described["functions"] == symbols["functions"] and described["layers"] == symbols["layers"]
