"""actionlint (with shellcheck) and zizmor pass on our workflows, and do catch what they are for.

The real tools run; a missing tool fails (they come with requirements/dev.txt and shellcheck with
.ci/apt-packages.txt). Each tool is also pointed at a copy of .github with one planted problem,
so a green result means "checked and clean", not "nothing was checked".
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import lint
from tests.workflows import wf


def _copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(wf.REPO_ROOT / ".github", root / ".github")
    subprocess.run(["git", "init", "-q", str(root)], check=True)  # actionlint looks for the repo root
    return root


def test_actionlint_with_shellcheck_has_no_findings():
    cmd = lint.actionlint_command(wf.REPO_ROOT)
    assert "-shellcheck" in cmd and Path(cmd[cmd.index("-shellcheck") + 1]).name == "shellcheck"
    result = lint.lint_actionlint(wf.REPO_ROOT)
    assert result.status == "ok", result


def test_zizmor_offline_has_no_findings():
    cmd = lint.zizmor_command(wf.REPO_ROOT)
    assert "--offline" in cmd
    result = lint.lint_zizmor(wf.REPO_ROOT)
    assert result.status == "ok", result


def test_actionlint_catches_shell_and_label_problems(tmp_path):
    root = _copy_repo(tmp_path)
    ci = root / ".github/workflows/ci.yml"
    ci.write_text(ci.read_text().replace("run: make lint", "run: make lint $UNQUOTED_VAR"))
    assert lint.lint_actionlint(root).status == "failed"  # shellcheck SC2086 through actionlint
    ci.write_text((wf.WORKFLOWS / "ci.yml").read_text())
    gpu = root / ".github/workflows/gpu-test.yml"
    gpu.write_text(gpu.read_text().replace("linux-mi300x-gpu-1]", "linux-mi300x-gpu-9]"))
    assert lint.lint_actionlint(root).status == "failed"  # undeclared runner label


def test_zizmor_catches_injection_and_persisted_credentials(tmp_path):
    root = _copy_repo(tmp_path)
    dispatch = root / ".github/workflows/dispatch.yml"
    text = dispatch.read_text()
    dispatch.write_text(text.replace("run: .venv/bin/python -m scripts.workflow_inputs dispatch",
                                     "run: echo ${{ inputs.repo }}"))  # fmt: skip
    assert lint.lint_zizmor(root).status == "failed"
    dispatch.write_text(text.replace("persist-credentials: false", "fetch-depth: 1"))  # artipacked
    assert lint.lint_zizmor(root).status == "failed"


def test_hadolint_is_skipped_only_without_a_dockerfile(tmp_path):
    result = lint.lint_hadolint(tmp_path)
    assert result.status == "skipped" and "does not exist" in result.detail
    if (wf.REPO_ROOT / lint.DOCKERFILE).is_file():
        assert lint.lint_hadolint(wf.REPO_ROOT).status in ("ok", "failed", "missing")


def test_only_option_names_the_bad_linter():
    with pytest.raises(SystemExit) as exc:
        lint.main(["--only", "ruff,pylint"])
    assert exc.value.code == 2
    assert lint.main(["--list"]) == 0


def test_missing_tool_is_reported_not_skipped(monkeypatch, tmp_path):
    monkeypatch.setattr(lint.shutil, "which", lambda name: None)
    monkeypatch.setattr(lint.sys, "executable", str(tmp_path / "bin" / "python"))
    (results,) = lint.run_linters(["actionlint"], root=wf.REPO_ROOT)
    assert results.status == "missing" and "actionlint not found" in results.detail


def test_shellcheck_covers_the_repositorys_scripts_and_catches_a_planted_problem(tmp_path):
    files = {str(f) for f in lint.shell_scripts(wf.REPO_ROOT)}
    assert {".ci/run", ".ci/system-deps", ".ci/cuda-toolkit", "scripts/device_run.sh"} <= files
    assert ".ci/apt-packages.txt" not in files
    assert lint.lint_shellcheck(wf.REPO_ROOT).status == "ok"
    root = tmp_path / "repo"
    (root / ".ci").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / ".ci/run").write_text("#!/usr/bin/env bash\nset -eu\nrm -rf $1/x\n")  # SC2086: unquoted
    assert lint.lint_shellcheck(root).status == "failed"
    (root / ".ci/run").write_text('#!/usr/bin/env bash\nset -eu\nrm -rf "$1/x"\n')
    assert lint.lint_shellcheck(root).status == "ok"
