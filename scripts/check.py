"""Check stage: what must hold for a built variant before anyone tests or publishes it.

    python -m scripts.check build/<variant> [--strict] [--loaders]

- metadata.json is valid for kernels-data and its digest matches the files;
- the `kernels` loader, asked to choose among the variants in the build directory, picks this one;
- kernel-abi-check: the .so against manylinux_2_28 and abi3 3.9 (the Hub's rules); the verdict is
  recorded, and fails the check only with --strict (a Debian or Ubuntu build cannot meet it);
- a fresh interpreter loads the variant through `kernels` and runs one call against the reference
  (on the variant's device, when this machine has one);
- with --loaders, the same in a fresh interpreter for each `kernels` release in
  requirements/loaders.txt: every release at or above the variant's kernels-minver must load it
  (scripts/loaders.py);
- rocm: the gfx942 code objects inside the shipped .so, held to the gfx942 gate's rules (fp8 MFMA in
  every GEMM kernel, no scratch, no spills, LDS within 64 KiB): the gate inspects clang-19's build, this
  inspects what the release compiler (ROCm's hipcc) actually produced.
Results go to metadata.json under "checks" (metadata.json is outside the digest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kernel_abi_check
from kernels_data import Digest, DigestAlgorithm, DigestValidationError, Metadata

from . import loaders, variant
from .common import REPO_ROOT, CheckError, log, main_wrapper, step

MANYLINUX = "manylinux_2_28"
PYTHON_ABI = "3.9"


def digest_json(variant_dir: Path) -> dict:
    digest = Digest.hash_variant(DigestAlgorithm.SHA256, variant_dir)
    return {"algorithm": "sha256", "files": dict(sorted(digest.files.items()))}


def read_metadata(variant_dir: Path) -> dict:
    path = variant_dir / "metadata.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("backend"), dict) or "type" not in meta["backend"]:
        raise CheckError(f"{path}: no backend.type: not the metadata scripts.build writes")
    return meta


def write_metadata(variant_dir: Path, meta: dict) -> None:
    path = variant_dir / "metadata.json"
    path.write_text(json.dumps(meta, indent=2) + "\n")
    try:
        Metadata.read_from_file(path)
    except ValueError as err:
        raise CheckError(f"{path} is not valid kernels metadata: {err}") from None


def verify_digest(variant_dir: Path) -> None:
    """Raise CheckError unless the files match the digest recorded in metadata.json."""
    expected = Metadata.read_from_file(variant_dir / "metadata.json").digest
    if expected is None:
        raise CheckError(f"{variant_dir}/metadata.json has no digest")
    try:
        expected.validate(Digest.hash_variant(DigestAlgorithm.SHA256, variant_dir))
    except DigestValidationError as err:
        problems = "; ".join(str(v) for v in err.violations)
        raise CheckError(f"{variant_dir} does not match its digest: {problems}") from None


def abi_verdict(variant_dir: Path) -> dict:
    verdict: dict = {"manylinux": MANYLINUX, "python_abi": PYTHON_ABI, "files": {}}
    ok = True
    for so in sorted(variant_dir.glob("*.so")):
        obj = kernel_abi_check.ObjectFile(so)
        manylinux = [str(v) for v in obj.check_manylinux(MANYLINUX)]
        python_abi = [str(v) for v in obj.check_python_abi(PYTHON_ABI)]
        verdict["files"][so.name] = {"manylinux_violations": manylinux, "python_abi_violations": python_abi}
        ok = ok and not manylinux and not python_abi
    verdict["ok"] = ok
    return verdict


def loader_verdict(variant_dir: Path, build_dir: Path, backend: str) -> dict:
    chosen = variant.loader_choice(build_dir, backend)
    if chosen != variant_dir.name:
        raise CheckError(
            f"the kernels loader would load {chosen!r} from {build_dir}, not the variant just built "
            f"({variant_dir.name!r}): the name does not match this interpreter's torch"
        )
    # The same name in another directory is another variant: the proofs below would load that one.
    if (build_dir / chosen).resolve() != variant_dir.resolve():
        raise CheckError(f"{variant_dir} is not in {build_dir}: the loader would load {build_dir / chosen} instead")
    return {"ok": True, "chosen": chosen}


# Run in a fresh interpreter, so nothing imported by the build leaks into the proof that it loads.
_SMOKE = r"""
import json, sys, torch
from pathlib import Path
import kernels
build_dir, backend = Path(sys.argv[1]), sys.argv[2]
kernel = kernels.get_local_kernel(build_dir, backend=backend)
result = {"kernels": kernels.__version__, "loaded": kernel.__file__, "ran": False}
device = "cpu" if backend == "cpu" else "cuda"
if device == "cpu" or torch.cuda.is_available():
    torch.manual_seed(0)
    M, N, K = 96, 200, 256
    dtype = kernel.SUPPORTED_DTYPES[0]
    a = torch.randn(K, M, device=device).to(dtype)
    b = torch.randn(K, N, device=device).to(dtype)
    sa = torch.randn(K // 128, M, device=device)
    sb = torch.randn(K // 128, (N + 127) // 128, device=device)
    c = kernel.gemm(a, b, sa, sb)
    ref = kernel.reference.gemm_reference(a, b, sa, sb)
    result["ran"] = True
    # The tolerance this backend is held to (gemm.reference: Hopper's FP8 accumulation needs an allowance).
    allowance = getattr(kernel, "ACCUMULATION_ALLOWANCE", 0.0)
    if allowance:
        terms = kernel.reference.magnitude(a, b, sa, sb)
        close = kernel.reference.within_tolerance(c, ref, allowance, terms)
    else:
        close = kernel.reference.within_tolerance(c, ref)
    result["within_tolerance"] = bool(close.all())
print(json.dumps(result))
"""


def _run_smoke(build_dir: Path, backend: str, loader_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = None if loader_dir is None else loaders.environment(loader_dir)  # that kernels release first
    return subprocess.run(
        [sys.executable, "-c", _SMOKE, str(build_dir), backend], capture_output=True, text=True, cwd=REPO_ROOT, env=env
    )


def smoke_verdict(variant_dir: Path, build_dir: Path, backend: str) -> dict:
    proc = _run_smoke(build_dir, backend)
    if proc.returncode != 0:
        raise CheckError(f"loading the variant through kernels failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if variant_dir.resolve() not in Path(result["loaded"]).resolve().parents:
        raise CheckError(f"kernels loaded {result['loaded']}, not the variant in {variant_dir}")
    if result["ran"] and not result["within_tolerance"]:
        raise CheckError(f"the smoke call through kernels disagrees with the reference: {result}")
    result["ok"] = True
    return result


def loaders_verdict(variant_dir: Path, build_dir: Path, backend: str, minver: str) -> dict:
    """The smoke call under each release of requirements/loaders.txt. The verdict is ok when every
    release >= minver loaded the variant and passed it; older ones are recorded only."""
    verdict: dict = {"minver": minver, "releases": {}, "failures": []}
    for release in loaders.releases():
        required = loaders.must_load(release, minver)
        try:
            proc = _run_smoke(build_dir, backend, loaders.install(release))
        except CheckError as err:  # pip could not install it
            result = {"error": str(err).splitlines()[0]}
        else:
            lines = proc.stdout.strip().splitlines()
            if proc.returncode == 0 and lines:
                result = json.loads(lines[-1])
            else:
                result = {"error": " | ".join(proc.stderr.strip().splitlines()[-3:]) or f"exit {proc.returncode}"}
        if "kernels" in result and result["kernels"] != release:
            result["error"] = f"asked for kernels {release}, the interpreter imported {result['kernels']}"
        loaded = "error" not in result and variant_dir in Path(result["loaded"]).resolve().parents
        ok = loaded and (not result["ran"] or result["within_tolerance"])
        verdict["releases"][release] = {"required": required, "ok": ok} | result
        log(f"    kernels {release}: {'loads it' if ok else 'does not load it'}{'' if required else ' (below minver)'}")
        if required and not ok:
            verdict["failures"].append(f"kernels {release}: {result.get('error') or result}")
    verdict["ok"] = not verdict["failures"]
    return verdict


def _llvm_tool(*names: str) -> str:
    """An LLVM tool from PATH or ROCm's own LLVM (rocm/pytorch images keep it in $ROCM_PATH/llvm/bin)."""
    rocm_llvm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "llvm" / "bin"
    for name in names:
        found = shutil.which(name) or shutil.which(name, path=str(rocm_llvm))
        if found:
            return found
    raise CheckError(f"none of {', '.join(names)} found (needed to read the .so's GPU code objects)")


def gpu_code_objects(so: Path, workdir: Path) -> dict[str, Path]:
    """The device code objects bundled in a HIP shared library, by offload target."""
    fatbin = workdir / f"{so.name}.hip_fatbin"
    objcopy = _llvm_tool("llvm-objcopy", "llvm-objcopy-19", "objcopy")
    proc = subprocess.run([objcopy, f"--dump-section=.hip_fatbin={fatbin}", str(so), str(workdir / "x.so")])
    if proc.returncode != 0 or not fatbin.is_file():
        raise CheckError(f"{so.name} has no .hip_fatbin section: no GPU code to check")
    bundler = _llvm_tool("clang-offload-bundler", "clang-offload-bundler-19")
    listing = subprocess.run(
        [bundler, "--list", "--type=o", f"--input={fatbin}"], capture_output=True, text=True, check=False
    )
    if listing.returncode != 0:
        raise CheckError(f"clang-offload-bundler cannot read {so.name}'s GPU bundle: {listing.stderr.strip()}")
    objects = {}
    for target in listing.stdout.split():
        if not target.startswith("hip"):
            continue  # the host entry
        out = workdir / f"{so.name}.{target.rsplit('-', 1)[-1]}.co"
        subprocess.run(
            [bundler, "--unbundle", "--type=o", f"--input={fatbin}", f"--targets={target}", f"--output={out}"],
            check=True,
        )
        objects[target] = out
    return objects


def machine_code_verdict(variant_dir: Path) -> dict:
    """ROCm variants: every GPU code object of the .so against the gfx942 gate's rules."""
    from . import gfx942_gate

    verdict: dict = {"kernels": [], "violations": []}
    with tempfile.TemporaryDirectory() as tmp:
        for so in sorted(variant_dir.glob("*.so")):
            objects = gpu_code_objects(so, Path(tmp))
            if not objects:
                verdict["violations"].append(f"{so.name}: no GPU code object in its bundle")
            for target, obj in objects.items():
                try:
                    reports = gfx942_gate.inspect_object(obj, f"{so.name}:{target}")
                except gfx942_gate.GateError as err:
                    raise CheckError(str(err)) from None
                if not any(r.is_gemm for r in reports):
                    verdict["violations"].append(f"{so.name} ({target}): no GEMM kernel")
                for r in reports:
                    verdict["kernels"].append(
                        {
                            "target": target,
                            "kernel": r.name,
                            "vgpr": r.vgpr,
                            "agpr": r.agpr,
                            "sgpr": r.sgpr,
                            "lds": r.lds,
                            "scratch": r.scratch,
                            "spills": r.vgpr_spill + r.sgpr_spill,
                            "mfma_fp8": r.mfma_fp8,
                            "waves_per_simd": r.waves_per_simd,
                        }
                    )
                    verdict["violations"] += [f"{r.name} ({target}): {v}" for v in r.violations]
    verdict["ok"] = not verdict["violations"]
    return verdict


def check_variant(
    variant_dir: Path, *, build_dir: Path | None = None, strict: bool = False, with_loaders: bool = False
) -> dict:
    """Run every check, record the verdicts in metadata.json, raise CheckError on a failure.

    Every check this run owns gets a verdict, passed or not: a failed one records its error, and the ones
    after it record that they did not run. So a failure never leaves an earlier run's "ok" in place, and
    the publisher, which wants each required check recorded as ok, refuses the variant. Verdicts this run
    does not own (the GPU tests', or the loader releases' without --loaders) are kept.
    """
    variant_dir = variant_dir.resolve()
    build_dir = (build_dir or variant_dir.parent).resolve()
    meta = read_metadata(variant_dir)
    backend = meta["backend"]["type"]

    def digest() -> dict:
        verify_digest(variant_dir)
        return {"ok": True}

    def abi() -> dict:
        verdict = abi_verdict(variant_dir)
        _report_abi(verdict)
        return verdict

    def machine_code() -> dict:
        verdict = machine_code_verdict(variant_dir)
        for violation in verdict["violations"]:
            log(f"    machine code: {violation}")
        return verdict

    def releases() -> dict:
        if "kernels-minver" not in meta:
            raise CheckError(f"{variant_dir}/metadata.json has no kernels-minver: rebuild it")
        return loaders_verdict(variant_dir, build_dir, backend, meta["kernels-minver"])

    plan = [
        ("digest", "digest", digest),
        ("loader", "loader choice", lambda: loader_verdict(variant_dir, build_dir, backend)),
        ("abi", f"ABI ({MANYLINUX}, abi3 {PYTHON_ABI})", abi),
    ]
    if backend == "rocm":
        plan.append(("machine_code", "GPU machine code of the shipped .so (gfx942 gate rules)", machine_code))
    plan.append(
        (
            "smoke",
            "load through kernels in a fresh interpreter, one call",
            lambda: smoke_verdict(variant_dir, build_dir, backend),
        )
    )
    if with_loaders:
        plan.append(("loaders", f"load with each kernels release of {loaders.LOADERS_FILE.name}", releases))

    checks: dict = {name: {"ok": False, "error": "not run: an earlier check failed"} for name, _, _ in plan}
    try:
        for name, label, run in plan:
            try:
                with step(label):
                    checks[name] = run()
            except Exception as err:  # any failure of this check is its verdict, not "not run"
                what = (str(err).splitlines() or [""])[0][:500]
                if not isinstance(err, CheckError):
                    what = f"{type(err).__name__}: {what}"
                checks[name] = {"ok": False, "error": what}
                raise
    finally:
        meta["checks"] = {**meta.get("checks", {}), **checks}
        (variant_dir / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    if not checks.get("loaders", {"ok": True})["ok"]:
        failures = "\n".join(checks["loaders"]["failures"])
        minver = checks["loaders"]["minver"]
        raise CheckError(f"{variant_dir.name} must load with every kernels release >= {minver}:\n{failures}")
    if not checks.get("machine_code", {"ok": True})["ok"]:
        raise CheckError(f"{variant_dir.name}: its GPU machine code breaks the gfx942 gate's rules (see above)")
    if strict and not checks["abi"]["ok"]:
        raise CheckError(f"{variant_dir.name} violates {MANYLINUX} / abi3 {PYTHON_ABI} (see metadata.json)")
    return checks


def _report_abi(verdict: dict) -> None:
    if verdict["ok"]:
        log(f"    ABI: OK ({MANYLINUX}, abi3 {PYTHON_ABI})")
        return
    for name, found in verdict["files"].items():
        for v in found["manylinux_violations"] + found["python_abi_violations"]:
            log(f"    ABI: {name}: {v}")
    log(f"    ABI: NOT {MANYLINUX}-compliant; the Hub would reject this build (publishing refuses it)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variant_dir", type=Path)
    parser.add_argument("--build-dir", type=Path, help="directory the loader chooses from (default: the parent)")
    parser.add_argument("--strict", action="store_true", help="fail on ABI violations too")
    parser.add_argument(
        "--loaders", action="store_true", help="also load it with each kernels release of requirements/loaders.txt"
    )
    args = parser.parse_args()
    if not (args.variant_dir / "metadata.json").is_file():
        raise CheckError(f"{args.variant_dir} is not a variant directory (no metadata.json)")
    checks = check_variant(args.variant_dir, build_dir=args.build_dir, strict=args.strict, with_loaders=args.loaders)
    print(json.dumps(checks, indent=2))
    return 0


if __name__ == "__main__":
    main_wrapper(main)
