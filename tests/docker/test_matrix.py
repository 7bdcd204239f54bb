"""docker/matrix.yaml: schema, pairs, tags, filters and the GitHub matrix (no Docker needed)."""

from __future__ import annotations

import copy
import json
import random
import re

import pytest
import yaml

from scripts import matrix


def _entry(torch: str, rocm: str, py: str = "3.12", pr: bool = True, digest: str | None = None) -> dict:
    # Synthetic versions (never the real matrix's): this file must not repeat the version lists.
    return {
        "torch": torch,
        "rocm": rocm,
        "python": py,
        "pr": pr,
        "digest": digest,
        "image": f"rocm/pytorch:rocm{rocm}_ubuntu24.04_py{py}_pytorch_release_{torch}",
        "checked": "synthetic test entry",
    }


def _doc(*entries: dict) -> dict:
    return {"schema": 1, "entries": list(entries)}


def _rand_pair(rng: random.Random) -> tuple[str, str]:
    return f"{rng.randint(3, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}", f"{rng.randint(11, 19)}.{rng.randint(0, 9)}"


def test_real_matrix_is_valid_and_variants_use_kernels_classes():
    entries = matrix.load()
    assert entries, "docker/matrix.yaml has no entries"
    assert any(e.pr for e in entries)
    from kernels._internals.variants import parse_variant

    for e in entries:
        v = e.variant
        assert v.startswith(f"torch{e.torch_mm.replace('.', '')}-cxx11-rocm") and v.endswith("-x86_64-linux")
        # the loader's own parser accepts the name and reads back the torch and ROCm versions
        parsed = parse_variant(v)
        assert parsed.variant_str == v
        assert str(parsed.framework.version) == e.torch_mm
        assert str(parsed.backend.version) == e.rocm  # rocm714 is 7.14 (kernels 0.18 read 71.4)
        assert e.image in e.image_ref and (e.digest is None or e.image_ref.endswith("@" + e.digest))


def test_random_valid_documents_round_trip(seeds):
    rng = random.Random(next(seeds))  # the session's GEMM_TEST_SEED (pytest's header) repeats the draw
    pairs = set()
    while len(pairs) < rng.randint(2, 6):
        t, r = _rand_pair(rng)
        if all(t.rsplit(".", 1)[0] != p[0].rsplit(".", 1)[0] or r != p[1] for p in pairs):
            pairs.add((t, r))
    docs = [
        _entry(t, r, pr=(i == 0), digest=f"sha256:{rng.getrandbits(256):064x}" if rng.random() < 0.5 else None)
        for i, (t, r) in enumerate(sorted(pairs))
    ]
    entries = matrix.parse(_doc(*docs))
    assert [(e.torch, e.rocm) for e in entries] == sorted(pairs)
    gh = matrix.github_matrix(entries)
    assert json.loads(json.dumps(gh)) == gh
    assert [i["variant"] for i in gh["include"]] == [e.variant for e in entries]
    assert all(i["image_ref"].startswith(i["image"]) for i in gh["include"])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["entries"][0].pop("python"), "missing field"),
        (lambda d: d["entries"][0].update(extra=1), "unknown field"),
        (lambda d: d["entries"][0].update(torch=3.4), "wrong type"),
        (lambda d: d["entries"][0].update(torch="3.4"), "full release"),
        (lambda d: d["entries"][0].update(rocm="11"), "major.minor"),
        (lambda d: d["entries"][0].update(image="rocm/pytorch:latest"), "does not follow"),
        (
            lambda d: d["entries"][0].update(image="other/pytorch:rocm11.2_ubuntu24.04_py3.12_pytorch_release_3.4.0"),
            "rocm/pytorch:<tag>",
        ),
        (lambda d: d["entries"][0].update(torch="3.5.0"), "tag carries torch"),
        (lambda d: d["entries"][0].update(rocm="11.3"), "tag carries ROCm"),
        (lambda d: d["entries"][0].update(python="3.10"), "tag carries python"),
        (lambda d: d["entries"][0].update(digest="sha256:abc"), "sha256:<64 hex>"),
        (lambda d: d["entries"][0].update(image=d["entries"][0]["image"] + "@sha256:" + "0" * 64), "digest field"),
        (lambda d: d["entries"][0].update(checked=" "), "checked"),
        (lambda d: d["entries"].append(copy.deepcopy(d["entries"][0])), "duplicate pair"),
        (lambda d: d["entries"].append(_entry("3.4.1", "11.2")), "duplicate pair"),
        (lambda d: [e.update(pr=False) for e in d["entries"]], "pr: true"),
        (lambda d: d.update(schema=2), "schema"),
        (lambda d: d.update(entries=[]), "non-empty"),
        (lambda d: d.update(extra=[]), "unknown top-level"),
    ],
)
def test_invalid_documents_are_rejected_with_a_named_field(mutate, message):
    doc = _doc(_entry("3.4.0", "11.2"), _entry("3.5.0", "11.2", pr=False))
    mutate(doc)
    with pytest.raises(matrix.MatrixError, match=re.escape(message)):
        matrix.parse(doc)


def test_patch_level_rocm_tag_is_accepted():
    e = _entry("3.4.0", "11.2")
    e["image"] = "rocm/pytorch:rocm11.2.3_ubuntu22.04_py3.10_pytorch_release_3.4.0"
    e["python"] = "3.10"
    (entry,) = matrix.parse(_doc(e))
    assert entry.variant == "torch34-cxx11-rocm112-x86_64-linux"


def test_select_filters_and_errors_name_the_argument():
    entries = matrix.parse(
        _doc(_entry("3.4.0", "11.2"), _entry("3.4.0", "11.3", pr=False), _entry("3.5.0", "11.3", pr=False))
    )
    assert matrix.select(entries) == entries
    assert [e.rocm for e in matrix.select(entries, torch="3.4")] == ["11.2", "11.3"]
    assert [e.rocm for e in matrix.select(entries, torch="3.4.0", rocm="rocm11.3")] == ["11.3"]
    assert [e.torch for e in matrix.select(entries, rocm="11.3.1")] == ["3.4.0", "3.5.0"]
    assert [e.key for e in matrix.select(entries, pr_only=True)] == ["torch3.4-rocm11.2"]
    with pytest.raises(matrix.MatrixError, match="--torch"):
        matrix.select(entries, torch="3.9")
    with pytest.raises(matrix.MatrixError, match="--torch"):
        matrix.select(entries, torch="three")
    with pytest.raises(matrix.MatrixError, match="--rocm"):
        matrix.select(entries, torch="3.5", rocm="11.2")
    with pytest.raises(matrix.MatrixError, match="--pr-only"):
        matrix.select(entries, torch="3.5", pr_only=True)
    assert matrix.default_entry(entries).key == "torch3.4-rocm11.2"


def test_cli_github_format(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_doc(_entry("3.4.0", "11.2"), _entry("3.5.0", "11.2", pr=False))))
    assert matrix.main(["--file", str(path), "--format", "github", "--pr-only"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [i["key"] for i in out["include"]] == ["torch3.4-rocm11.2"]
    assert out["include"][0]["variant"] == "torch34-cxx11-rocm112-x86_64-linux"
    assert matrix.main(["--file", str(path), "--torch", "9.9"]) == 2
    assert "--torch" in capsys.readouterr().err
    path.write_text("entries: [")
    assert matrix.main(["--file", str(path)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
