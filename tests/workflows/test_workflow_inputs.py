"""scripts.workflow_inputs: what dispatch inputs, tags, matrix filters and tested builds it accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scripts import workflow_inputs as wi
from tests.workflows import wf

MANIFEST = wf.REPO_ROOT / "build.toml"
MATRIX = yaml.safe_load((wf.REPO_ROOT / "docker" / "matrix.yaml").read_text())["entries"]


def manifest(tmp_path: Path, version: object = 3, repo: str | None = "org/gemm") -> Path:
    hub = f'\n[general.hub]\nrepo-id = "{repo}"\n' if repo is not None else ""
    path = tmp_path / "build.toml"
    path.write_text(f'[general]\nname = "gemm"\nversion = {json.dumps(version)}\n{hub}')
    return path


def test_dispatch_defaults_come_from_build_toml(tmp_path):
    values = wi.validate_dispatch({}, manifest(tmp_path))
    assert values == {"torch": "", "rocm": "", "upload": "false", "repo": "org/gemm", "branch": "v3"}


def test_dispatch_accepts_filters_that_select_matrix_entries(tmp_path):
    entry = MATRIX[0]
    torch_mm = ".".join(entry["torch"].split(".")[:2])
    env = {"INPUT_TORCH": f" {torch_mm} ", "INPUT_ROCM": entry["rocm"], "INPUT_UPLOAD": "TRUE",
           "INPUT_REPO": "my-org/gemm.dev", "INPUT_BRANCH": "v3"}  # fmt: skip
    values = wi.validate_dispatch(env, manifest(tmp_path))
    assert values == {"torch": torch_mm, "rocm": entry["rocm"], "upload": "true",
                      "repo": "my-org/gemm.dev", "branch": "v3"}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("INPUT_TORCH", "2.13; rm -rf /", "major.minor"),
        ("INPUT_TORCH", "2.13,2.12", "major.minor"),
        ("INPUT_TORCH", "9.99", "no matrix entry"),
        ("INPUT_ROCM", "$(id)", "major.minor"),
        ("INPUT_UPLOAD", "yes", "true or false"),
        ("INPUT_REPO", "gemm", "namespace/name"),
        ("INPUT_REPO", "org/gemm/extra", "namespace/name"),
        ("INPUT_REPO", "org/../gemm", "namespace/name"),
        ("INPUT_REPO", "org/gemm\n::set-output name=x::y", "namespace/name"),
        ("INPUT_BRANCH", "refs/heads/v3", "branch name"),
        ("INPUT_BRANCH", "v3..", "branch name"),
        ("INPUT_BRANCH", "v3 -f", "branch name"),
        ("INPUT_BRANCH", "main", "branch v3 only"),
    ],
)
def test_dispatch_rejects_bad_inputs_by_name(tmp_path, name, value, message):
    with pytest.raises(wi.InputError) as exc:
        wi.validate_dispatch({name: value}, manifest(tmp_path))
    assert name in str(exc.value) and message in str(exc.value)
    assert "\n" not in str(exc.value)  # an error line can never carry a workflow command


def test_dispatch_without_any_repo_is_refused(tmp_path):
    with pytest.raises(wi.InputError, match="INPUT_REPO: empty"):
        wi.validate_dispatch({}, manifest(tmp_path, repo=None))


@pytest.mark.parametrize("tag", ["v3", "v3.0.0", "v3.12.4"])
def test_tag_that_matches_the_version(tmp_path, tag):
    env = {"GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": tag}
    assert wi.validate_tag(env, manifest(tmp_path)) == {"version": "3", "tag": tag, "repo": "org/gemm", "branch": "v3"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GITHUB_REF_TYPE": "branch", "GITHUB_REF_NAME": "v3"}, "GITHUB_REF_TYPE"),
        ({"GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": "v4.0.0"}, "build.toml says version = 3"),
        ({"GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": "v3.1"}, "v1 or v1.2.3"),
        ({"GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": "3.0.0"}, "v1 or v1.2.3"),
        ({"GITHUB_REF_TYPE": "tag", "GITHUB_REF_NAME": "v3.0.0-rc1"}, "v1 or v1.2.3"),
    ],
)
def test_tag_disagreeing_with_build_toml_is_refused(tmp_path, env, message):
    with pytest.raises(wi.InputError, match=message.replace(".", r"\.")):
        wi.validate_tag(env, manifest(tmp_path))


@pytest.mark.parametrize("version", ["1", 1.5, True, -1])
def test_manifest_version_must_be_an_integer(tmp_path, version):
    with pytest.raises(wi.InputError, match="build.toml"):
        wi.read_manifest(manifest(tmp_path, version=version))


def test_the_repository_manifest_is_readable():
    version, repo = wi.read_manifest(MANIFEST)
    assert version >= 0 and "/" in repo


def test_matrix_filters(tmp_path):
    everything = json.loads(wi.emit_matrix({})["matrix"])["include"]
    assert len(everything) == len(MATRIX)
    pr = json.loads(wi.emit_matrix({"MATRIX_PR_ONLY": "true"})["matrix"])["include"]
    assert [e["image"] for e in pr] == [e["image"] for e in MATRIX if e["pr"]]
    rocm = MATRIX[-1]["rocm"]
    by_rocm = json.loads(wi.emit_matrix({"MATRIX_ROCM": rocm})["matrix"])["include"]
    assert by_rocm and all(e["rocm"] == rocm for e in by_rocm)
    with pytest.raises(wi.InputError, match="MATRIX_PR_ONLY"):
        wi.emit_matrix({"MATRIX_PR_ONLY": "1"})
    with pytest.raises(wi.InputError, match="no matrix entry"):
        wi.emit_matrix({"MATRIX_ROCM": "1.0"})


def _tested_build(tmp_path: Path, variants: dict[str, object]) -> Path:
    build = tmp_path / "build"
    for name, tests in variants.items():
        (build / name).mkdir(parents=True)
        checks = {} if tests is None else {"tests": tests}
        (build / name / "metadata.json").write_text(json.dumps({"checks": checks}))
    return build


def test_tested_requires_exactly_the_matrix_variants_all_passing(tmp_path):
    a, b = "torch299-cxx11-rocm98-x86_64-linux", "torch298-cxx11-rocm97-x86_64-linux"  # fictional
    env = {"MATRIX": json.dumps({"include": [{"variant": a}, {"variant": b}]})}
    ok = _tested_build(tmp_path / "ok", {a: {"ok": True}, b: {"ok": True}})
    assert wi.check_tested(env, ok) == {"tested": ",".join(sorted([a, b]))}
    missing = _tested_build(tmp_path / "missing", {a: {"ok": True}})
    with pytest.raises(wi.InputError, match=f"missing \\['{b}'\\]"):
        wi.check_tested(env, missing)
    c = "torch297-cxx11-rocm96-x86_64-linux"  # built but in no matrix entry, so never GPU-tested here
    extra = _tested_build(tmp_path / "extra", {a: {"ok": True}, b: {"ok": True}, c: {"ok": True}})
    with pytest.raises(wi.InputError, match=f"unexpected \\['{c}'\\]"):
        wi.check_tested(env, extra)
    failed = _tested_build(tmp_path / "failed", {a: {"ok": True}, b: {"ok": False}})
    with pytest.raises(wi.InputError, match=f"{b} has no passing GPU test"):
        wi.check_tested(env, failed)
    untested = _tested_build(tmp_path / "untested", {a: {"ok": True}, b: None})
    with pytest.raises(wi.InputError, match="no passing GPU test"):
        wi.check_tested(env, untested)
    with pytest.raises(wi.InputError, match="MATRIX"):
        wi.check_tested({"MATRIX": "not json"}, ok)


def test_main_writes_github_output_and_fails_with_the_input_name(tmp_path, capsys):
    out = tmp_path / "github_output"
    env = {"GITHUB_OUTPUT": str(out), "INPUT_UPLOAD": "false"}
    assert wi.main(["dispatch", "--manifest", str(manifest(tmp_path))], env=env) == 0
    assert "repo=org/gemm\n" in out.read_text() and "branch=v3\n" in out.read_text()
    env = {"INPUT_UPLOAD": "maybe", "GITHUB_ACTIONS": "true"}
    assert wi.main(["dispatch", "--manifest", str(manifest(tmp_path))], env=env) == 2
    err = capsys.readouterr().err
    assert "error: INPUT_UPLOAD: expected true or false" in err and "::error title=invalid input INPUT_UPLOAD::" in err


def test_outputs_are_single_lines():
    with pytest.raises(wi.InputError, match="single lines"):
        wi.write_outputs({"repo": "a\nb"}, {})
