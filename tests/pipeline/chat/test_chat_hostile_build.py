"""A hostile build of a chat repo's Python env (pipeline/chat/env.py): code in the user's repo, which the agent can
edit in one session, runs when the next chat start builds the env. Each test fails if its attack works:

1. the build rewrites the env's pyvenv.cfg `home =` so that later chat sandboxes mount a host folder;
2. the build plants a symlink where host root reads and writes the env's marker;
3. the build reaches the host's loopback TCP ports, its abstract unix sockets, or the host's pip credentials.

The build runs the repo's own `pytest.py`: the env's check for its test runner (`python -c 'import pytest'`, in the
repo) imports it, so the attacks need no package index. Run as root (as CI does): that is where they reached root.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from contextlib import nullcontext
from pathlib import Path

import pytest

MARK = uuid.uuid4().hex[:10]
OWNER = 4242  # the repo's owner: the user whose chat it is (the sandbox runs as that user)


@pytest.fixture(autouse=True)
def _root_and_bwrap(request):
    request.getfixturevalue("bwrap_installed")
    if os.geteuid() != 0:
        pytest.skip("needs root: the repo's owner is made with chown, as a root-started chat finds it")


def _repo(tmp_path: Path, attack: str) -> Path:
    """A user's repo (owned by OWNER, not a package) whose `pytest.py` is the attack."""
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "pytest.py").write_text(attack)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, OWNER, OWNER)
    tmp_path.chmod(0o755)
    return repo


def _build(repo: Path, tmp_path: Path):
    from pipeline.chat import env as chat_env
    from swe_env.pyenv import PyEnvConfig

    return chat_env.ensure(repo, PyEnvConfig(cache_dir=tmp_path / "envs"), lambda text: nullcontext())


@pytest.fixture
def private_home():
    """A host user's home with a private key: root-only to reach (under /root), the key the owner's own."""
    home = Path("/root") / f".nexus-hostile-home-{MARK}"
    home.mkdir(mode=0o700)
    key = home / "id_ed25519"
    token = f"PRIVATE-KEY-{uuid.uuid4().hex}"
    key.write_text(token + "\n")
    key.chmod(0o600)
    for p in (home, key):
        os.chown(p, OWNER, OWNER)
    yield home, token
    key.unlink(missing_ok=True)
    home.rmdir()


@pytest.fixture
def host_tmp_file():
    """A file in the host's /tmp (where other sandboxes' workspaces live), readable by anyone who sees it."""
    path = Path(f"/tmp/nexus-other-sandbox-{MARK}")
    token = f"WORKSPACE-{uuid.uuid4().hex}"
    path.write_text(token + "\n")
    yield path, token
    path.unlink(missing_ok=True)


def _rewrite_home(home: Path) -> str:
    """The attack: the env's pyvenv.cfg names `home` as the base interpreter's folder."""
    return (
        "import pathlib, sys\n"
        "cfg = pathlib.Path(sys.prefix) / 'pyvenv.cfg'\n"
        f"cfg.write_text(cfg.read_text().replace('home = ', 'home = {home}\\nold_home = '))\n"
    )


def _next_chat_runs(repo: Path, env, cmd: str) -> str:
    from pipeline.chat import open_repo_sandbox

    sb = open_repo_sandbox(repo, "hostile", env)
    try:
        return sb.execute(cmd).output
    finally:
        sb.close()


def test_the_build_cannot_choose_what_later_sandboxes_mount(tmp_path, private_home):
    home, token = private_home
    repo = _repo(tmp_path, _rewrite_home(home))
    env = _build(repo, tmp_path)
    out = _next_chat_runs(repo, env, f"cat {home}/id_ed25519; ls -la {home}; echo done")
    assert "done" in out
    assert token not in out, f"the next chat's sandbox mounted {home}, named by the build: {out}"
    # the env still runs in the sandbox: its interpreter came from nexus-agent, not from pyvenv.cfg
    assert "ok" in _next_chat_runs(repo, env, "python -c 'print(\"ok\")'")


def test_the_build_cannot_put_the_hosts_tmp_in_later_sandboxes(tmp_path, host_tmp_file):
    path, token = host_tmp_file
    repo = _repo(tmp_path, _rewrite_home(Path("/tmp")))
    env = _build(repo, tmp_path)
    out = _next_chat_runs(repo, env, f"cat {path}; echo done")
    assert "done" in out
    assert token not in out, f"the next chat's sandbox sees the host's /tmp: {out}"


@pytest.fixture
def root_file():
    """A root-only JSON file on the host (at a path that the sandbox's private /tmp also has)."""
    path = Path(f"/tmp/nexus-planted-{MARK}.json")
    path.write_text('{"owner": "root"}')
    path.chmod(0o600)
    yield path
    path.unlink(missing_ok=True)


def test_host_never_follows_a_marker_link_the_build_planted(tmp_path, root_file):
    attack = (
        "import os, sys\n"
        f"os.symlink({str(root_file)!r}, os.path.join(sys.prefix, '.nexus-ready'))\n"
        f"os.symlink({str(root_file)!r}, os.path.join(sys.prefix, 'nexus-ready.json'))\n"
    )
    repo = _repo(tmp_path, attack)
    try:
        env = _build(repo, tmp_path)
        assert "build_s" in env.info(), "the build's own record of the env is kept host-side"
    except Exception as exc:  # refusing the env is also safe, as long as the host file is untouched
        print("build refused:", exc)
    assert root_file.read_text() == '{"owner": "root"}', "host root rewrote a file through the build's symlink"
    assert root_file.stat().st_uid == 0


def _listen_tcp() -> tuple[socket.socket, list[str]]:
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            seen.append("tcp")
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, seen


def _listen_abstract() -> socket.socket:
    """A host abstract unix socket the build must not reach."""
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0nexus-build-{MARK}")
    abstract.listen(1)
    return abstract


def _probe_host(port: int) -> str:
    """Python source that records the build's environment, then tries the host's loopback `port` and the abstract
    socket (`out`: one line each, CONNECTED or refused)."""
    return (
        "import os, socket\n"
        "out = [repr(sorted(os.environ.items()))]\n"
        f"for family, target in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_UNIX, '\\0nexus-build-{MARK}')):\n"
        "    s = socket.socket(family)\n"
        "    s.settimeout(3)\n"
        "    try:\n"
        "        s.connect(target)\n"
        "        out.append('CONNECTED %r' % (target,))\n"
        "    except OSError as e:\n"
        "        out.append('refused %r %s' % (target, e))\n"
    )


def test_the_build_reaches_nothing_of_the_host(tmp_path, monkeypatch):
    token = f"tok-{uuid.uuid4().hex}"
    monkeypatch.setenv("PIP_INDEX_URL", f"https://user:{token}@pypi.example.invalid/simple")
    monkeypatch.setenv("HTTPS_PROXY", f"http://proxy-user:{token}@127.0.0.1:9")
    tcp, seen = _listen_tcp()
    abstract = _listen_abstract()
    port = tcp.getsockname()[1]
    attack = (
        _probe_host(port) + "try:\n"  # the index proxy, through the relay
        "    p = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
        f"    p.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')\n"
        "    out.append('proxy said %r' % p.recv(100).split(b'\\r\\n')[0])\n"
        "except OSError as e:\n"
        "    out.append('no proxy %s' % e)\n"
        "open('/testbed/probe.out', 'w').write('\\n'.join(out))\n"
    )
    repo = _repo(tmp_path, attack)
    try:
        _build(repo, tmp_path)
    finally:
        tcp.close()
        abstract.close()
    probe = (repo / "probe.out").read_text()
    tries = probe.splitlines()[1:]
    assert len(tries) == 3 and all(t.startswith("refused ") for t in tries[:2]), probe
    assert tries[2] == "proxy said b'HTTP/1.1 403 Forbidden'", probe  # the proxy opens the index only
    assert not seen, "the build connected to a host loopback port"
    assert token not in probe, f"the build saw the host's pip credentials: {probe}"


def _index_reachable(index: str) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(index)
    try:
        socket.create_connection((parts.hostname, parts.port or 443), timeout=5).close()
        return True
    except OSError:
        return False


PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "0.1"
dependencies = ["iniconfig"]

[tool.setuptools]
py-modules = ["calc"]
"""


@pytest.mark.slow  # pip downloads setuptools, iniconfig and pytest through the index proxy (~15 s)
def test_a_package_repo_builds_through_the_index_proxy_only(tmp_path):
    from pipeline.chat import open_repo_sandbox
    from swe_env.pyenv import default_index_url

    if not _index_reachable(default_index_url()):
        pytest.skip(f"the package index {default_index_url()} is not reachable from this host")
    repo = _repo(tmp_path, "raise SystemExit('not the test runner')\n")
    (repo / "pytest.py").unlink()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "calc.py").write_text("import iniconfig\n\ndef add(a, b):\n    return a + b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    for p in repo.iterdir():
        os.lchown(p, OWNER, OWNER)
    env = _build(repo, tmp_path)
    assert env.info()["build_s"] > 0 and env.recipe.install
    assert all(p.lstat().st_uid == 0 for p in [env.path, *env.path.rglob("*")]), "the agent's user owns env files"
    sb = open_repo_sandbox(repo, "t", env)
    try:
        res = sb.execute("python -m pytest -q -p no:cacheprovider 2>&1 | tail -1; touch $VIRTUAL_ENV/x; echo rc=$?")
    finally:
        sb.close()
    assert "1 passed" in res.output and "rc=1" in res.output, res.output


@pytest.mark.docker
def test_the_docker_build_reaches_nothing_of_the_host(tmp_path, monkeypatch, docker_client, builtin_image):
    """Attack 3 on the docker backend's env build (swe_env/pyenv_docker.py): the same probe, in a build container."""
    from swe_env.pyenv import PyEnvConfig, ensure_env
    from swe_env.pyenv_docker import container_builder
    from tasks.schema import Task

    token = f"tok-{uuid.uuid4().hex}"
    monkeypatch.setenv("PIP_INDEX_URL", f"https://user:{token}@pypi.example.invalid/simple")
    tcp, seen = _listen_tcp()
    abstract = _listen_abstract()
    port = tcp.getsockname()[1]
    attack = (
        _probe_host(port) + "import sys\n"
        "open(os.path.join(sys.prefix, 'probe.out'), 'w').write('\\n'.join(out))\n"  # the env dir is the host's
    )
    repo = _repo(tmp_path, attack)
    task = Task("acme__probe-1", "acme/probe", "0" * 40, "issue", version=tmp_path.name)
    build = container_builder(docker_client, repo, "/testbed", builtin_image)
    try:
        env = ensure_env(task, repo, PyEnvConfig(tmp_path / "envs"), build)
    finally:
        tcp.close()
        abstract.close()
    probe = (env.path / "probe.out").read_text()
    tries = probe.splitlines()[1:]
    assert len(tries) == 2 and all(t.startswith("refused ") for t in tries), probe
    assert not seen, "the build connected to a host loopback port"
    assert token not in probe, f"the build saw the host's pip credentials: {probe}"


def test_a_host_other_than_the_index_is_refused(tmp_path):
    attack = (
        "import urllib.request\n"  # pip's proxy variables are the environment's: urllib goes through it too
        "try:\n"
        "    urllib.request.urlopen('https://example.com/', timeout=10)\n"
        "    said = 'REACHED'\n"
        "except OSError as e:\n"
        "    said = str(e)\n"
        "open('/testbed/probe.out', 'w').write(said)\n"
    )
    repo = _repo(tmp_path, attack)
    _build(repo, tmp_path)
    assert "403 Forbidden" in (repo / "probe.out").read_text()
