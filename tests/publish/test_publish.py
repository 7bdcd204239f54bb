"""The publisher against a loopback Hub stand-in, through the real huggingface_hub client."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts import publish
from tests.publish.conftest import CPU, CUDA, READ_TOKEN, REPO, ROCM, WRITE_TOKEN, writes

pytestmark = pytest.mark.filterwarnings("ignore:Use .content=.:DeprecationWarning")  # inside huggingface_hub

REPO_ROOT = Path(__file__).resolve().parents[2]


def edit_metadata(variant_dir: Path, change) -> None:
    """change(meta) edits the variant's metadata.json in place (after `project.variant` laid it out)."""
    meta = json.loads((variant_dir / "metadata.json").read_text())
    change(meta)
    (variant_dir / "metadata.json").write_text(json.dumps(meta, indent=2))


def published_metadata(hub, name: str = CPU) -> dict:
    return json.loads(hub.files(REPO, "v1")[f"build/{name}/metadata.json"])


def branch_files(hub, rev="v1", prefix="build/"):
    return {p: d for p, d in hub.files(REPO, rev).items() if p.startswith(prefix)}


def test_first_publish(hub, project, run_publish):
    project.variant(CPU)
    project.variant(ROCM, ops="_gemm_rocm_abc1234")
    results = project.root / "benchmarks" / "results" / "mi300x"
    results.mkdir(parents=True)
    record = {
        "m": 1024,
        "n": 1536,
        "k": 7168,
        "layout": "seed",
        "us": 26.4,
        "us_min": 26.0,
        "us_max": 27.1,
        "reps": 50,
        "tflops": 812.5,
        "pct_sol": 31.2,
        "max_abs_err": 0.0,
        "rel_err": 0.0,
    }
    (results / f"{ROCM}.json").write_text(
        json.dumps(
            {
                "schema": "gemm-bench/1",
                "platform": "MI300X",
                "variant": ROCM,
                "date": "2026-12-02",
                "env": {},
                "config": {},
                "sol": None,
                "impls": {"gemm": {}, "torch": {}},
                "refused": [],
                "records": [
                    {**record, "impl": "gemm", "ratio_vs_torch": 3.75},
                    {**record, "impl": "torch", "us": 99.0, "tflops": 216.7},
                ],
            }
        )
    )

    rc, out = run_publish()
    assert rc == 0, out

    expected = {**project.local_files(CPU), **project.local_files(ROCM)}
    assert branch_files(hub) == expected
    files = hub.files(REPO, "v1")
    assert files["benchmarks/benchmark_gemm.py"] == (project.root / "benchmarks/benchmark_gemm.py").read_bytes()
    assert "benchmarks/run.py" not in files
    # one release commit on top of main's history; no side branch left behind
    assert set(hub.branches(REPO)) == {"main", "v1"}
    titles = hub.commit_titles(REPO, "v1")
    assert len(titles) == 2 and titles[0].startswith("Publish gemm v1")
    # the binaries went through the large-file path before the commit
    so_bytes = sum(len(d) for p, d in expected.items() if p.endswith(".so"))
    assert hub.lfs_bytes_uploaded == so_bytes
    # the kernel card on main
    card = hub.files(REPO, "main")["README.md"].decode()
    assert f'get_kernel("{REPO}", version=1)' in card and "gemm_natural(" in card
    assert f"`{CPU}`" in card and f"`{ROCM}`" in card and "gfx942" in card
    assert f"### mi300x (`{ROCM}`)" in card
    assert "| M x N x K | layout | time (us) | TFLOP/s | speedup vs torch |" in card
    assert "| 1024x1536x7168 | seed | 26.4 | 812.5 | 3.75 |" in card
    assert "216.7" not in card  # peers appear as ratios, not rows
    assert "README.md" not in hub.files(REPO, "v1") or hub.files(REPO, "v1")["README.md"] != card.encode()


def test_republish_makes_no_commit_and_uploads_nothing(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    heads, n_requests = hub.branches(REPO), len(hub.requests)
    before = writes(hub)

    rc, out = run_publish()
    assert rc == 0, out
    assert "Nothing to publish" in out and f"{CPU}: skip" in out
    assert hub.branches(REPO) == heads
    assert writes(hub) == before  # no create, branch, preupload, LFS or commit request
    assert len(hub.requests) > n_requests  # it did look at the Hub


def test_rebuild_from_a_new_commit_is_not_published_again(hub, project, run_publish):
    """The same files built again elsewhere: only provenance, build and checks differ in metadata.json."""
    d = project.variant(CPU)
    assert run_publish()[0] == 0
    heads = hub.branches(REPO)

    def rebuilt(meta):
        meta["provenance"]["kernel"]["commit"] = "f" * 40
        meta["build"]["host"] = "another-runner"
        meta["checks"]["smoke"] = {"ok": True, "loaded": "/elsewhere/__init__.py"}

    edit_metadata(d, rebuilt)
    rc, out = run_publish()
    assert rc == 0 and f"{CPU}: skip (files and metadata match the branch (rebuilt)" in out, out
    assert hub.branches(REPO) == heads


def test_clean_rebuild_of_a_dirty_release_is_published(hub, project, run_publish):
    """The same files, but the branch's metadata says they were built from a dirty tree (a forced release):
    the loader warns about that on every load, so the clean build's metadata.json replaces it."""
    d = project.variant(CPU, dirty=True)
    assert run_publish("--force", "--reason", "hotfix from a dirty tree")[0] == 0
    edit_metadata(d, lambda meta: meta["provenance"]["kernel"].update(dirty=False))
    rc, out = run_publish()
    assert rc == 0, out
    assert published_metadata(hub)["provenance"]["kernel"]["dirty"] is False


def test_metadata_only_fix_is_published(hub, project, run_publish):
    """Reproducible builds give the same files and digest: a fix to what the loader reads from
    metadata.json (here kernels-minver) must still reach the branch."""
    d = project.variant(CPU)
    assert run_publish()[0] == 0
    edit_metadata(d, lambda meta: meta.update({"kernels-minver": "0.19.0"}))
    rc, out = run_publish()
    assert rc == 0, out
    assert published_metadata(hub)["kernels-minver"] == "0.19.0"
    assert branch_files(hub) == project.local_files(CPU)


def test_a_file_damaged_on_the_hub_is_published_again(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    so = f"build/{CPU}/_gemm_cpu_abc1234.abi3.so"
    hub.commit_direct(REPO, "v1", {so: b"\x7fELF truncated"}, title="someone else's upload")
    rc, out = run_publish()
    assert rc == 0, out
    assert f"+ {so}" in out or so in out
    assert branch_files(hub) == project.local_files(CPU)


def test_rebuilt_variant_deletes_stale_file_keeps_other_variants(hub, project, run_publish):
    project.variant(CPU, extra_files={"layers/old_layer.py": b"OLD = 1\n"})
    project.variant(ROCM, ops="_gemm_rocm_abc1234")
    assert run_publish()[0] == 0
    rocm_before = branch_files(hub, prefix=f"build/{ROCM}/")
    old_head = hub.head(REPO, "v1")

    # Rebuild only the CPU variant: new ops namespace (new .so name), the extra layer file is gone.
    import shutil

    shutil.rmtree(project.build / ROCM)
    project.variant(CPU, ops="_gemm_cpu_def5678")
    rc, out = run_publish()
    assert rc == 0, out

    cpu_now = branch_files(hub, prefix=f"build/{CPU}/")
    assert cpu_now == project.local_files(CPU)
    assert f"build/{CPU}/_gemm_cpu_abc1234.abi3.so" not in cpu_now
    assert f"build/{CPU}/layers/old_layer.py" not in cpu_now
    assert branch_files(hub, prefix=f"build/{ROCM}/") == rocm_before  # kept
    # adds and deletes landed in one commit on top of the previous head
    assert hub.commit_titles(REPO, "v1")[1:] == hub.commit_titles(REPO, old_head)
    assert f"{ROCM}: kept" in out


def test_failure_between_upload_and_commit_leaves_branch_unchanged(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    head, files_before = hub.head(REPO, "v1"), hub.files(REPO, "v1")

    project.variant(CPU)  # rebuilt: new .so bytes
    uploaded_before, commits_before = hub.lfs_bytes_uploaded, hub.count("commit")
    hub.inject("commit", 500, times=100)
    rc, out = run_publish()
    assert rc == 1 and "500" in out
    assert hub.lfs_bytes_uploaded > uploaded_before  # the upload happened ...
    assert hub.head(REPO, "v1") == head and hub.files(REPO, "v1") == files_before  # ... the branch did not move
    assert hub.count("commit") == commits_before + 4  # 1 + 3 retries

    hub.faults.clear()
    uploaded = hub.lfs_bytes_uploaded
    rc, out = run_publish()
    assert rc == 0, out
    assert branch_files(hub) == project.local_files(CPU)
    assert hub.lfs_bytes_uploaded == uploaded  # already stored: not sent again


def test_failed_first_publish_creates_no_version_branch(hub, project, run_publish):
    project.variant(CPU)
    hub.inject("commit", 502, times=100)
    rc, out = run_publish()
    assert rc == 1
    assert set(hub.branches(REPO)) == {"main"}  # no v1, side branch cleaned up


def test_concurrent_publish_rejected_through_parent_commit(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    project.variant(CPU)
    fired = []

    def other_publisher(args):
        if not fired:
            fired.append(hub.commit_direct(REPO, "v1", {"build/other/x.txt": b"x"}, title="someone else"))

    hub.before["commit"] = other_publisher
    rc, out = run_publish()
    assert rc == 1 and "moved" in out
    assert hub.head(REPO, "v1") == fired[0]  # only the other commit landed
    assert hub.commit_titles(REPO, "v1")[0] == "someone else"


def test_multi_commit_staged_on_side_branch_then_promoted(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    old_head = hub.head(REPO, "v1")
    extra = {f"layers/l{i}.py": f"L = {i}\n".encode() for i in range(5)}
    project.variant(CPU, extra_files=extra)
    seen = []

    def watch(args):
        seen.append((args["rev"], hub.head(REPO, "v1")))

    hub.before["commit"] = watch
    rc, out = run_publish("--max-ops-per-commit", "2")
    assert rc == 0, out
    assert len(seen) >= 3  # several commits ...
    assert all(rev.startswith("v1-publish-") for rev, _ in seen)  # ... all on the side branch ...
    assert all(head == old_head for _, head in seen)  # ... while v1 stayed put
    assert branch_files(hub) == project.local_files(CPU)
    assert set(hub.branches(REPO)) == {"main", "v1"}
    titles = hub.commit_titles(REPO, "v1")
    assert titles[len(seen) :] == hub.commit_titles(REPO, old_head)
    assert all("(part " in t for t in titles[: len(seen)])


def test_staged_release_not_promoted_when_branch_moves(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    project.variant(CPU, extra_files={f"layers/l{i}.py": b"x\n" for i in range(4)})
    fired = []

    def other_publisher(args):
        if not fired:
            fired.append(hub.commit_direct(REPO, "v1", {"build/other/x.txt": b"x"}, title="someone else"))

    hub.before["commit"] = other_publisher
    rc, out = run_publish("--max-ops-per-commit", "2")
    assert rc == 1 and "moved during staging" in out
    assert hub.head(REPO, "v1") == fired[0]
    assert set(hub.branches(REPO)) == {"main", "v1"}


def test_dry_run_changes_nothing(hub, project, run_publish):
    project.variant(CPU)
    assert run_publish()[0] == 0
    project.variant(CPU, ops="_gemm_cpu_def5678")
    project.variant(CUDA, ops="_gemm_cuda_abc1234")
    state, before = {b: hub.files(REPO, b) for b in hub.branches(REPO)}, writes(hub)

    for token in (WRITE_TOKEN, None):
        rc, out = run_publish("--dry-run", token=token) if token else run_publish(token=None)
        assert rc == 0, out
        assert "nothing was changed" in out
        assert f"+ build/{CPU}/_gemm_cpu_def5678.abi3.so" in out
        assert f"- build/{CPU}/_gemm_cpu_abc1234.abi3.so" in out
        assert f"{CUDA}: new" in out and "branch v1 (at" in out
        assert writes(hub) == before
        assert {b: hub.files(REPO, b) for b in hub.branches(REPO)} == state


OK = {"ok": True}
PASSED = {"digest": OK, "loader": OK, "abi": OK, "smoke": OK}


@pytest.mark.parametrize(
    "problem",
    [
        "failed_check",
        "missing_abi_check",
        "stopped_before_smoke",
        "rocm_without_loaders",
        "rocm_without_machine_code",
        "dirty",
        "toml_version",
        "tag_version",
    ],
)
def test_refusals_and_force_with_reason(hub, project, run_publish, problem):
    args: list[str] = []
    expected = ""
    if problem == "rocm_without_loaders":
        project.variant(ROCM, ops="_gemm_rocm_abc1234", checks={**PASSED, "machine_code": OK})
        expected = "no 'loaders' check recorded"
    elif problem == "rocm_without_machine_code":
        project.variant(ROCM, ops="_gemm_rocm_abc1234", checks={**PASSED, "loaders": OK})
        expected = "no 'machine_code' check recorded"
    elif problem == "failed_check":
        project.variant(CPU, checks={**PASSED, "tests": {"ok": False}})
        expected = "check 'tests' did not pass"
    elif problem == "missing_abi_check":
        project.variant(CPU, checks={k: v for k, v in PASSED.items() if k != "abi"})
        expected = "no 'abi' check recorded"
    elif problem == "stopped_before_smoke":  # a build from before the check recorded what it did not reach
        project.variant(CPU, checks={k: v for k, v in PASSED.items() if k != "smoke"})
        expected = "no 'smoke' check recorded"
    elif problem == "dirty":
        project.variant(CPU, dirty=True)
        expected = "built from a dirty tree"
    elif problem == "toml_version":
        project.variant(CPU)
        project.write_toml(2)
        expected = "disagrees with build.toml version 2"
    else:
        project.variant(CPU)
        args = ["--tag", "v2.0.0"]
        expected = "disagrees with release tag v2.0.0"

    rc, out = run_publish(*args)
    assert rc == 2 and "REFUSED" in out and "--force" in out
    assert expected in out
    assert writes(hub) == [] and REPO not in hub.repos

    rc, out = run_publish(*args, "--force", "--reason", "hotfix approved by lead")
    assert rc == 0, out
    title = hub.commit_titles(REPO, "v1")[0]
    assert "forced: hotfix approved by lead" in title
    assert "Forced despite" in hub.commit_description(REPO, "v1")


def test_force_needs_a_reason(project, run_publish):
    project.variant(CPU)
    with pytest.raises(SystemExit) as exc:
        run_publish("--force")
    assert exc.value.code == 2


def test_truncated_binary_is_never_published(hub, project, run_publish):
    def truncate(d):
        so = d / "_gemm_cpu_abc1234.abi3.so"
        so.write_bytes(so.read_bytes()[:100])

    project.variant(CPU, tamper=truncate)
    rc, out = run_publish("--force", "--reason", "try anyway")
    assert rc == 1 and "do not match the metadata digest" in out
    assert hub.requests == []


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("torch213-gemm-build", "not a variant name the kernels loader accepts"),
        ("torch213-cxx11-rocm71-x86_64-linux", "the name says backend 'rocm' but metadata.json says 'cpu'"),
    ],
)
def test_variant_the_loader_would_not_accept_is_refused(hub, project, run_publish, name, why):
    d = project.variant(CPU)
    # the build's own name: only the loader's parser or the backend refuse it
    edit_metadata(d, lambda meta: meta["build"].update(variant=name))
    d.rename(project.build / name)
    rc, out = run_publish("--force", "--reason", "try anyway")
    assert rc == 1 and f"{name}: {why}" in out
    assert hub.requests == []


@pytest.mark.parametrize("case", ["invalid_token", "read_only_token", "approval_pending"])
def test_auth_errors_have_clear_messages(hub, project, run_publish, case):
    project.variant(CPU)
    token = {"invalid_token": "hf_not_a_real_token", "read_only_token": READ_TOKEN, "approval_pending": WRITE_TOKEN}[
        case
    ]
    if case == "approval_pending":
        hub.approval_pending.add(REPO.split("/")[0])
    rc, out = run_publish(token=token)
    assert rc == 1
    assert token not in out
    if case == "invalid_token":
        assert "401" in out and "HF_TOKEN is invalid or expired" in out
    elif case == "read_only_token":
        assert "403" in out and "write access" in out
    else:
        assert "403" in out and "approval" in out
    assert REPO not in hub.repos


def test_rate_limit_and_server_errors_are_retried(hub, project, run_publish):
    project.variant(CPU)
    hub.inject("refs", 429, times=2, headers={"Retry-After": "0"})
    hub.inject("commit", 503, times=1)
    rc, out = run_publish()
    assert rc == 0, out
    assert "HTTP 429, retry 1/3" in out and "HTTP 503" in out
    assert branch_files(hub) == project.local_files(CPU)
    assert len(hub.commit_titles(REPO, "v1")) == 2  # the retried commit landed once


def test_commit_whose_answer_was_lost_is_recognised(hub, project, run_publish):
    """A 5xx after the commit landed: the retry meets parent_commit's 412, sees its own commit, succeeds."""
    project.variant(CPU)
    assert run_publish()[0] == 0
    project.variant(CPU)
    before = hub.commit_titles(REPO, "v1")
    hub.inject("commit", 502, after=True)
    rc, out = run_publish()
    assert rc == 0, out
    assert "HTTP 502" in out
    assert branch_files(hub) == project.local_files(CPU)
    assert hub.commit_titles(REPO, "v1")[1:] == before  # exactly one new commit


def test_cli_without_token_prints_plan_and_exits_0(project):
    project.variant(CPU)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HF_OIDC_RESOURCE",
            "GITHUB_ACTIONS",
            "ACTIONS_ID_TOKEN_REQUEST_URL",
            "GITHUB_REF_TYPE",
            "GITHUB_REF_NAME",
        )
    }
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.publish", "--build-dir", str(project.build)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{CPU}: new" in proc.stdout and "branch v1" in proc.stdout
    assert f"+ build/{CPU}/_gemm_cpu_abc1234.abi3.so" in proc.stdout
    assert "nothing was changed" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repo", "not-a-repo"], "--repo 'not-a-repo': expected ORG/NAME"),
        (["--retries", "-3"], "--retries must be 0 or more, got -3"),
        (["--retry-delay", "-1"], "--retry-delay must be 0 or more seconds, got -1.0"),
        (["--retry-delay", "nan"], "--retry-delay must be 0 or more seconds, got nan"),
        (["--max-ops-per-commit", "0"], "--max-ops-per-commit must be at least 1"),
    ],
)
def test_bad_arguments_name_the_argument(project, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        publish.main(["--build-dir", str(project.build), *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_missing_build_dir_names_it(tmp_path):
    lines = []
    assert publish.main(["--build-dir", str(tmp_path / "missing")], log=lines.append) == 1
    assert any(f"--build-dir {tmp_path / 'missing'}: not a directory" in line for line in lines), lines


def test_the_card_shows_each_platforms_committed_results_only(tmp_path):
    """Per platform folder, the committed file of each variant (<variant>.json, gemm-bench/1); a run's own
    copies, probes and logs there, and unreadable files, are not the published numbers."""
    from scripts.kernel_card import load_benchmarks, render_card

    assert load_benchmarks(tmp_path / "absent") == []

    def doc(variant: str, us: float) -> str:
        records = [
            {"m": 64, "n": 64, "k": 128, "layout": "natural", "impl": "gemm", "us": us, "tflops": 1.0,
             "ratio_vs_torch_ref": 2.0, "ratio_vs_gemm_linear": 0.5},
            {"m": 64, "n": 64, "k": 128, "layout": "natural", "impl": "torch_ref", "us": 2 * us, "tflops": 0.5},
        ]  # fmt: skip
        impls = {"gemm": {"peer": False}, "gemm_linear": {"peer": False}, "torch_ref": {"peer": True}}
        return json.dumps(
            {"schema": "gemm-bench/1", "platform": "x", "variant": variant, "impls": impls, "records": records}
        )

    for platform, us in (("h200", 11.0), ("cpu", 99.0)):
        (tmp_path / "r" / platform).mkdir(parents=True)
        (tmp_path / "r" / platform / f"{CPU}.json").write_text(doc(CPU, us))
    (tmp_path / "r" / "h200" / "run140-bench.json").write_text(doc(CPU, 5.0))  # a run's copy
    (tmp_path / "r" / "h200" / "run133-probe1.json").write_text(json.dumps([{"shape": "64x64x128", "ms": 0.5}]))
    (tmp_path / "r" / "h200" / "broken.json").write_text("{not json")
    (tmp_path / "r" / "tmp").mkdir()  # the harness's default, git-ignored output
    (tmp_path / "r" / "tmp" / f"{CPU}.json").write_text(doc(CPU, 7.0))
    rows = load_benchmarks(tmp_path / "r")
    assert [(r["platform"], r["us"]) for r in rows] == [("cpu", 99.0), ("h200", 11.0)]
    card = render_card(REPO, 1, {}, rows)
    assert f"### h200 (`{CPU}`)" in card and f"### cpu (`{CPU}`)" in card
    assert "| M x N x K | layout | time (us) | TFLOP/s | speedup vs torch_ref |" in card
    assert "| 64x64x128 | natural | 11 | 1 | 2 |" in card
    assert "gemm_linear" not in card  # our own other entry point is not a peer
    assert "No variants are published yet." in card


def test_trusted_publishing_token(hub, project, run_publish, monkeypatch):
    """No HF_TOKEN, but HF trusted publishing (OIDC exchange at the Hub) provides one."""
    project.variant(CPU)
    monkeypatch.setenv("HF_OIDC_RESOURCE", f"kernels/{REPO}")
    monkeypatch.setenv("HF_OIDC_ID_TOKEN", "ci-issued-id-token")
    rc, out = run_publish(token=None)
    assert rc == 0, out
    assert hub.oidc_exchanges == [{"resource": f"kernels/{REPO}", "subject_token": "ci-issued-id-token"}]
    assert os.environ.get("HF_OIDC_RESOURCE") == f"kernels/{REPO}" and "HF_TOKEN" not in os.environ
    assert branch_files(hub) == project.local_files(CPU)
    assert WRITE_TOKEN not in out


def test_trusted_publishing_failure_is_explained(hub, project, run_publish, monkeypatch):
    project.variant(CPU)
    monkeypatch.setenv("HF_OIDC_RESOURCE", f"kernels/{REPO}")  # but no id token and not in a CI provider
    rc, out = run_publish(token=None)
    assert rc == 1 and "trusted publishing" in out and "id-token: write" in out
    assert hub.requests == []


def test_require_token_fails_without_one_and_never_reaches_the_hub(hub, project, run_publish):
    """In CI a missing token must fail the job: a green release that published nothing is the bug."""
    project.variant(CPU)
    rc, out = run_publish("--require-token", token=None)
    assert rc == 1, out
    assert "--require-token: no token" in out and "HF_OIDC_RESOURCE" in out
    assert "Plan only" not in out
    assert hub.requests == []
    rc, out = run_publish("--require-token")  # with a token it publishes as usual
    assert rc == 0, out
    assert branch_files(hub) == project.local_files(CPU)


def test_require_token_contradicts_dry_run(project, run_publish):
    with pytest.raises(SystemExit):
        publish.main(["--build-dir", str(project.build), "--require-token", "--dry-run"])


def _publish_step(workflow: str) -> dict:
    doc = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / workflow).read_text())
    (step,) = [s for job in doc["jobs"].values() for s in job.get("steps", []) if "scripts.publish" in s.get("run", "")]
    return step


@pytest.mark.parametrize("workflow", ["release.yml", "dispatch.yml"])
def test_the_workflows_publish_step_publishes_through_trusted_publishing(hub, project, workflow):
    """The publish step's own command and env, run as GitHub Actions would run it in a job with
    `id-token: write` (the runtime's id-token service and the Hub both served by the stand-in), and no
    stored token: the variants must reach the Hub. Before HF_OIDC_RESOURCE was set there, this step
    printed its plan and exited 0."""
    project.variant(CPU)
    step = _publish_step(workflow)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE", "GITHUB_", "ACTIONS_"))}
    for name, value in step["env"].items():  # ${{ needs.<job>.outputs.repo }} is the repository
        env[name] = re.sub(r"\$\{\{ needs\.\w+\.outputs\.repo \}\}", REPO, value)
        assert "${{" not in env[name], f"{workflow}: unexpected expression in {name}={value}"
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_REF_TYPE="tag" if workflow == "release.yml" else "branch",
        GITHUB_REF_NAME="v1" if workflow == "release.yml" else "main",
        ACTIONS_ID_TOKEN_REQUEST_URL=hub.github_idtoken_url,
        ACTIONS_ID_TOKEN_REQUEST_TOKEN=hub.github_request_token,
        HF_ENDPOINT=hub.url,
        HF_HOME=str(project.root / "hf_home"),
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    run = step["run"]
    assert run.startswith(".venv/bin/python -m scripts.publish --build-dir build ")
    command = run.replace(".venv/bin/python", shlex.quote(sys.executable), 1).replace(
        "--build-dir build ", f"--build-dir {shlex.quote(str(project.build))} ", 1
    )
    proc = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Published:" in out
    assert hub.github_audiences == [hub.url]
    assert hub.oidc_exchanges == [{"resource": f"kernels/{REPO}", "subject_token": f"github-id-token-for:{hub.url}"}]
    assert branch_files(hub) == project.local_files(CPU)
    # And with the opt-in gone, the same step fails instead of passing with nothing published.
    env.pop("HF_OIDC_RESOURCE")
    project.variant(CPU)  # a rebuilt binary: something to publish again
    proc = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--require-token: no token" in proc.stdout + proc.stderr


def test_new_branch_holds_only_this_release_and_stale_benchmarks_go(hub, project, run_publish):
    hub.create_repo(REPO)
    hub.commit_direct(
        REPO,
        "main",
        {"build/torch212-cxx11-cpu-x86_64-linux/__init__.py": b"old\n", "benchmarks/notes.txt": b"keep?\n"},
    )
    project.variant(CPU)
    assert run_publish()[0] == 0
    v1 = hub.files(REPO, "v1")
    assert not any(p.startswith("build/torch212") for p in v1)  # a new version branch starts clean
    assert "benchmarks/notes.txt" not in v1
    assert "build/torch212-cxx11-cpu-x86_64-linux/__init__.py" in hub.files(REPO, "main")  # main untouched

    # On the existing branch: a benchmark*.py no longer present is deleted, other files kept.
    hub.commit_direct(REPO, "v1", {"benchmarks/benchmark_old.py": b"# old\n", "benchmarks/data.csv": b"1\n"})
    rc, out = run_publish()
    assert rc == 0, out
    v1 = hub.files(REPO, "v1")
    assert "benchmarks/benchmark_old.py" not in v1 and "benchmarks/data.csv" in v1
    assert "benchmarks/benchmark_gemm.py" in v1


def test_a_renamed_variant_is_not_published(hub, project, run_publish):
    """A build under another valid name of the same backend (torch 2.13's binary as torch212-...) passes the
    name parser and the digest, which does not cover the name: the build's own record of its name refuses it,
    and so does the loader check, which loaded it under its old name."""
    d = project.variant(CPU)
    renamed = project.build / CPU.replace("torch213", "torch212")
    d.rename(renamed)
    rc, out = run_publish()
    assert rc == 1 and f"was built as '{CPU}'" in out, out
    assert hub.requests == []

    meta = json.loads((renamed / "metadata.json").read_text())
    meta["build"]["variant"] = renamed.name  # the record edited too: the loader check still says otherwise
    (renamed / "metadata.json").write_text(json.dumps(meta))
    rc, out = run_publish()
    assert rc == 2 and f"the loader check chose '{CPU}'" in out, out
    assert writes(hub) == []  # the plan read the Hub; nothing was written


def test_a_broken_build_toml_is_a_publish_error(hub, project, run_publish):
    project.variant(CPU)
    (project.root / "build.toml").write_text("[general\n")
    rc, out = run_publish("--dry-run")
    assert rc == 1 and "build.toml: cannot read it as TOML" in out and "Traceback" not in out, out


def test_a_dry_run_with_the_hub_offline_plans_against_an_empty_repository(hub, project, run_publish, monkeypatch):
    """HF_HUB_OFFLINE=1 makes huggingface_hub refuse every request with its own error: a plan still comes out;
    a real publish says why it cannot."""
    import huggingface_hub.constants

    project.variant(CPU)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    rc, out = run_publish("--dry-run")
    assert rc == 0 and "could not read the Hub (OfflineModeIsEnabled)" in out, out
    rc, out = run_publish()
    assert rc == 1 and "HF_HUB_OFFLINE is set" in out, out
    assert hub.requests == []
