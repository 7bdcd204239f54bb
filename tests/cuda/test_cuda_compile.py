"""The CUDA backend compiles for Hopper (sm_90a) with this machine's nvcc: no GPU needed.

Every gemm/cuda/*.cu is compiled with `nvcc -c` for sm_90a, the torch headers of the installed torch
(a CPU wheel ships the ATen/c10 CUDA headers except the generated c10/cuda/impl/cuda_cmake_macros.h,
which is stubbed here when missing) and the CUTLASS headers of the nvidia-cutlass package, in parallel
over the machine's cores. ptxas' resource report then shows that the GEMM kernels were compiled with
their sm_90a mainloop (a plain sm_90 pass would leave CUTLASS's arch-guarded kernels empty, a few
registers) and that nothing spills. On a machine without nvcc or nvidia-cutlass the module skips with
the reason, except under CI, where a missing tool fails.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "gemm" / "cuda"
SOURCES = sorted(CUDA_DIR.glob("*.cu"))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(what: str):
    if IN_CI:
        pytest.fail(f"{what} (CI must compile the CUDA backend)")
    pytest.skip(what)


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if cand and (Path(cand) / "bin" / "nvcc").exists():
            return str(Path(cand) / "bin" / "nvcc")
    return None


def cutlass_include_dirs() -> list[Path] | None:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(list(spec.submodule_search_locations)[0]) / "source"
    dirs = [base / "include", base / "tools" / "util" / "include"]
    return dirs if all(d.is_dir() for d in dirs) else None


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cuda_compile")


@pytest.fixture(scope="module")
def nvcc_command(build_dir):
    """(src, name, extra flags) -> the nvcc command that compiles src to build_dir/name.o, keeping its
    intermediate files (the PTX among them) in build_dir/name/."""
    nvcc = _nvcc()
    if nvcc is None:
        _missing("nvcc is not installed")
    cutlass = cutlass_include_dirs()
    if cutlass is None:
        _missing("the nvidia-cutlass package (cutlass_library/source/include) is not installed")
    from torch.utils.cpp_extension import include_paths

    torch_inc = [Path(p) for p in include_paths()]
    if not any((p / "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in torch_inc):
        stub = build_dir / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        torch_inc.append(build_dir / "stub")
    flags = [
        "-std=c++20",
        "-O3",
        "-DNDEBUG",
        "-DCUDA_KERNEL",
        "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-Xcompiler",
        "-fPIC",
        "-Xptxas",
        "-v",
    ]
    incs = [f"-I{d}" for d in [*cutlass, *torch_inc, CUDA_DIR, ROOT / "torch-ext"]]

    def command(src: Path, name: str, extra: tuple[str, ...] = ()) -> list[str]:
        keep = build_dir / name
        keep.mkdir()
        out = build_dir / f"{name}.o"
        return [nvcc, "-c", str(src), "-o", str(out), "--keep", f"--keep-dir={keep}", *flags, *extra, *incs]

    return command


@pytest.fixture(scope="module")
def compiled(nvcc_command) -> dict[str, tuple[int, str]]:
    def build(src: Path) -> tuple[int, str]:
        proc = subprocess.run(nvcc_command(src, src.stem), capture_output=True, text=True, timeout=1500)
        return proc.returncode, proc.stdout + proc.stderr

    workers = max(1, min(len(SOURCES), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip((s.name for s in SOURCES), pool.map(build, SOURCES), strict=True))


@pytest.fixture(scope="module")
def ptx(compiled, build_dir) -> dict[str, str]:
    """The PTX nvcc kept for each source (after `compiled` built them all)."""
    return {s.name: "\n".join(f.read_text() for f in sorted((build_dir / s.stem).glob("*.ptx"))) for s in SOURCES}


def test_sources_exist():
    assert (CUDA_DIR / "gemm_cuda.cu").exists()
    assert any(s.name.startswith("gemm_cuda_cfg") for s in SOURCES)


def test_build_toml_lists_every_cuda_source():
    manifest = tomllib.loads((ROOT / "build.toml").read_text())
    listed = set(manifest["kernel"]["gemm_cuda"]["src"])
    on_disk = {str(p.relative_to(ROOT)) for p in CUDA_DIR.iterdir() if p.suffix in (".cu", ".cuh", ".h")}
    assert on_disk <= listed, f"build.toml [kernel.gemm_cuda].src misses {sorted(on_disk - listed)}"


@pytest.mark.parametrize("source", [s.name for s in SOURCES])
def test_compiles_for_sm90a(compiled, source):
    rc, log = compiled[source]
    assert rc == 0, f"nvcc failed on {source}:\n{log[-4000:]}"


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_USED = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _kernels(log: str) -> list[dict]:
    """ptxas -v blocks: entry name, arch, registers, spill bytes."""
    out: list[dict] = []
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            out.append({"name": m.group(1), "arch": m.group(2), "regs": None, "spill": 0})
        elif out and (m := _USED.search(line)):
            out[-1]["regs"] = int(m.group(1))
        elif out and (m := _SPILL.search(line)):
            out[-1]["spill"] += int(m.group(1)) + int(m.group(2))
    return out


@pytest.mark.parametrize("source", [s.name for s in SOURCES if s.name.startswith("gemm_cuda_cfg")])
def test_gemm_kernel_has_its_sm90a_mainloop_and_no_spills(compiled, source):
    rc, log = compiled[source]
    assert rc == 0, f"nvcc failed on {source}"
    gemms = [k for k in _kernels(log) if "GemmUniversal" in k["name"]]
    assert gemms, f"{source}: no CUTLASS GEMM kernel in ptxas' report"
    for k in gemms:
        assert k["arch"] == "sm_90a", k
        # the warp-specialized wgmma mainloop needs well over 100 registers per thread; an arch-guarded
        # empty kernel (compiled without sm_90a features) needs a handful
        assert k["regs"] is not None and k["regs"] >= 128, f"{source}: {k}"
        assert k["spill"] == 0, f"{source}: register spills {k}"


# The instantiations of gemm_cuda_wgmma.cu's wgmma_gemm_kernel<BN, consumers, two accumulators, seed A>:
# 128x128, 128x192, 192x128, 192x144 and 128x96 (two accumulators) tiles, the first three also reading the
# seed layout's a as it is (GemmArgs::seed_a).
_WGMMA_INSTANCES = {
    (128, 2, 0, 0),
    (192, 2, 0, 0),
    (128, 3, 0, 0),
    (144, 3, 0, 0),
    (96, 2, 1, 0),
    (128, 2, 0, 1),
    (192, 2, 0, 1),
    (128, 3, 0, 1),
}
_WGMMA_NAME = re.compile(r"wgmma_gemm_kernelILi(\d+)ELi(\d)ELb([01])ELb([01])E")


def _wgmma_instance(name: str) -> tuple[int, int, int, int]:
    m = _WGMMA_NAME.search(name)
    assert m, name[:120]
    return tuple(int(g) for g in m.groups())


def test_hand_written_wgmma_kernels_keep_their_registers(compiled):
    """Every instantiation of gemm_cuda_wgmma.cu: sm_90a code, launched with the whole register file for one
    CTA per SM (so that setmaxnreg can move the producer's registers to the consumers): 168 per thread for
    2 consumer warpgroups (384 threads), 128 for 3 (512 threads); no spills (the 192x144 form's consumers
    use 157 of their 160, the 128x96 form's with two batch accumulators fit too, and so do the forms that read
    the seed's a, with 16 fragment registers more)."""
    rc, log = compiled["gemm_cuda_wgmma.cu"]
    assert rc == 0, f"nvcc failed on gemm_cuda_wgmma.cu:\n{log[-4000:]}"
    ks = [k for k in _kernels(log) if "wgmma_gemm_kernel" in k["name"]]
    assert sorted(_wgmma_instance(k["name"]) for k in ks) == sorted(_WGMMA_INSTANCES), ks
    for k in ks:
        consumers = _wgmma_instance(k["name"])[1]
        assert k["arch"] == "sm_90a" and k["regs"] == {2: 168, 3: 128}[consumers] and k["spill"] == 0, k


def test_seed_a_instances_build_their_fragments_from_the_raw_boxes(compiled, ptx):
    """wgmma_gemm_kernel<.., seed A = true>: A from registers (a brace list where the shared-memory form has
    a descriptor), filled by transposing ldmatrix from the raw box, and the a_scale copies in 4-byte
    cp.async (racecheck reported 16-byte ones: runs 121-122); the other instantiations keep both operands in
    shared memory and never transpose."""
    rc, _ = compiled["gemm_cuda_wgmma.cu"]
    assert rc == 0
    bodies = {n: b for n, b in _entries(ptx["gemm_cuda_wgmma.cu"]).items() if "wgmma_gemm_kernel" in n}
    assert {_wgmma_instance(n) for n in bodies} == _WGMMA_INSTANCES
    for name, body in bodies.items():
        bn, _, _, seed_a = _wgmma_instance(name)
        mma = rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k32\.f32\.e4m3\.e4m3"
        register_a = re.search(mma + r"[^;]*\},\s*\{%r\d+", body)
        assert bool(register_a) == bool(seed_a), name[:90]
        assert ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body) == bool(seed_a), name[:90]
        copies = re.findall(r"cp\.async\.(c[ag])\.shared\.global\s+\[[^\]]+\],\s*\[[^\]]+\],\s*(\d+)", body)
        assert copies and set(copies) == {("ca", "4")}, (name[:90], copies)


def test_hand_written_wgmma_batches_stay_asynchronous(compiled):
    """ptxas makes every wgmma wait for the one before it (warning C7514) when it cannot prove that the
    registers read while a batch is in flight belong to a retired batch. Run 22's overlapped 128x192
    kernel (two 96-column groups per K block, commit 52a61f7) was serialized so and ran 1.5x slower than
    the plain one."""
    rc, log = compiled["gemm_cuda_wgmma.cu"]
    assert rc == 0
    assert "C7514" not in log, [line for line in log.splitlines() if "C7514" in line]


def test_hand_written_wgmma_register_handoff_fits_the_cta(compiled, ptx):
    """setmaxnreg moves registers only within the CTA's own allocation (ptxas's count per thread times the
    block's threads), not the SM's 65536: consumers whose `setmaxnreg.inc` asks for more than the producer's
    `.dec` gave back wait forever. Run 50 hung so (producer 48, consumers 232, two consumer warpgroups:
    128 x (48 + 2 x 232) = 65536 > 168 x 384)."""
    rc, log = compiled["gemm_cuda_wgmma.cu"]
    assert rc == 0
    regs = {k["name"]: k["regs"] for k in _kernels(log) if "wgmma_gemm_kernel" in k["name"]}
    bodies = {n: b for n, b in _entries(ptx["gemm_cuda_wgmma.cu"]).items() if "wgmma_gemm_kernel" in n}
    assert len(regs) == len(_WGMMA_INSTANCES) and bodies.keys() == regs.keys(), (sorted(regs), sorted(bodies))
    for name, body in bodies.items():
        consumers = int(re.search(r"ILi\d+ELi(\d)E", name).group(1))
        dec, inc = _register_handoff(body)
        threads = 128 * (1 + consumers)
        assert 128 * (dec + consumers * inc) <= regs[name] * threads, (name[:90], dec, inc, regs[name])


def test_fused_seed_kernel_transposes_with_ldmatrix_and_fits_its_registers(compiled, ptx):
    """gemm_cuda_wgmma.cu's seed_fused_kernel: sm_90a code, 168 registers a thread (one CTA of 384 per SM), no
    spills, a register handoff within the CTA's allocation, and its two transposes as designed: A's
    fragments from `ldmatrix .trans` into wgmma's register operand, B's K-major tile by `stmatrix`, each
    followed by the proxy fence before wgmma reads it."""
    rc, log = compiled["gemm_cuda_wgmma.cu"]
    assert rc == 0
    (k,) = [k for k in _kernels(log) if "seed_fused_kernel" in k["name"]]
    (body,) = [b for n, b in _entries(ptx["gemm_cuda_wgmma.cu"]).items() if "seed_fused_kernel" in n]
    _assert_one_cta_per_sm(k, body)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in body
    # the transposing warps' last store, then the proxy fence, then their arrival on the stage's barrier
    after = body[body.rindex("stmatrix.sync.aligned") :]
    fence, arrive = after.find("fence.proxy.async.shared::cta"), after.find("mbarrier.arrive")
    assert 0 < fence < arrive, "no proxy fence between the transposed tile's stores and the arrival"
    # wgmma with A in registers: a brace list of 4 registers where the shared-memory form has a descriptor
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.f32\.e4m3\.e4m3[^;]*\},\s*\{%r\d+", body)
    # its scale copies in the natural kernels' form, 4 bytes each: racecheck reported 16-byte cp.async.cg
    # ones unordered with the consumers' reads (runs 121-122)
    copies = re.findall(r"cp\.async\.(c[ag])\.shared\.global\s+\[[^\]]+\],\s*\[[^\]]+\],\s*(\d+)", body)
    assert copies and set(copies) == {("ca", "4")}, copies


_COPIES_PTX = ("st.shared::cluster", "mapa.shared::cluster")
_CLUSTER_PTX = ("barrier.cluster", "%cluster_ctarank", ".reqnctapercluster", ".explicitcluster")


def test_fused_seed_kernel_has_no_cluster_code(ptx):
    """The shipped build's fused seed kernel is no cluster kernel and never touches another CTA's shared
    memory: that is only the timing diagnostic's (GEMM_SEED_DSMEM_EXPERIMENT, below)."""
    text = ptx["gemm_cuda_wgmma.cu"]
    # an entry's text from _entries runs from its parameters through its directives to its body's end
    (body,) = [b for n, b in _entries(text).items() if "seed_fused_kernel" in n]
    assert not [op for op in _COPIES_PTX + _CLUSTER_PTX if op in body]
    assert "seed_fused_share_kernel" not in text


def test_seed_dsmem_diagnostic_compiles(nvcc_command, build_dir):
    """The timing-only diagnostic of the fused seed kernel (gemm_cuda_wgmma.cu, seed_fused_body<kShare>),
    built as the experiment builds it: clusters of 2 and 4, sm_90a, no spills, a register handoff within
    the CTA's allocation, and the transposed pieces stored into the other CTAs' shared memory."""
    src = CUDA_DIR / "gemm_cuda_wgmma.cu"
    cmd = nvcc_command(src, "wgmma_dsmem", ("-DGEMM_SEED_DSMEM_EXPERIMENT",))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    ks = {k["name"]: k for k in _kernels(log) if "seed_fused_share_kernel" in k["name"]}
    tags = ("ILi2ELb1E", "ILi4ELb1E", "ILi2ELb0E", "ILi4ELb0E")  # <cluster size, copies between CTAs>
    assert sorted(tag for name in ks for tag in tags if tag in name) == sorted(tags), ks
    text = "\n".join(f.read_text() for f in sorted((build_dir / "wgmma_dsmem").glob("*.ptx")))
    bodies = {n: b for n, b in _entries(text).items() if "seed_fused_share_kernel" in n}
    assert bodies.keys() == ks.keys()
    for name, body in bodies.items():
        _assert_one_cta_per_sm(ks[name], body)
        size = int(re.search(r"ILi(\d)E", name).group(1))
        # the cluster size the launch relies on, among the entry's directives
        assert re.search(rf"\.reqnctapercluster\s+{size}\s*,\s*1\s*,\s*1", body), name[:90]
        assert "barrier.cluster" in body and "%cluster_ctarank" in body, name[:90]
        copies = "Lb1E" in name
        assert all((op in body) == copies for op in _COPIES_PTX), name[:90]


@pytest.fixture(scope="module")
def seed_a_experiment(nvcc_command, build_dir) -> tuple[str, str]:
    """gemm_cuda_wgmma.cu built as the seed-A experiment builds it (-DGEMM_SEED_A_EXPERIMENT): ptxas' report
    and the PTX."""
    src = CUDA_DIR / "gemm_cuda_wgmma.cu"
    proc = subprocess.run(
        nvcc_command(src, "wgmma_seed_a", ("-DGEMM_SEED_A_EXPERIMENT",)), capture_output=True, text=True, timeout=1500
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    return log, "\n".join(f.read_text() for f in sorted((build_dir / "wgmma_seed_a").glob("*.ptx")))


_PROBE_NAME = re.compile(r"wgmma_seed_probe_kernelILi(\d+)ELi(\d)ELi(\d)E")


def test_seed_a_probes_only_in_the_experiment_build(ptx):
    """The seed-A kernel's timing-only probes (SeedProbe, wrong results by design) and its staged form (not
    yet measured) are compiled only with GEMM_SEED_A_EXPERIMENT: the shipped build has neither."""
    assert "wgmma_seed_probe_kernel" not in ptx["gemm_cuda_wgmma.cu"]
    assert "wgmma_seed_staged_kernel" not in ptx["gemm_cuda_wgmma.cu"]


def test_seed_a_probes_compile_and_leave_out_what_they_say(seed_a_experiment):
    """The probes as the experiment builds them (gemm_cuda_wgmma.cu, SeedProbe): for each configuration that
    reads a as it is (128x128, 128x192, 192x128), probe 2 keeps the register-A wgmma without the per-block
    transposing loads, probe 3 keeps the loads and their prmt but gives wgmma A from shared memory, probe 4
    has neither, probe 5 writes the fragments back K-major (stmatrix, proxy fence, warpgroup barrier) for an
    SS wgmma; each with the shipped kernel's registers, no spills, and a handoff within the CTA."""
    log, text = seed_a_experiment
    assert "C7514" not in log
    ks = {k["name"]: k for k in _kernels(log) if "wgmma_seed_probe_kernel" in k["name"]}
    shapes = {(bn, c) for bn, c, _, seed_a in _WGMMA_INSTANCES if seed_a}
    want = {(bn, c, probe) for bn, c in shapes for probe in (2, 3, 4, 5)}
    got = {tuple(int(g) for g in _PROBE_NAME.search(n).groups()) for n in ks}
    assert got == want, sorted(got)
    bodies = {n: b for n, b in _entries(text).items() if "wgmma_seed_probe_kernel" in n}
    assert bodies.keys() == ks.keys()
    for name, body in bodies.items():
        bn, consumers, probe = (int(g) for g in _PROBE_NAME.search(name).groups())
        _assert_one_cta_per_sm(ks[name], body, consumers)
        mma = rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k32\.f32\.e4m3\.e4m3"
        assert re.search(mma, body), name[:90]
        register_a = bool(re.search(mma + r"[^;]*\},\s*\{%r\d+", body))
        loads = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
        want_a_loads = {2: (True, False), 3: (False, True), 4: (False, False), 5: (False, True)}[probe]
        assert (register_a, loads) == want_a_loads, name[:90]
        staged = "stmatrix.sync.aligned.m8n8.x4.shared.b16" in body
        assert staged == (probe == 5), name[:90]
        if staged:  # written back, then made visible to wgmma's proxy, then the warpgroup meets, then wgmma
            after = body[body.index("stmatrix.sync.aligned") :]
            fence, sync = after.find("fence.proxy.async.shared::cta"), after.find("bar.sync")
            assert 0 < fence < sync < after.find("wgmma.mma_async"), name[:90]
        if probe == 3:  # the fragments are built (4 prmt per ldmatrix) and go somewhere: ptxas drops loads
            # whose results nothing reads (an empty asm "fence" on them vanishes before ptxas), so the probe
            # folds them into a value it stores where M < 0
            assert body.count("prmt.b32") >= 4 * body.count("ldmatrix.sync.aligned.m8n8.x4.trans"), name[:90]
            assert body.count("xor.b32") >= 16, name[:90]


def test_seed_a_staged_form_writes_its_tile_between_two_barriers(seed_a_experiment):
    """The staged form (wgmma_seed_staged_kernel, experiment builds): 128x128 and 128x192 tiles, the shipped
    kernels' 168 registers, no spills. Per K block each warp builds its fragments (transposing ldmatrix),
    meets its warpgroup (every warp's previous batch, the tile's last reader, has completed), writes them
    K-major (stmatrix), fences them into the async proxy, meets again (every row written), and only then
    issues wgmma, with A from shared memory."""
    log, text = seed_a_experiment
    ks = {k["name"]: k for k in _kernels(log) if "wgmma_seed_staged_kernel" in k["name"]}
    tiles = sorted(int(re.search(r"staged_kernelILi(\d+)ELi2E", n).group(1)) for n in ks)
    assert tiles == [128, 192], sorted(ks)
    bodies = {n: b for n, b in _entries(text).items() if "wgmma_seed_staged_kernel" in n}
    assert bodies.keys() == ks.keys()
    for name, body in bodies.items():
        _assert_one_cta_per_sm(ks[name], body)
        bn = int(re.search(r"staged_kernelILi(\d+)E", name).group(1))
        mma = rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k32\.f32\.e4m3\.e4m3"
        assert re.search(mma, body) and not re.search(mma + r"[^;]*\},\s*\{%r\d+", body), name[:90]
        # each K block's sequence (the body holds it twice: a unit's first block and the others)
        steps = ("ldmatrix.sync.aligned.m8n8.x4.trans", "bar.sync", "stmatrix.sync.aligned.m8n8.x4.shared.b16")
        steps += ("fence.proxy.async.shared::cta", "bar.sync", "wgmma.mma_async")
        pos = body.index(steps[0])
        for step in steps[1:]:
            nxt = body.find(step, pos + 1)
            assert nxt > pos, (name[:90], step)
            pos = nxt
        # the four stmatrix of a block all come after the first barrier and before the fence
        block = body[body.index(steps[0]) : pos]
        first_sync, fence = block.index("bar.sync"), block.index("fence.proxy.async")
        assert block.count("stmatrix.sync") == 4 == block[first_sync:fence].count("stmatrix.sync"), name[:90]


def test_quantizer_is_one_kernel_per_input_type_without_spills(compiled, ptx):
    """quantize_activations' kernel (gemm_cuda_quant.cu): one instantiation per input type (bf16, fp16, fp32),
    sm_90a, no spills; its experiment forms (several blocks per half-warp, GEMM_QUANT_ROUNDS_EXPERIMENT) are
    not in the shipped build."""
    rc, log = compiled["gemm_cuda_quant.cu"]
    assert rc == 0, log[-4000:]
    ks = [k for k in _kernels(log) if "quantize_rows" in k["name"]]
    assert len(ks) == 3 and all("quantize_rows_kernel" in k["name"] for k in ks), [k["name"][:90] for k in ks]
    assert all(k["arch"] == "sm_90a" and k["spill"] == 0 for k in ks), ks
    assert "quantize_rows_rounds_kernel" not in ptx["gemm_cuda_quant.cu"]


def test_quantizer_experiment_loads_every_round_before_it_converts(nvcc_command, build_dir):
    """The experiment forms (quantize_rows_rounds_kernel<T, 2 or 4>, tests/cuda/quant_sweep.py): no spills, and
    each lane's loads for all its rounds come before its first conversion to FP8, which is what puts more
    bytes in flight than the shipped kernel's one load."""
    src = CUDA_DIR / "gemm_cuda_quant.cu"
    proc = subprocess.run(
        nvcc_command(src, "quant_rounds", ("-DGEMM_QUANT_ROUNDS_EXPERIMENT",)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    ks = {k["name"]: k for k in _kernels(log) if "quantize_rows_rounds_kernel" in k["name"]}
    rounds = sorted(int(re.search(r"rounds_kernelI\w+?Li(\d)EE", n).group(1)) for n in ks)
    assert rounds == [2, 2, 2, 4, 4, 4], sorted(ks)
    assert all(k["arch"] == "sm_90a" and k["spill"] == 0 for k in ks.values()), ks
    text = "\n".join(f.read_text() for f in sorted((build_dir / "quant_rounds").glob("*.ptx")))
    bodies = {n: b for n, b in _entries(text).items() if "quantize_rows_rounds_kernel" in n}
    assert bodies.keys() == ks.keys()
    for name, body in bodies.items():
        n = int(re.search(r"Li(\d)EE", name).group(1))
        wide = 2 if "IfLi" in name else 1  # fp32 takes two 16-byte loads for 8 values
        first_cvt = body.index("cvt.rn.satfinite.e4m3x2.f32")
        loads = re.findall(r"ld\.global\.nc\.v4", body[:first_cvt])
        assert len(loads) == n * wide, (name[:90], len(loads))


def test_decode_kernels_compile_for_each_row_count(compiled):
    """gemm_cuda_decode.cu: one instantiation per padded row count (wgmma N of 8, 16, 32, 64), sm_90a code with
    its wgmma loop (a guarded-out body would need a handful of registers), registers for two CTAs of 160
    threads per SM, no spills."""
    rc, log = compiled["gemm_cuda_decode.cu"]
    assert rc == 0, f"nvcc failed on gemm_cuda_decode.cu:\n{log[-4000:]}"
    ks = [k for k in _kernels(log) if "decode_gemm_kernel" in k["name"]]
    assert sorted(tag for k in ks for tag in ("ILi8E", "ILi16E", "ILi32E", "ILi64E") if tag in k["name"]) == sorted(
        ("ILi8E", "ILi16E", "ILi32E", "ILi64E")
    ), ks
    for k in ks:
        assert k["arch"] == "sm_90a" and k["regs"] is not None and 24 <= k["regs"] <= 204 and k["spill"] == 0, k
    assert "C7514" not in log


def test_seed_transpose_kernels_do_not_spill(compiled):
    rc, log = compiled["gemm_cuda_prep.cu"]
    assert rc == 0
    ks = _kernels(log)
    assert {"seed_prep_kernel", "transpose_bytes_kernel"} <= {
        name for k in ks for name in ("seed_prep_kernel", "transpose_bytes_kernel") if name in k["name"]
    }
    assert all(k["spill"] == 0 for k in ks), ks


def _assert_one_cta_per_sm(k: dict, body: str, consumers: int = 2) -> None:
    """A warp-specialized kernel of 1 + `consumers` warpgroups (ptxas' report `k`, PTX `body`): sm_90a, the
    registers that keep one CTA per SM (168 a thread for 384 threads, 128 for 512), no spills, and a
    setmaxnreg handoff within the CTA's own allocation (run 50 hung where it was not)."""
    regs = {2: 168, 3: 128}[consumers]
    assert k["arch"] == "sm_90a" and k["regs"] == regs and k["spill"] == 0, k
    dec, inc = _register_handoff(body)
    assert 128 * (dec + consumers * inc) <= regs * 128 * (1 + consumers), (k["name"][:90], dec, inc)


def _register_handoff(body: str) -> tuple[int, int]:
    """A warp-specialized kernel's PTX body -> its one setmaxnreg.dec and one setmaxnreg.inc count."""
    (dec,) = map(int, re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+(\d+)", body))
    (inc,) = map(int, re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+(\d+)", body))
    return dec, inc


_GLOBAL_ACCESS = ("ld.global", "cp.async", "prefetch.tensormap")


def _entries(ptx_text: str) -> dict[str, str]:
    """PTX kernel name -> its body (up to the next .entry)."""
    starts = [(m.group(1), m.end()) for m in re.finditer(r"\.entry\s+(\S+)\(", ptx_text)]
    ends = [pos for _, pos in starts[1:]] + [len(ptx_text)]
    return {name: ptx_text[pos:end] for (name, pos), end in zip(starts, ends, strict=True)}


def test_seed_gemm_launches_early_but_reads_after_the_preparation(ptx):
    """The seed layout's GEMM is launched as a programmatic dependent of the preparation (GemmArgs::pdl):
    every kernel the GEMM launches waits (griddepcontrol.wait) before its first global-memory access, in
    the entry block, so in every thread; otherwise it reads unwritten scratch. Run 27 did, through
    CUTLASS 4.2's own hooks: its scale-loading warp does not wait (hence gemm_cuda_gemm.cuh's
    kernel_after_previous_grid)."""
    clustered = {"gemm_cuda_cfg3.cu", "gemm_cuda_cfg4.cu"}  # 2-CTA clusters: CUTLASS's launch, never dependent
    cfgs = [s.name for s in SOURCES if s.name.startswith("gemm_cuda_cfg")]
    for source in clustered:
        assert "kernel_after_previous_grid" not in ptx[source], source
    launched = {name: "kernel_after_previous_grid" for name in cfgs if name not in clustered}
    launched["gemm_cuda_wgmma.cu"] = "wgmma_gemm_kernel"
    launched["gemm_cuda_decode.cu"] = "decode_gemm_kernel"
    for source, marker in launched.items():
        kernels = {n: b for n, b in _entries(ptx[source]).items() if marker in n}
        assert kernels, f"{source}: no {marker} kernel in the kept PTX"
        for name, body in kernels.items():
            wait = body.find("griddepcontrol.wait")
            first = min((i for i in (body.find(op) for op in _GLOBAL_ACCESS) if i >= 0), default=len(body))
            assert 0 <= wait < first, f"{source}: {name[:80]} reads global memory before griddepcontrol.wait"
