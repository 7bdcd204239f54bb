"""A loopback stand-in for the Hugging Face Hub endpoints the publisher uses.

It speaks the HTTP API that huggingface_hub 2.4 calls (read from its source): repo creation, refs,
branches, tree listing, preupload, the git-LFS batch API plus a single-part PUT target, the ndjson
commit endpoint (with the parentCommit check), file resolution (HEAD/GET) and YAML validation.
State is in memory: repositories of git-like commits, each a full tree of blobs. Only `kernel`
repositories are served (URL prefix `kernels/`), since that is what the publisher writes.

Tests start it on 127.0.0.1 with `with HubStandin() as hub: HfApi(endpoint=hub.url, ...)`, inject
faults (`hub.inject("commit", 500, times=9)`), run hooks just before a route is handled
(`hub.before["commit"] = fn`) and inspect what happened (`hub.count("commit")`,
`hub.lfs_bytes_uploaded`, `hub.files(repo, "v1")`).

Xet is not emulated (its CAS protocol lives inside hf_xet); tests set HF_HUB_DISABLE_XET so the
client takes the git-LFS path, which goes through the same preupload step.

Assumptions where the Hub's behaviour is not documented: a kernel repository that still awaits
Hugging Face's approval is answered with 403 and a message mentioning "approval" (the publisher keys
on that word and mentions approval as a possible cause of any other 403 too); a stale
parent_commit gets 412 "A commit has happened since. Please refresh and try again." (as the Hub does).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from huggingface_hub.utils.sha import git_hash

LFS_THRESHOLD = 10 * 1024 * 1024
LFS_SUFFIXES = (".so", ".bin", ".safetensors")


@dataclass(frozen=True)
class Blob:
    data: bytes
    lfs: bool

    @property
    def sha1(self) -> str:
        return git_hash(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: str | None
    tree: dict[str, Blob]
    title: str
    description: str = ""


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)

    def resolve(self, rev: str) -> Commit | None:
        if rev in self.branches:
            return self.commits[self.branches[rev]]
        if rev in self.commits:
            return self.commits[rev]
        matches = [c for oid, c in self.commits.items() if len(rev) >= 7 and oid.startswith(rev)]
        return matches[0] if len(matches) == 1 else None


@dataclass
class Fault:
    route: str
    status: int
    times: int
    headers: dict[str, str]
    body: dict
    after: bool = False  # handle the request first, then answer with the fault (a lost response)


class HttpError(Exception):
    def __init__(
        self, status: int, message: str, code: str | None = None, headers: dict | None = None, extra: dict | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}
        self.extra = extra or {}


class HubStandin:
    """In-memory Hub. `tokens` maps a token to its user name and whether it may write."""

    def __init__(self, tokens: dict[str, dict] | None = None):
        self.tokens = tokens if tokens is not None else {"hf_write_token": {"user": "publisher", "write": True}}
        self.repos: dict[str, Repo] = {}
        self.lfs_store: dict[str, bytes] = {}
        self.lfs_bytes_uploaded = 0
        self.requests: list[tuple[str, str]] = []  # (method, route)
        self.faults: list[Fault] = []
        self.before: dict[str, callable] = {}
        self.approval_pending: set[str] = set()  # namespaces whose kernel repos await approval
        self.oidc_exchanges: list[dict] = []  # trusted-publishing token exchanges seen
        self.oidc_token = next((t for t, u in self.tokens.items() if u.get("write")), None)
        # GitHub Actions' id-token service, which a job with `id-token: write` reaches through
        # ACTIONS_ID_TOKEN_REQUEST_URL / ACTIONS_ID_TOKEN_REQUEST_TOKEN (served here at github_idtoken_url).
        self.github_request_token = "actions-runtime-request-token"
        self.github_audiences: list[str | None] = []  # audiences the id tokens were minted for
        self.lock = threading.RLock()
        self._counter = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> HubStandin:
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def github_idtoken_url(self) -> str:
        return f"{self.url}/_github/idtoken"

    # -- test helpers --------------------------------------------------------------------------
    def inject(
        self,
        route: str,
        status: int,
        times: int = 1,
        headers: dict | None = None,
        body: dict | None = None,
        after: bool = False,
    ):
        """Answer the next `times` requests to `route` with `status` instead of handling them
        (or, with after=True, after handling them: the change is made but the answer is lost)."""
        with self.lock:
            fault = Fault(route, status, times, headers or {}, body or {"error": f"injected {status}"}, after)
            self.faults.append(fault)

    def count(self, route: str, method: str | None = None) -> int:
        with self.lock:
            return sum(1 for m, r in self.requests if r == route and (method is None or m == method))

    def head(self, repo_id: str, branch: str) -> str | None:
        with self.lock:
            repo = self.repos.get(repo_id)
            return repo.branches.get(branch) if repo else None

    def branches(self, repo_id: str) -> dict[str, str]:
        with self.lock:
            return dict(self.repos[repo_id].branches)

    def files(self, repo_id: str, rev: str) -> dict[str, bytes]:
        with self.lock:
            commit = self.repos[repo_id].resolve(rev)
            assert commit is not None, rev
            return {p: b.data for p, b in commit.tree.items()}

    def commit_titles(self, repo_id: str, rev: str) -> list[str]:
        """Titles of `rev` (branch or commit) and its ancestors, newest first."""
        with self.lock:
            repo = self.repos[repo_id]
            commit = repo.resolve(rev)
            oid, titles = (commit.oid if commit else None), []
            while oid is not None:
                titles.append(repo.commits[oid].title)
                oid = repo.commits[oid].parent
            return titles

    def commit_description(self, repo_id: str, rev: str) -> str:
        with self.lock:
            return self.repos[repo_id].resolve(rev).description

    def create_repo(self, repo_id: str, private: bool = False) -> Repo:
        with self.lock:
            repo = Repo(repo_id, private)
            self.repos[repo_id] = repo
            root = self._new_commit(
                repo,
                None,
                {".gitattributes": Blob(b"*.so filter=lfs diff=lfs merge=lfs -text\n", False)},
                "initial commit",
            )
            repo.branches["main"] = root.oid
            return repo

    def commit_direct(
        self, repo_id: str, branch: str, add: dict[str, bytes], delete: tuple[str, ...] = (), title: str = "direct"
    ) -> str:
        """Commit as another writer would (no HTTP): used to simulate a concurrent publisher."""
        with self.lock:
            repo = self.repos[repo_id]
            parent = repo.commits[repo.branches[branch]]
            tree = dict(parent.tree)
            for p in delete:
                tree.pop(p, None)
            for p, data in add.items():
                tree[p] = Blob(data, p.endswith(LFS_SUFFIXES))
                if tree[p].lfs:
                    self.lfs_store[tree[p].sha256] = data
            commit = self._new_commit(repo, parent.oid, tree, title)
            repo.branches[branch] = commit.oid
            return commit.oid

    # -- internals -----------------------------------------------------------------------------
    def _new_commit(
        self, repo: Repo, parent: str | None, tree: dict[str, Blob], title: str, description: str = ""
    ) -> Commit:
        self._counter += 1
        oid = hashlib.sha1(f"{repo.repo_id}:{self._counter}:{parent}:{title}".encode()).hexdigest()
        commit = Commit(oid, parent, tree, title, description)
        repo.commits[oid] = commit
        return commit

    def _take_fault(self, route: str) -> Fault | None:
        for fault in self.faults:
            if fault.route == route and fault.times > 0:
                fault.times -= 1
                return fault
        return None


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandin
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed-ACK stalls

    def log_message(self, *args) -> None:  # keep pytest output quiet
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # -- plumbing ------------------------------------------------------------------------------
    def _send(
        self, status: int, body: bytes | dict | list | None = None, headers: dict | None = None, method: str = "GET"
    ):
        if isinstance(body, (dict, list)):
            payload, ctype = json.dumps(body).encode(), "application/json"
        else:
            payload, ctype = body or b"", "application/octet-stream"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(payload)

    def _dispatch(self, method: str) -> None:
        hub = self.hub
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.split("/") if s]
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        route, args = _route(method, segs)
        with hub.lock:
            hub.requests.append((method, route))
            fault = hub._take_fault(route)
        if fault is not None and not fault.after:
            return self._send_fault(fault, method)
        hook = hub.before.get(route)
        if hook is not None:
            hook(args)
        try:
            with hub.lock:
                status, out, headers = getattr(self, f"_h_{route}")(method, args, query, body)
        except HttpError as e:
            headers = {"X-Error-Message": e.message, **e.headers}
            if e.code:
                headers["X-Error-Code"] = e.code
            return self._send(e.status, {"error": e.message, **e.extra}, headers, method)
        if fault is not None:  # the change was made; the answer is "lost"
            return self._send_fault(fault, method)
        self._send(status, out, headers, method)

    def _send_fault(self, fault: Fault, method: str) -> None:
        headers = dict(fault.headers)
        if "error" in fault.body:
            headers.setdefault("X-Error-Message", fault.body["error"])
        self._send(fault.status, fault.body, headers, method)

    def _user(self) -> dict | None:
        auth = self.headers.get("Authorization", "")
        if not auth:
            return None
        token = auth.removeprefix("Bearer ").strip()
        user = self.hub.tokens.get(token)
        if user is None:
            raise HttpError(401, "Invalid credentials in Authorization header")
        return user

    def _writer(self, what: str) -> dict:
        user = self._user()
        if user is None:
            raise HttpError(401, "Invalid credentials in Authorization header")
        if not user.get("write"):
            raise HttpError(403, f"You don't have the rights to {what}")
        return user

    def _repo(self, repo_id: str) -> Repo:
        user = self._user()
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and user is None):
            raise HttpError(404, "Repository not found", "RepoNotFound")
        return repo

    def _rev(self, repo: Repo, rev: str) -> Commit:
        commit = repo.resolve(rev)
        if commit is None:
            raise HttpError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return commit

    # -- handlers ------------------------------------------------------------------------------
    def _h_unknown(self, method, args, query, body):
        raise HttpError(404, f"stand-in does not serve {method} {self.path}")

    def _h_whoami(self, method, args, query, body):
        user = self._user()
        if user is None:
            raise HttpError(401, "Invalid credentials in Authorization header")
        return (
            200,
            {
                "type": "user",
                "name": user["user"],
                "auth": {"accessToken": {"role": "write" if user.get("write") else "read"}},
            },
            {},
        )

    def _h_oauth_token(self, method, args, query, body):
        """RFC 8693 token exchange (HF trusted publishing): any id token gets the write token."""
        payload = json.loads(body or b"{}")
        self.hub.oidc_exchanges.append(
            {"resource": payload.get("resource"), "subject_token": payload.get("subject_token")}
        )
        if payload.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" or not payload.get(
            "subject_token"
        ):
            raise HttpError(400, "invalid token exchange request")
        return 200, {"access_token": self.hub.oidc_token, "token_type": "bearer", "expires_in": 3600}, {}

    def _h_github_idtoken(self, method, args, query, body):
        """GitHub Actions' OIDC id-token request: the runtime's bearer token in, a JWT-like id token out."""
        if self.headers.get("Authorization", "") != f"Bearer {self.hub.github_request_token}":
            raise HttpError(401, "bad id-token request token")
        audience = query.get("audience")
        self.hub.github_audiences.append(audience)
        return 200, {"value": f"github-id-token-for:{audience}"}, {}

    def _h_validate_yaml(self, method, args, query, body):
        return 200, {"errors": [], "warnings": []}, {}

    def _h_create_repo(self, method, args, query, body):
        payload = json.loads(body or b"{}")
        org, name = payload.get("organization"), payload["name"]
        if payload.get("type") != "kernel":
            raise HttpError(400, "stand-in only serves kernel repositories")
        self._writer(f"create a kernel under the namespace {org}")
        repo_id = f"{org}/{name}" if org else name
        if org in self.hub.approval_pending:
            raise HttpError(
                403, f"Kernel repositories under '{org}' require approval from Hugging Face before they can be created"
            )
        url = f"{self.hub.url}/kernels/{repo_id}"
        if repo_id in self.hub.repos:
            raise HttpError(409, "You already created this kernel repo", extra={"url": url})
        self.hub.create_repo(repo_id, private=payload.get("visibility") == "private")
        return 200, {"url": url, "name": repo_id, "id": repo_id}, {}

    def _h_repo_info(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        commit = self._rev(repo, args.get("rev") or "main")
        return (
            200,
            {
                "id": repo.repo_id,
                "sha": commit.oid,
                "private": repo.private,
                "siblings": [{"rfilename": p} for p in sorted(commit.tree)],
            },
            {},
        )

    def _h_refs(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        branches = [
            {"name": n, "ref": f"refs/heads/{n}", "targetCommit": oid} for n, oid in sorted(repo.branches.items())
        ]
        return 200, {"branches": branches, "converts": [], "tags": []}, {}

    def _h_branch(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        self._writer(f"write to {repo.repo_id}")
        name = args["branch"]
        if method == "DELETE":
            if name == "main":
                raise HttpError(403, "Cannot delete the main branch")
            if name not in repo.branches:
                raise HttpError(404, f"Branch {name} not found", "RevisionNotFound")
            del repo.branches[name]
            return 200, {}, {}
        if name in repo.branches:
            raise HttpError(409, "Reference already exists")
        start = json.loads(body or b"{}").get("startingPoint") or "main"
        repo.branches[name] = self._rev(repo, start).oid
        return 200, {}, {}

    def _h_tree(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        commit = self._rev(repo, args["rev"])
        base = args.get("path", "").strip("/")
        recursive = query.get("recursive", "false").lower() == "true"
        prefix = base + "/" if base else ""
        if base and base not in commit.tree and not any(p.startswith(prefix) for p in commit.tree):
            raise HttpError(404, f"{base} does not exist", "EntryNotFound")
        entries, dirs = [], set()
        for path, blob in sorted(commit.tree.items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            if "/" in rest:
                parts = rest.split("/")[:-1]
                for i in range(1, len(parts) + 1 if recursive else 2):
                    dirs.add(prefix + "/".join(parts[:i]))
                if not recursive:
                    continue
            entry = {"type": "file", "oid": blob.sha1, "size": len(blob.data), "path": path}
            if blob.lfs:
                entry["lfs"] = {"oid": blob.sha256, "size": len(blob.data), "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
        return 200, entries, {}

    def _h_preupload(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        self._writer(f"write to {repo.repo_id}")
        commit = self._rev(repo, args["rev"])
        files = []
        for f in json.loads(body)["files"]:
            sample = base64.b64decode(f["sample"])
            lfs = f["size"] > LFS_THRESHOLD or b"\0" in sample or f["path"].endswith(LFS_SUFFIXES)
            existing = commit.tree.get(f["path"])
            oid = None
            if existing is not None:
                oid = existing.sha256 if existing.lfs else existing.sha1
            files.append(
                {"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        return 200, {"files": files, "commitOid": commit.oid}, {}

    def _h_lfs_batch(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        self._writer(f"write to {repo.repo_id}")
        objects = []
        for obj in json.loads(body)["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in self.hub.lfs_store:
                entry["actions"] = {"upload": {"href": f"{self.hub.url}/lfs-upload/{obj['oid']}"}}
            objects.append(entry)
        return 200, {"transfer": "basic", "objects": objects}, {}

    def _h_lfs_put(self, method, args, query, body):
        oid = args["oid"]
        if hashlib.sha256(body).hexdigest() != oid:
            raise HttpError(400, "uploaded content does not match its oid")
        self.hub.lfs_store[oid] = body
        self.hub.lfs_bytes_uploaded += len(body)
        return 200, b"", {}

    def _h_commit(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        self._writer(f"write to {repo.repo_id}")
        branch = args["rev"]
        if branch not in repo.branches:
            raise HttpError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
        head = repo.commits[repo.branches[branch]]
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(item["value"] for item in lines if item["key"] == "header")
        parent = header.get("parentCommit")
        if parent is not None and not head.oid.startswith(parent):
            raise HttpError(412, "A commit has happened since. Please refresh and try again.")
        tree = dict(head.tree)
        for item in lines:
            key, value = item["key"], item["value"]
            if key == "file":
                tree[value["path"]] = Blob(base64.b64decode(value["content"]), False)
            elif key == "lfsFile":
                data = self.hub.lfs_store.get(value["oid"])
                if data is None:
                    raise HttpError(400, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                tree[value["path"]] = Blob(data, True)
            elif key == "deletedFile":
                if value["path"] not in tree:
                    raise HttpError(404, "A file with this name doesn't exist", "EntryNotFound")
                del tree[value["path"]]
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                for p in [p for p in tree if p.startswith(prefix)]:
                    del tree[p]
        commit = self.hub._new_commit(repo, head.oid, tree, header["summary"], header.get("description", ""))
        repo.branches[branch] = commit.oid
        return (
            200,
            {
                "success": True,
                "commitOid": commit.oid,
                "commitUrl": f"{self.hub.url}/kernels/{repo.repo_id}/commit/{commit.oid}",
            },
            {},
        )

    def _h_resolve(self, method, args, query, body):
        repo = self._repo(args["repo_id"])
        commit = self._rev(repo, args["rev"])
        blob = commit.tree.get(args["path"])
        if blob is None:
            raise HttpError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.oid})
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{blob.sha256 if blob.lfs else blob.sha1}"'}
        return 200, blob.data, headers


def _route(method: str, segs: list[str]) -> tuple[str, dict]:
    """Map a request path to (route name, arguments)."""
    if segs[:2] == ["api", "whoami-v2"]:
        return "whoami", {}
    if segs == ["oauth", "token"] and method == "POST":
        return "oauth_token", {}
    if segs == ["_github", "idtoken"] and method == "GET":
        return "github_idtoken", {}
    if segs[:2] == ["api", "validate-yaml"]:
        return "validate_yaml", {}
    if segs[:3] == ["api", "repos", "create"] and method == "POST":
        return "create_repo", {}
    if segs[:1] == ["lfs-upload"] and len(segs) == 2 and method == "PUT":
        return "lfs_put", {"oid": segs[1]}
    if len(segs) >= 4 and segs[:2] == ["api", "kernels"]:
        repo_id, rest = f"{segs[2]}/{segs[3]}", segs[4:]
        args = {"repo_id": repo_id}
        if not rest:
            return "repo_info", args
        kind, tail = rest[0], rest[1:]
        if kind == "revision" and tail:
            return "repo_info", {**args, "rev": tail[0]}
        if kind == "refs":
            return "refs", args
        if kind == "branch" and tail:
            return "branch", {**args, "branch": "/".join(tail)}
        if kind == "tree" and tail:
            return "tree", {**args, "rev": tail[0], "path": "/".join(tail[1:])}
        if kind == "preupload" and tail:
            return "preupload", {**args, "rev": tail[0]}
        if kind == "commit" and tail:
            return "commit", {**args, "rev": tail[0]}
    if len(segs) >= 3 and segs[0] == "kernels":
        if segs[2].endswith(".git") and segs[3:] == ["info", "lfs", "objects", "batch"]:
            return "lfs_batch", {"repo_id": f"{segs[1]}/{segs[2][:-4]}"}
        if len(segs) >= 6 and segs[3] == "resolve":
            return "resolve", {"repo_id": f"{segs[1]}/{segs[2]}", "rev": segs[4], "path": "/".join(segs[5:])}
    return "unknown", {}
