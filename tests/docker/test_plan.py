"""scripts.docker_build planning, without a Docker engine."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from scripts import docker_build as db
from scripts import matrix


def _entries() -> list[matrix.Entry]:
    # Synthetic versions: the real lists live only in docker/matrix.yaml.
    def e(t, r, pr, digest=None):
        return {
            "torch": t,
            "rocm": r,
            "python": "3.12",
            "pr": pr,
            "digest": digest,
            "checked": "test",
            "image": f"rocm/pytorch:rocm{r}_ubuntu24.04_py3.12_pytorch_release_{t}",
        }

    return matrix.parse(
        {
            "schema": 1,
            "entries": [
                e("3.5.0", "11.2", False),
                e("3.4.0", "11.2", True, "sha256:" + "ab" * 32),
                e("3.4.0", "11.3", False),
            ],
        }
    )


def test_plan_all_entries(tmp_path):
    jobs = db.plan(_entries(), out=tmp_path)
    assert [j.name for j in jobs] == ["torch3.5-rocm11.2", "torch3.4-rocm11.2", "torch3.4-rocm11.3"]
    by = {j.name: j for j in jobs}
    pinned = by["torch3.4-rocm11.2"]
    # pulled by digest, recorded as tag@digest
    assert pinned.base_image == "rocm/pytorch@sha256:" + "ab" * 32
    assert pinned.image_ref == "rocm/pytorch:rocm11.2_ubuntu24.04_py3.12_pytorch_release_3.4.0@sha256:" + "ab" * 32
    assert pinned.expected_variant == "torch34-cxx11-rocm112-x86_64-linux"
    assert by["torch3.5-rocm11.2"].base_image == "rocm/pytorch:rocm11.2_ubuntu24.04_py3.12_pytorch_release_3.5.0"
    assert len({j.stage_dir for j in jobs}) == 3
    assert all(j.stage_dir.parent == tmp_path / ".docker" for j in jobs)
    # One log per entry, named after it in full: torch3.4-rocm11.2 and torch3.4-rocm11.3 must not share one.
    assert [j.log_path for j in jobs] == [tmp_path / ".docker" / f"{j.name}.log" for j in jobs]


def test_plan_filters(tmp_path):
    assert [j.name for j in db.plan(_entries(), torch="3.4", out=tmp_path)] == [
        "torch3.4-rocm11.2",
        "torch3.4-rocm11.3",
    ]
    assert [j.name for j in db.plan(_entries(), torch="3.4", rocm="11.3", out=tmp_path)] == ["torch3.4-rocm11.3"]
    with pytest.raises(matrix.MatrixError, match="--rocm"):
        db.plan(_entries(), rocm="12.0", out=tmp_path)


def test_base_image_override_replaces_one_entry(tmp_path):
    (job,) = db.plan(_entries(), base_image="local/standin:abc", out=tmp_path)
    assert job.name == "torch3.4-rocm11.2"  # the default (first pr) entry
    assert job.base_image == job.image_ref == "local/standin:abc"
    assert job.expected_variant is None  # whatever the torch inside names
    (job,) = db.plan(_entries(), torch="3.5", base_image="x:y", out=tmp_path)
    assert job.name == "torch3.5-rocm11.2"
    with pytest.raises(db.DockerBuildError, match="--base-image"):
        db.plan(_entries(), torch="3.4", base_image="x:y", out=tmp_path)


def test_builder_tag_depends_on_every_input():
    files = {"docker/Dockerfile": b"FROM x\n", "requirements/build.txt": b"a==1\n", "docker/requirements.txt": b""}
    t = db.builder_tag(files, "sha256:1")
    assert t.startswith("gemm-builder:") and len(t.split(":")[1]) == 16
    assert db.builder_tag(dict(files), "sha256:1") == t
    assert db.builder_tag(files, "sha256:2") != t
    for k in files:
        changed = dict(files)
        changed[k] += b"# edit\n"
        assert db.builder_tag(changed, "sha256:1") != t


def test_context_tar_holds_exactly_the_files():
    files = {"docker/Dockerfile": b"FROM x\n", "requirements/build.txt": b"a==1\n"}
    with tarfile.open(fileobj=io.BytesIO(db.context_tar(files))) as tar:
        assert sorted(tar.getnames()) == sorted(files)
        assert tar.extractfile("docker/Dockerfile").read() == b"FROM x\n"


def test_context_files_are_the_real_ones():
    files = db.context_files()
    assert set(files) == set(db.CONTEXT_FILES)
    with pytest.raises(db.DockerBuildError, match="missing"):
        db.context_files(Path("/nonexistent"))


def test_build_command_passes_image_provenance():
    cmd = db.build_command("img:tag@sha256:" + "0" * 64, "sha256:" + "1" * 64)
    assert cmd[:3] == ["python3", "-m", "scripts.build"]
    assert cmd[cmd.index("--out") + 1] == "/out"
    assert cmd[cmd.index("--image-ref") + 1] == "img:tag@sha256:" + "0" * 64
    assert cmd[cmd.index("--image-digest") + 1] == "sha256:" + "1" * 64
    assert "--loaders" in cmd  # every container build is loaded with each listed kernels release


def test_find_variant(tmp_path):
    (tmp_path / ".obj").mkdir()
    v = tmp_path / "torch34-cxx11-cpu-x86_64-linux"
    v.mkdir()
    with pytest.raises(db.DockerBuildError, match="none"):
        db.find_variant(tmp_path)
    (v / "metadata.json").write_text("{}")
    assert db.find_variant(tmp_path) == v
    assert db.find_variant(tmp_path, "/out/torch34-cxx11-cpu-x86_64-linux") == v
    w = tmp_path / "torch35-cxx11-cpu-x86_64-linux"
    w.mkdir()
    (w / "metadata.json").write_text("{}")
    assert db.find_variant(tmp_path, "/out/" + w.name) == w
    with pytest.raises(db.DockerBuildError, match="expected one"):
        db.find_variant(tmp_path, "garbage")


def test_abi_summary_and_table():
    assert db.abi_summary({}) == "not checked"
    ok = {"checks": {"abi": {"ok": True, "manylinux": "manylinux_2_28", "files": {}}}}
    assert db.abi_summary(ok) == "ok (manylinux_2_28)"
    bad = {
        "checks": {
            "abi": {
                "ok": False,
                "manylinux": "manylinux_2_28",
                "files": {
                    "a.so": {"manylinux_violations": ["GLIBC_2.32", "GLIBCXX_3.4.30"], "python_abi_violations": ["x"]}
                },
            }
        }
    }
    assert db.abi_summary(bad) == "FAIL (3 violations of manylinux_2_28/abi3)"
    job = db.Job("e1", "b", "b", None, Path("/x"), Path("/x.log"))
    table = db.summary_table(
        [db.Result(job, ok=True, variant="v1", abi="ok", seconds=12.3), db.Result(job, ok=False, error="boom")]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["entry", "variant", "abi", "result", "time"]
    assert "v1" in lines[2] and "12s" in lines[2] and "ok" in lines[2]
    assert "FAILED" in lines[3]
    json.dumps([r.__dict__ for r in []])


def test_missing_engine_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(db.DockerBuildError, match="no Docker engine reachable at unix:///nonexistent"):
        db.Engine(timeout=5)


class _Image:
    def __init__(self, image_id: str, repo_digests: list[str]):
        self.id = image_id
        self.attrs = {"RepoDigests": repo_digests}


class FakeEngine:
    """Stands in for the Docker engine: the container 'writes' a variant as the build stage would."""

    def __init__(self, variant: str, code: int = 0, abi_ok: bool = True, repo_digests=None):
        self.variant, self.code, self.abi_ok = variant, code, abi_ok
        self.repo_digests = repo_digests if repo_digests is not None else []
        self.calls: list[tuple] = []

    def base(self, ref, name, t0):
        self.calls.append(("base", ref))
        return _Image("sha256:" + "1" * 64, self.repo_digests)

    def builder(self, base_ref, base_id, files, name, t0):
        self.calls.append(("builder", base_ref, base_id))
        return db.builder_tag(files, base_id)

    def run_build(self, job, tag, image_digest, ccache_dir, t0):
        self.calls.append(("run", job.image_ref, image_digest, tag))
        assert ccache_dir.is_dir() and job.stage_dir.is_dir() and not any(job.stage_dir.iterdir())
        variant = self.variant or job.expected_variant
        v = job.stage_dir / variant
        v.mkdir()
        (v / "x.so").write_bytes(b"\0")
        meta = {
            "build": {"image": {"ref": job.image_ref, "digest": image_digest}},
            "checks": {
                "abi": {
                    "ok": self.abi_ok,
                    "manylinux": "manylinux_2_28",
                    "files": {
                        "x.so": {"manylinux_violations": [] if self.abi_ok else ["a"], "python_abi_violations": []}
                    },
                }
            },
        }
        (v / "metadata.json").write_text(json.dumps(meta))
        return self.code, f"/out/{variant}"


FILES = {"docker/Dockerfile": b"FROM x\n", "requirements/build.txt": b"", "docker/requirements.txt": b""}


def test_run_job_collects_the_variant_and_records_the_digest(tmp_path):
    (job,) = [j for j in db.plan(_entries(), out=tmp_path) if j.name == "torch3.4-rocm11.2"]
    (tmp_path / job.expected_variant).mkdir()
    (tmp_path / job.expected_variant / "stale").write_text("old build")
    pulled = "rocm/pytorch@sha256:" + "ab" * 32
    eng = FakeEngine(job.expected_variant, repo_digests=[pulled])
    res = db.run_job(eng, job, FILES, tmp_path, tmp_path / "cc")
    assert res.ok, res.error
    assert res.variant == job.expected_variant and res.abi == "ok (manylinux_2_28)"
    final = tmp_path / job.expected_variant
    assert not (final / "stale").exists() and (final / "x.so").is_file()  # replaced, not merged
    meta = json.loads((final / "metadata.json").read_text())
    assert meta["build"]["image"] == {"ref": job.image_ref, "digest": "sha256:" + "ab" * 32}
    assert not job.stage_dir.exists()
    assert [c[0] for c in eng.calls] == ["base", "builder", "run"]


def test_run_job_local_image_digest_is_its_id(tmp_path):
    (job,) = db.plan(_entries(), base_image="local/standin:1", out=tmp_path)
    eng = FakeEngine("torch34-cxx11-cpu-x86_64-linux", abi_ok=False)
    res = db.run_job(eng, job, FILES, tmp_path, tmp_path / "cc")
    assert res.ok and res.abi_ok is False and res.abi.startswith("FAIL (1 ")
    meta = json.loads((tmp_path / res.variant / "metadata.json").read_text())
    assert meta["build"]["image"] == {"ref": "local/standin:1", "digest": "sha256:" + "1" * 64}


def test_run_job_failures_are_named(tmp_path):
    (job,) = [j for j in db.plan(_entries(), out=tmp_path) if j.name == "torch3.5-rocm11.2"]
    res = db.run_job(FakeEngine("torch35-cxx11-rocm999-x86_64-linux"), job, FILES, tmp_path, tmp_path / "cc")
    assert not res.ok and "matrix entry expects torch35-cxx11-rocm112-x86_64-linux" in res.error
    assert not (tmp_path / "torch35-cxx11-rocm999-x86_64-linux").exists()
    res = db.run_job(FakeEngine(job.expected_variant, code=3), job, FILES, tmp_path, tmp_path / "cc")
    assert not res.ok and "exited 3" in res.error and str(job.log_path) in res.error


def test_main_runs_entries_in_parallel_and_fails_on_any(tmp_path, monkeypatch, capsys):
    import threading

    active, peak, lock = [0], [0], threading.Lock()

    class SlowEngine(FakeEngine):
        def run_build(self, job, *a):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            import time

            time.sleep(0.3)
            with lock:
                active[0] -= 1
            return super().run_build(job, *a)

    monkeypatch.setattr(db.matrix, "load", _entries)
    monkeypatch.setattr(db, "Engine", lambda: SlowEngine(""))
    monkeypatch.setattr(db, "context_files", lambda: FILES)
    out = tmp_path / "build"
    summary = tmp_path / "s.json"
    monkeypatch.setattr(
        sys,
        "argv",
        ["x", "--jobs", "3", "--out", str(out), "--ccache-dir", str(tmp_path / "cc"), "--summary-json", str(summary)],
    )
    assert db.main() == 0
    assert peak[0] >= 2
    rows = json.loads(summary.read_text())
    assert [r["entry"] for r in rows] == ["torch3.5-rocm11.2", "torch3.4-rocm11.2", "torch3.4-rocm11.3"]
    assert all(r["ok"] for r in rows)
    assert "torch34-cxx11-rocm113-x86_64-linux" in capsys.readouterr().err  # the summary table
    monkeypatch.setattr(db, "Engine", lambda: FakeEngine("", code=4))
    with pytest.raises(db.DockerBuildError, match="torch3.4-rocm11.3.*exited 4"):
        db.main()
    monkeypatch.setattr(sys, "argv", ["x", "--jobs", "0"])
    with pytest.raises(db.DockerBuildError, match="--jobs"):
        db.main()


def test_require_abi_fails_only_the_entries_that_break_it(tmp_path, monkeypatch):
    """Without --require-abi an ABI violation is reported and the build passes (the publisher refuses the
    variant later); with it, that entry fails, named, and the others still count as built."""

    class OneBadEngine(FakeEngine):
        def run_build(self, job, *a):
            self.abi_ok = job.name != "torch3.4-rocm11.3"
            return super().run_build(job, *a)

    monkeypatch.setattr(db.matrix, "load", _entries)
    monkeypatch.setattr(db, "Engine", lambda: OneBadEngine(""))
    monkeypatch.setattr(db, "context_files", lambda: FILES)
    summary = tmp_path / "s.json"
    argv = ["x", "--out", str(tmp_path / "build"), "--ccache-dir", str(tmp_path / "cc"), "--summary-json", str(summary)]
    monkeypatch.setattr(sys, "argv", argv)
    assert db.main() == 0
    assert [r["abi_ok"] for r in json.loads(summary.read_text())] == [True, True, False]
    monkeypatch.setattr(sys, "argv", [*argv, "--require-abi"])
    with pytest.raises(db.DockerBuildError, match=r"^\[torch3.4-rocm11.3\] torch34-cxx11-rocm113-x86_64-linux: ABI"):
        db.main()
    assert [r["ok"] for r in json.loads(summary.read_text())] == [True, True, False]


class _BlockingContainer:
    """A build that runs until killed or removed: its log stream blocks until then."""

    def __init__(self):
        import threading

        self.ended = threading.Event()
        self.calls: list[str] = []

    def logs(self, stream=False, follow=False, stdout=True, stderr=True):
        if stream:
            return self._stream()
        return b"last line\n"

    def _stream(self):
        yield b"compiling\n"
        self.ended.wait(30)

    def wait(self):
        return {"StatusCode": 137 if "kill" in self.calls else 0}

    def kill(self):
        self.calls.append("kill")
        self.ended.set()

    def remove(self, force=False):
        self.calls.append("remove")
        self.ended.set()


class _Client:
    def __init__(self, container):
        self.containers, self.container, self.run_kwargs = self, container, None

    def run(self, *args, **kwargs):
        self.run_kwargs = kwargs
        return self.container


def test_a_build_container_past_its_time_is_killed_and_removed(tmp_path):
    import docker.errors

    container = _BlockingContainer()
    engine = object.__new__(db.Engine)  # no engine needed: the client is a stand-in
    engine.client, engine.errors, engine.build_timeout_s = _Client(container), docker.errors, 0.3
    job = db.plan(_entries(), out=tmp_path)[0]
    job.stage_dir.mkdir(parents=True)
    with pytest.raises(db.DockerBuildError, match=r"ran past 0.005 min: killed"):
        engine.run_build(job, "builder:tag", "sha256:" + "1" * 64, tmp_path, 0.0)
    assert container.calls == ["kill", "remove"]
    assert engine.client.run_kwargs["labels"] == {db.LABEL_SESSION: engine.session}


def test_sigterm_removes_this_runs_build_containers_at_once(tmp_path, monkeypatch):
    """A CI cancel sends SIGINT, then SIGTERM: the run removes its own labelled containers and fails at
    once, instead of waiting for the builds (or dying with them left running)."""
    import os
    import signal
    import threading

    released, recorded = threading.Event(), threading.Event()
    woke = []  # per build: True when its container's removal ended it, False when it ran out its 20 s

    class CancelledEngine(FakeEngine):
        removed = 0

        def run_build(self, job, *a):
            os.kill(os.getpid(), signal.SIGTERM)  # the cancel arrives mid-build
            woke.append(released.wait(20))  # the build runs on until its container is removed
            recorded.set()
            return super().run_build(job, *a)

        def remove_session_containers(self):
            CancelledEngine.removed += 1
            released.set()
            return 1

    monkeypatch.setattr(db.matrix, "load", lambda: _entries()[:1])
    monkeypatch.setattr(db, "Engine", lambda: CancelledEngine(""))
    monkeypatch.setattr(db, "context_files", lambda: FILES)
    monkeypatch.setattr(sys, "argv", ["x", "--out", str(tmp_path / "build"), "--ccache-dir", str(tmp_path / "cc")])
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(db.DockerBuildError, match=r"interrupted: removed this run's 1 build container"):
        db.main()
    assert CancelledEngine.removed == 1
    # The run fails without waiting for its build thread: wait for that thread's own record here.
    assert recorded.wait(30)
    assert woke == [True], "the containers were removed only after the build had run its course"
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is the run's only
