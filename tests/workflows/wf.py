"""Helpers for reading the workflow graph: load workflows, resolve reusable-workflow calls, evaluate
the small subset of GitHub expressions our job conditions use."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    # PyYAML reads the bare key `on` as the boolean True.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def all_workflows() -> dict[str, dict[str, Any]]:
    return {p.name: load(p) for p in sorted(WORKFLOWS.glob("*.yml"))}


def triggers(doc: Mapping[str, Any]) -> dict[str, Any]:
    on = doc["on"]
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on)


def local_callee(uses: str) -> str | None:
    """File name of a same-repository reusable workflow (`$/.github/workflows/x.yml` or `./...`)."""
    m = re.fullmatch(r"(?:\$|\.)/\.github/workflows/([\w.-]+\.ya?ml)", uses)
    return m[1] if m else None


def self_hosted_labels() -> set[str]:
    cfg = yaml.safe_load((REPO_ROOT / ".github" / "actionlint.yaml").read_text())
    return set(cfg["self-hosted-runner"]["labels"]) | {"self-hosted"}


def runs_on_labels(job: Mapping[str, Any]) -> set[str]:
    runs_on = job.get("runs-on")
    if runs_on is None:
        return set()
    if isinstance(runs_on, str):
        return {runs_on}
    if isinstance(runs_on, list):
        return set(runs_on)
    return set(runs_on.get("labels", [])) | ({runs_on["group"]} if "group" in runs_on else set())


@dataclass(frozen=True)
class JobRef:
    """A job as it runs: `chain` is the list of (workflow, job id) from the top-level workflow down."""

    chain: tuple[tuple[str, str], ...]
    job: Mapping[str, Any]

    @property
    def name(self) -> str:
        return " -> ".join(f"{w}:{j}" for w, j in self.chain)

    def conditions(self, docs: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Every `if:` on the way down (caller jobs first)."""
        return [cond for w, j in self.chain if (cond := docs[w]["jobs"][j].get("if")) is not None]


def expand(workflow: str, docs: Mapping[str, Mapping[str, Any]], chain: tuple = ()) -> Iterator[JobRef]:
    """Every job that runs when `workflow` runs, reusable calls expanded (depth-first)."""
    for job_id, job in docs[workflow]["jobs"].items():
        here = (*chain, (workflow, job_id))
        callee = local_callee(job.get("uses", ""))
        if callee is not None:
            yield JobRef(here, job)
            yield from expand(callee, docs, here)
        else:
            yield JobRef(here, job)


def needs(job: Mapping[str, Any]) -> list[str]:
    n = job.get("needs", [])
    return [n] if isinstance(n, str) else list(n)


def transitive_needs(jobs: Mapping[str, Mapping[str, Any]], job_id: str) -> set[str]:
    seen: set[str] = set()
    todo = needs(jobs[job_id])
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo.extend(needs(jobs[j]))
    return seen


# ---------------------------------------------------------------------------------------------
# A deliberately tiny evaluator for job `if:` conditions. It knows string literals, ==, !=, !,
# &&, ||, parentheses, the status functions, and the context names passed in. Anything else
# raises, so a new kind of condition on a self-hosted job must be taught here (and reviewed).

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\))|(?P<func>[A-Za-z_]\w*)\(\)"
    r"|(?P<name>[A-Za-z_][\w.-]*)|(?P<bad>\S))"
)
STATUS_FUNCS = {"success": True, "always": True, "failure": False, "cancelled": False}


class ExpressionError(ValueError):
    pass


def evaluate(expr: str, context: Mapping[str, str | bool]) -> bool:
    text = expr.strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]
    tokens: list[tuple[str, Any]] = []
    for m in _TOKEN.finditer(text):
        if m["bad"]:
            raise ExpressionError(f"unsupported token {m['bad']!r} in {expr!r}")
        if m["str"] is not None:
            tokens.append(("val", m["str"][1:-1].replace("''", "'")))
        elif m["op"]:
            tokens.append(("op", m["op"]))
        elif m["func"]:
            if m["func"] not in STATUS_FUNCS:
                raise ExpressionError(f"unsupported function {m['func']}() in {expr!r}")
            tokens.append(("val", STATUS_FUNCS[m["func"]]))
        else:
            if m["name"] not in context:
                raise ExpressionError(f"unknown context value {m['name']} in {expr!r}")
            tokens.append(("val", context[m["name"]]))
    pos = 0

    def peek() -> tuple[str, Any] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> tuple[str, Any]:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        return tok

    def parse_or() -> Any:
        left = parse_and()
        while peek() == ("op", "||"):
            take()
            right = parse_and()
            left = left or right
        return left

    def parse_and() -> Any:
        left = parse_cmp()
        while peek() == ("op", "&&"):
            take()
            right = parse_cmp()
            left = left and right
        return left

    def parse_cmp() -> Any:
        left = parse_unary()
        while peek() in (("op", "=="), ("op", "!=")):
            op = take()[1]
            right = parse_unary()
            left = (left == right) if op == "==" else (left != right)
        return left

    def parse_unary() -> Any:
        tok = take()
        if tok == ("op", "!"):
            return not parse_unary()
        if tok == ("op", "("):
            value = parse_or()
            if take() != ("op", ")"):
                raise ExpressionError(f"unbalanced parentheses in {expr!r}")
            return value
        if tok[0] == "val":
            return tok[1]
        raise ExpressionError(f"unexpected {tok[1]!r} in {expr!r}")

    result = parse_or()
    if pos != len(tokens):
        raise ExpressionError(f"trailing tokens in {expr!r}")
    return bool(result)
