"""The workflow graph: who runs where, who needs whom, what holds credentials, what a job runs.

These read .github/workflows/*.yml as data; they fail on the first workflow change that breaks a
property the pipeline relies on (publish gated on every GPU test, self-hosted runners unreachable
from a fork's pull request, credentials only in the publish job, thin jobs that call our scripts).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from tests.workflows import wf

DOCS = wf.all_workflows()
TOP_LEVEL = [name for name, doc in DOCS.items() if "workflow_call" not in wf.triggers(doc)]
REUSABLE = [name for name, doc in DOCS.items() if "workflow_call" in wf.triggers(doc)]
SELF_HOSTED = wf.self_hosted_labels()
# Events whose code or inputs can come from someone without write access to the repository.
UNTRUSTED_EVENTS = (
    "pull_request",
    "pull_request_target",
    "pull_request_review",
    "pull_request_review_comment",
    "issue_comment",
    "issues",
    "discussion",
    "discussion_comment",
    "workflow_run",
    "fork",
    "watch",
)
PUBLISH_ENVIRONMENT = "hub-release"


def steps():
    for wname, doc in DOCS.items():
        for job_id, job in doc["jobs"].items():
            for i, step in enumerate(job.get("steps", [])):
                yield f"{wname}:{job_id}:step{i}", job_id, job, step


def is_publish_job(job) -> bool:
    env = job.get("environment")
    name = env.get("name") if isinstance(env, dict) else env
    return name == PUBLISH_ENVIRONMENT


def test_expected_workflows_exist():
    assert {"ci.yml", "build.yml", "gpu-test.yml", "release.yml", "dispatch.yml"} <= set(DOCS)
    assert set(REUSABLE) == {"build.yml", "gpu-test.yml"}


# ------------------------------------------------------------------------------ hardening


def test_every_action_is_pinned_to_a_full_sha_with_a_version_comment():
    pattern = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
    seen = 0
    for path in sorted(wf.WORKFLOWS.glob("*.yml")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            m = pattern.match(line)
            if not m:
                continue
            seen += 1
            ref = m["ref"]
            if wf.local_callee(ref):
                continue
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}", ref), (
                f"{path.name}:{lineno}: {ref} is not pinned to a full commit SHA"
            )
            assert re.fullmatch(r"\s*#\s*v\d+(\.\d+){0,2}\s*", m["rest"]), (
                f"{path.name}:{lineno}: {ref} lacks a '# vX.Y.Z' version comment"
            )
    assert seen > 10


def test_no_expression_inside_run():
    for where, _, _, step in steps():
        if "run" in step:
            assert "${{" not in step["run"], f"{where}: pass event data through env:, not ${{{{ }}}} in run:"


def test_checkout_never_persists_credentials():
    checkouts = [(w, s) for w, _, _, s in steps() if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts
    for where, step in checkouts:
        assert step.get("with", {}).get("persist-credentials") is False, where


@pytest.mark.parametrize("name", sorted(DOCS))
def test_top_level_permissions_are_read_only(name):
    perms = DOCS[name].get("permissions")
    assert perms in ({}, {"contents": "read"}), f"{name}: top-level permissions {perms!r}"


def test_write_and_id_token_permissions_only_on_publish_jobs():
    for wname, doc in DOCS.items():
        for job_id, job in doc["jobs"].items():
            perms = job.get("permissions", {})
            assert perms != "write-all", f"{wname}:{job_id}"
            elevated = {k: v for k, v in (perms or {}).items() if v != "read"}
            if elevated:
                assert is_publish_job(job), f"{wname}:{job_id} has {elevated} outside the publish job"
                assert elevated == {"id-token": "write"}, f"{wname}:{job_id}: only id-token: write is needed"


def test_secrets_appear_only_in_publish_jobs():
    for wname, doc in DOCS.items():
        assert "secrets: inherit" not in (wf.WORKFLOWS / wname).read_text()
        for job_id, job in doc["jobs"].items():
            text = yaml.safe_dump(job)
            if "secrets." in text or "secrets:" in text or "id-token" in text:
                assert is_publish_job(job), f"{wname}:{job_id} touches secrets or id-token"


def test_publish_jobs_sit_behind_the_protected_environment_and_never_overlap():
    publish = [(w, j, job) for w, d in DOCS.items() for j, job in d["jobs"].items() if is_publish_job(job)]
    assert {w for w, _, _ in publish} == {"release.yml", "dispatch.yml"}
    for wname, job_id, job in publish:
        assert job.get("concurrency", {}).get("group") == "hub-publish", f"{wname}:{job_id}"
        assert job["concurrency"].get("cancel-in-progress") is False
        runs = [s["run"] for s in job["steps"] if "run" in s]
        assert any("-m scripts.publish" in r for r in runs), f"{wname}:{job_id} must call scripts.publish"
    release = DOCS["release.yml"]
    assert release["concurrency"]["cancel-in-progress"] is False
    assert wf.triggers(release) == {"push": {"tags": ["v*"]}}


def test_no_dangerous_triggers():
    for name, doc in DOCS.items():
        bad = set(wf.triggers(doc)) & {"pull_request_target", "workflow_run", "issue_comment"}
        assert not bad, f"{name} triggers on {bad}"


def test_no_cache_in_release_jobs():
    reachable = {"release.yml"} | {
        wf.local_callee(ref.job.get("uses", "")) for ref in wf.expand("release.yml", DOCS)
    } - {None}
    assert reachable == {"release.yml", "build.yml", "gpu-test.yml"}
    for name in reachable:
        for job_id, job in DOCS[name]["jobs"].items():
            for step in job.get("steps", []):
                uses = step.get("uses", "")
                assert not uses.startswith("actions/cache"), f"{name}:{job_id} restores a cache"
                assert "cache" not in step.get("with", {}), f"{name}:{job_id}: {uses} with a cache"


def test_dependabot_updates_actions_with_a_cooldown():
    cfg = yaml.safe_load((wf.REPO_ROOT / ".github" / "dependabot.yml").read_text())
    actions = [u for u in cfg["updates"] if u["package-ecosystem"] == "github-actions"]
    assert len(actions) == 1
    assert actions[0]["cooldown"]["default-days"] >= 3


# --------------------------------------------------------------------------- job shape


def test_every_job_has_a_timeout():
    for wname, doc in DOCS.items():
        for job_id, job in doc["jobs"].items():
            callee = wf.local_callee(job.get("uses", ""))
            if callee is not None:
                assert callee in DOCS, f"{wname}:{job_id} calls a missing workflow {callee}"
                continue  # the called workflow's own jobs carry their timeouts
            t = job.get("timeout-minutes")
            assert isinstance(t, int) and 0 < t <= 360, f"{wname}:{job_id} timeout-minutes={t!r}"


RUN_LINE = re.compile(
    r"(?:make [a-z][a-z-]*(?: [A-Z_]+=\"\$[A-Z_]+\")*"
    r"|sudo make system-deps|sudo --preserve-env=PIP_EXTRA_INDEX_URL \.ci/run"
    r"|(?:\.venv/bin/python|python3?) -m (?:scripts|benchmarks)\.[a-z_]+(?: .*)?)"
)


def run_lines():
    for where, _, _, step in steps():
        if "run" in step:
            text = step["run"].replace("\\\n", " ")
            for line in text.splitlines():
                if line.strip() and not line.strip().startswith("#"):
                    yield where, line.strip()


def test_run_steps_only_call_make_or_our_scripts():
    lines = list(run_lines())
    assert lines
    for where, line in lines:
        assert RUN_LINE.fullmatch(line), f"{where}: '{line}' is logic in YAML; put it in a make target or scripts stage"


def test_script_flags_used_by_workflows_exist():
    """Every `python -m scripts.X [sub] --flag` in a workflow names a flag the module's parser has."""
    calls: dict[tuple[str, str], set[str]] = {}
    for _, line in run_lines():
        m = re.match(r"(?:\.venv/bin/python|python3?) -m ((?:scripts|benchmarks)\.[a-z_]+)(.*)", line)
        if not m:
            continue
        words = shlex.split(m[2])
        sub = words[0] if words and not words[0].startswith("-") else ""
        calls.setdefault((m[1], sub), set()).update(w.split("=")[0] for w in words if w.startswith("--"))
    assert ("scripts.publish", "") in calls and ("scripts.gpu_test", "run") in calls
    for (module, sub), flags in sorted(calls.items()):
        cmd = [sys.executable, "-m", module, *([sub] if sub else []), "--help"]
        proc = subprocess.run(cmd, cwd=wf.REPO_ROOT, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed: {proc.stderr[-500:]}"
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", proc.stdout), (
                f"{module} {sub}: workflows pass {flag}, which its --help does not list"
            )


def test_make_targets_used_by_workflows_exist():
    targets = {m[1] for _, line in run_lines() if (m := re.match(r"(?:sudo )?make ([a-z][a-z-]*)", line))}
    assert {"venv", "lint", "gate", "docker-build"} <= targets
    makefile = (wf.REPO_ROOT / "Makefile").read_text()
    defined = set(re.findall(r"^([a-z][a-z-]*)\s*:", makefile, flags=re.M))
    assert targets <= defined, f"workflows call make targets the Makefile lacks: {sorted(targets - defined)}"


# ---------------------------------------------------------------------- release gating


@pytest.mark.parametrize("name", ["release.yml", "dispatch.yml"])
def test_publish_needs_every_gpu_test_job(name):
    doc = DOCS[name]
    jobs = doc["jobs"]
    (publish_id,) = [j for j, job in jobs.items() if is_publish_job(job)]
    upstream = wf.transitive_needs(jobs, publish_id)
    gpu_callers = {ref.chain[0][1] for ref in wf.expand(name, DOCS) if wf.runs_on_labels(ref.job) & SELF_HOSTED}
    build_callers = {j for j, job in jobs.items() if wf.local_callee(job.get("uses", "")) == "build.yml"}
    assert gpu_callers and build_callers
    assert gpu_callers <= upstream, f"{name}: publish does not wait for {gpu_callers - upstream}"
    assert build_callers <= upstream
    # A status function in the publish condition would let it run after a failed or skipped test.
    cond = jobs[publish_id].get("if", "")
    assert not re.search(r"always\(\)|failure\(\)|cancelled\(\)|!\s*cancelled", cond), cond
    # Every built entry is GPU-tested: the test matrix is exactly the build's output.
    for caller in gpu_callers:
        assert jobs[caller]["with"]["matrix"] == "${{ needs.build.outputs.matrix }}"
        assert "build" in wf.needs(jobs[caller])
    # And publish checks the downloaded, tested variants against that same matrix.
    runs = [s.get("run", "") for s in jobs[publish_id]["steps"]]
    tested = [i for i, r in enumerate(runs) if "scripts.workflow_inputs tested" in r]
    published = [i for i, r in enumerate(runs) if "scripts.publish" in r]
    assert tested and published and tested[0] < published[0]
    downloads = [s for s in jobs[publish_id]["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert [d["with"]["pattern"] for d in downloads] == ["tested-*"]


def test_publishing_builds_fail_on_abi_violations_before_the_gpu_tests():
    """The publisher refuses a variant that breaks manylinux_2_28/abi3; a build that will publish fails
    on it at once (docker_build --require-abi), before MI300X time is spent testing it."""
    build = DOCS["build.yml"]
    flag = wf.triggers(build)["workflow_call"]["inputs"]["require-abi"]
    assert flag["type"] == "boolean" and flag["default"] is False
    (step,) = [s for s in build["jobs"]["build"]["steps"] if "make docker-build" in s.get("run", "")]
    assert step["env"]["REQUIRE_ABI"] == "${{ inputs.require-abi }}"
    assert 'REQUIRE_ABI="$REQUIRE_ABI"' in step["run"]
    assert DOCS["release.yml"]["jobs"]["build"]["with"]["require-abi"] is True
    dispatch_flag = DOCS["dispatch.yml"]["jobs"]["build"]["with"]["require-abi"]
    assert dispatch_flag == "${{ needs.inputs.outputs.upload == 'true' }}"
    assert "require-abi" not in DOCS["ci.yml"]["jobs"]["build"].get("with", {})  # pull requests only report it
    # What the workflow hands make ("true" / "false") reaches the driver as the flag, or not at all.
    for value, expected in (("true", True), ("false", False), ("", False)):
        proc = subprocess.run(
            ["make", "-n", "docker-build", f"REQUIRE_ABI={value}"],
            cwd=wf.REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        line = proc.stdout[proc.stdout.index("-m scripts.docker_build") :]
        assert ("--require-abi" in line) is expected, (value, line)


def test_release_checks_the_tag_before_building():
    jobs = DOCS["release.yml"]["jobs"]
    assert any("scripts.workflow_inputs tag" in s.get("run", "") for s in jobs["tag"]["steps"])
    assert "tag" in wf.transitive_needs(jobs, "build")
    assert jobs["build"]["with"]["pr-only"] is False


def test_gpu_test_uploads_only_the_staged_variant_and_always_cleans_up():
    (job,) = DOCS["gpu-test.yml"]["jobs"].values()
    names = [s.get("with", {}).get("name") for s in job["steps"]]
    assert "tested-${{ matrix.variant }}" in names
    always = [s for s in job["steps"] if s.get("if") == "always()"]
    assert any("scripts.gpu_test cleanup" in s.get("run", "") for s in always)
    assert any(s.get("with", {}).get("name") == "gpu-logs-${{ matrix.variant }}" for s in always)
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "scripts.preflight --arch gfx942" in runs
    assert runs.index("scripts.preflight") < runs.index("scripts.gpu_test run")


def test_uploads_of_hidden_paths_include_hidden_files():
    """upload-artifact (since v4.4) skips files under a folder whose name starts with '.' unless
    include-hidden-files is set: the container build log under build/.docker/ once never reached its artifact."""
    hidden_uploads = 0
    for where, _, _, step in steps():
        if "actions/upload-artifact" not in step.get("uses", ""):
            continue
        paths = str(step["with"]["path"]).splitlines()
        hidden = [p for p in paths if any(part.startswith(".") and part not in (".", "..") for part in p.split("/"))]
        if hidden:
            hidden_uploads += 1
            assert step["with"].get("include-hidden-files") is True, (where, hidden)
    assert hidden_uploads, "the build log upload (build/.docker/*.log) is expected among them"


def test_build_log_upload_takes_the_logs_where_docker_build_writes_them():
    from scripts import docker_build

    jobs = DOCS["build.yml"]["jobs"].values()
    uploads = [s for job in jobs for s in job.get("steps", []) if "actions/upload-artifact" in s.get("uses", "")]
    paths = [s["with"]["path"] for s in uploads]
    assert f"build/{docker_build.STAGE_SUBDIR}/*.log" in paths


# ------------------------------------------------------------- self-hosted runner exposure


def _contexts(event: str):
    """Every context variant worth trying for an event: a fork's PR and a same-repo PR."""
    base = {"github.event_name": event, "github.repository": "org/gemm", "github.ref": "refs/heads/main"}
    yield base | {"github.event.pull_request.head.repo.full_name": "attacker/gemm",
                  "github.event.pull_request.head.repo.fork": True}  # fmt: skip
    yield base | {"github.event.pull_request.head.repo.full_name": "org/gemm",
                  "github.event.pull_request.head.repo.fork": False}  # fmt: skip


def _can_run(ref: wf.JobRef, context) -> bool:
    return all(wf.evaluate(c, context) for c in ref.conditions(DOCS))


def test_no_caller_routes_the_build_to_a_self_hosted_runner():
    """build.yml's runner is an input; pull requests reach it, so no caller may point it at our hosts."""
    default = DOCS["build.yml"]["on"]["workflow_call"]["inputs"]["runner"]["default"]
    assert default not in SELF_HOSTED
    for name, doc in DOCS.items():
        for job_id, job in doc["jobs"].items():
            if wf.local_callee(job.get("uses", "")) == "build.yml":
                assert job.get("with", {}).get("runner", default) not in SELF_HOSTED, f"{name}:{job_id}"


def test_self_hosted_jobs_exist_and_use_declared_labels():
    refs = [ref for name in TOP_LEVEL for ref in wf.expand(name, DOCS) if wf.runs_on_labels(ref.job) & SELF_HOSTED]
    assert refs, "no job runs on the MI300X runners"
    for ref in refs:
        assert "linux-mi300x-gpu-1" in wf.runs_on_labels(ref.job), ref.name


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_self_hosted_jobs_cannot_run_for_untrusted_events(name):
    events = set(wf.triggers(DOCS[name]))
    gpu_refs = [ref for ref in wf.expand(name, DOCS) if wf.runs_on_labels(ref.job) & SELF_HOSTED]
    for event in sorted(events & set(UNTRUSTED_EVENTS)):
        for ctx in _contexts(event):
            for ref in gpu_refs:
                assert not _can_run(ref, ctx), f"{ref.name} would run on a self-hosted runner for {event}"


def test_self_hosted_jobs_do_run_for_trusted_events():
    """The guard is not vacuous: pushes to main, release tags and dispatches do reach the GPUs."""
    expected = {"ci.yml": "push", "release.yml": "push", "dispatch.yml": "workflow_dispatch"}
    for name, event in expected.items():
        assert event in wf.triggers(DOCS[name])
        gpu_refs = [ref for ref in wf.expand(name, DOCS) if wf.runs_on_labels(ref.job) & SELF_HOSTED]
        assert gpu_refs, name
        for ctx in _contexts(event):
            assert all(_can_run(ref, ctx) for ref in gpu_refs), f"{name}: GPU tests never run for {event}"


def test_ci_pull_requests_build_only_the_pr_entries_and_use_no_gpu():
    jobs = DOCS["ci.yml"]["jobs"]
    assert "pull_request" in wf.triggers(DOCS["ci.yml"])
    assert jobs["build"]["with"] == {"pr-only": True}
    runs = {j: " ".join(s.get("run", "") for s in job.get("steps", [])) for j, job in jobs.items()}
    assert "make lint" in runs["lint"] and "make gate" in runs["gate"]
    assert (
        runs["test"].strip() == "sudo --preserve-env=PIP_EXTRA_INDEX_URL .ci/run"
    )  # the lead's CI entry point: packages, Docker, make test
    assert "make test" in (wf.REPO_ROOT / ".ci" / "run").read_text()


def test_evaluator_rejects_what_it_does_not_understand():
    with pytest.raises(wf.ExpressionError):
        wf.evaluate("contains(github.event.head_commit.message, 'x')", {})
    with pytest.raises(wf.ExpressionError):
        wf.evaluate("github.actor == 'me'", {"github.event_name": "push"})
    ctx = {"github.event_name": "pull_request", "github.repository": "o/r"}
    assert wf.evaluate("${{ github.event_name != 'push' && (always() || !success()) }}", ctx)
    assert not wf.evaluate("github.event_name == 'push' || github.repository == 'x/y'", ctx)


# ------------------------------------------------------------------------- the matrix


def test_build_matrix_comes_from_the_matrix_file(tmp_path):
    """build.yml's matrix job emits exactly docker/matrix.yaml's entries (all, or the pr: true ones)."""
    jobs = DOCS["build.yml"]["jobs"]
    emit = [s for s in jobs["matrix"]["steps"] if "scripts.workflow_inputs matrix" in s.get("run", "")]
    assert len(emit) == 1 and emit[0]["id"] == "matrix"
    assert jobs["matrix"]["outputs"]["matrix"] == "${{ steps.matrix.outputs.matrix }}"
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    assert "make docker-build" in " ".join(s.get("run", "") for s in jobs["build"]["steps"])

    raw = yaml.safe_load((wf.REPO_ROOT / "docker" / "matrix.yaml").read_text())["entries"]
    for pr_only in (False, True):
        out = tmp_path / f"out-{pr_only}"
        env = {"MATRIX_PR_ONLY": str(pr_only).lower(), "GITHUB_OUTPUT": str(out)}
        proc = subprocess.run(
            [sys.executable, "-m", "scripts.workflow_inputs", "matrix"],
            cwd=wf.REPO_ROOT, env={**_base_env(), **env}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
        include = json.loads(outputs["matrix"])["include"]
        want = [e for e in raw if e["pr"] or not pr_only]
        got = [{k: e[k] for k in ("torch", "rocm", "image", "digest", "python", "pr")} for e in include]
        assert got == [{k: e[k] for k in ("torch", "rocm", "image", "digest", "python", "pr")} for e in want]
        assert int(outputs["count"]) == len(want)
        for e in include:
            assert e["image_ref"].startswith(e["image"])
            assert e["variant"].startswith("torch") and e["variant"].endswith("-x86_64-linux")
        assert len({e["variant"] for e in include}) == len(include), "artifact names must be unique"
        # Byte for byte what `python -m scripts.matrix --format github` prints.
        direct = subprocess.run(
            [sys.executable, "-m", "scripts.matrix", "--format", "github", *(["--pr-only"] if pr_only else [])],
            cwd=wf.REPO_ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert direct.stdout.strip() == outputs["matrix"]


def _base_env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "MATRIX_", "INPUT_"))}
