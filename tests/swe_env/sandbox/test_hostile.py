"""Hostile commands, run as an agent would run them, against every isolating backend: each test fails if its
attack works. Escapes (remount, open_by_handle_at), host secrets (directly, through a symlink, through the tools),
host sockets, fork and memory bombs, the output-cap bypass and setsid survivors; host root through /proc/sys
(core_pattern), root-owned and setuid files on the host, the file-size limit, the disk and inode budget, an
observation too big to tokenize, and host-side reads and writes through planted symlinks. Issue 62: space held by
unlinked open files, /dev/shm and sparse files against the disk budget, setuid files seen from the host while
the step that made them runs, and the mounts a kill -9 leaves (the chat's attacks: tests/pipeline/).

Run as root (as CI does) they test the sandbox as root starts it: that is where these attacks reached host root.

The sandboxes get tight limits of their own, so the bombs stay small whatever the machine.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from swe_env.sandbox.limits import StepLimits
from tasks import get_task

TASK_ID = "nexus-demo__semver-lite-1"
LIMITS = StepLimits(pids=64, memory_mb=256, cpu_s=60, file_mb=64, output_bytes=1 << 20)
MARK = uuid.uuid4().hex[:10]  # names this run's probes on the host

# Tries to open the root directory of the filesystem behind /usr by a forged handle (the "shocker" escape):
# needs CAP_DAC_READ_SEARCH on the host, which no sandbox may have.
HANDLE_PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Handle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 8)]
h = Handle(8, 1)
h.f_handle[0] = 2  # inode 2, generation 0: the root of an ext4 filesystem
fd = os.open("/usr", os.O_RDONLY)
r = libc.open_by_handle_at(fd, ctypes.byref(h), os.O_RDONLY)
if r >= 0:
    print("OPENED", sorted(os.listdir("/proc/self/fd/%d" % r))[:20])
else:
    print("DENIED errno", ctypes.get_errno())
"""
FORK_BOMB = f"""python3 -c '
import os, time  # bomb-{MARK}
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
'"""
MEMORY_BOMB = """python3 -c '
chunks = []
while True:
    chunks.append(bytearray(32 << 20))
    print("held", 32 * len(chunks), "MiB", flush=True)
'"""


def _open(backend: str, request, limits: StepLimits = LIMITS):
    task = get_task(TASK_ID)
    if backend == "bwrap":
        request.getfixturevalue("bwrap_installed")
        from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox

        return BwrapSandbox(task, BwrapConfig(limits=limits))
    client = request.getfixturevalue("docker_client")
    request.getfixturevalue("builtin_image")
    from swe_env.sandbox.docker import DockerConfig, DockerSandbox

    return DockerSandbox(task, DockerConfig(limits=limits), client=client)


@pytest.fixture(scope="module", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request):
    sb = _open(request.param, request)
    sb.backend = request.param
    yield sb
    sb.close()


def host_processes(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if marker in line and not line.startswith("ps ")]


@pytest.fixture
def host_secret():
    """A secret file in the host user's home (where the sandbox must not reach)."""
    path = Path.home() / f".nexus-hostile-{MARK}"
    token = f"SECRET-{uuid.uuid4().hex}"
    path.write_text(token + "\n")
    path.chmod(0o600)
    yield path, token
    path.unlink(missing_ok=True)


def test_no_capability_that_escapes(sandbox):
    cap_eff = int(sandbox.execute("grep CapEff /proc/self/status").output.split()[1], 16)
    for bit, name in ((2, "CAP_DAC_READ_SEARCH"), (21, "CAP_SYS_ADMIN"), (16, "CAP_SYS_MODULE"), (17, "CAP_SYS_RAWIO")):
        assert not cap_eff & (1 << bit), f"{name} is held inside the sandbox"


def test_remount_rw_does_not_reach_the_host(sandbox):
    probe = Path(f"/usr/nexus-escape-{MARK}")
    res = sandbox.execute(f"mount -o remount,bind,rw /usr; mount -o remount,rw /; touch {probe}; echo done")
    assert "done" in res.output
    assert not probe.exists(), "a remount inside the sandbox wrote to the host's /usr"
    if sandbox.backend == "bwrap":
        assert "Read-only file system" in res.output
        assert "permission denied" in res.output.lower()


def test_open_by_handle_at_is_denied(sandbox):
    sandbox.write_file("/tmp/handle_probe.py", HANDLE_PROBE)
    res = sandbox.execute("python3 /tmp/handle_probe.py")
    assert "OPENED" not in res.output, res.output
    assert "DENIED errno" in res.output, res.output  # the probe itself ran


def test_host_secrets_are_unreadable(sandbox, host_secret):
    path, token = host_secret
    shadow = Path("/etc/shadow").read_text().splitlines()[0] if Path("/etc/shadow").exists() else MARK
    checkout = Path(__file__).resolve()
    attempts = [
        f"cat /etc/shadow {path} {checkout}",
        f"ln -sf {path} /testbed/leak && cat /testbed/leak; ln -sf /etc/shadow /testbed/leak2 && cat /testbed/leak2",
        f"file_editor --command=view --path=/testbed/../..{path}",
        "file_editor --command=view --path=/testbed/../../etc/shadow",
        "file_editor --command=view --path=/testbed/leak",
        f"search --search_term={token[:12]} --path={path.parent}",
        f"search --search_term={token[:12]} --path=/etc",
        f"ls -la {path.parent} /root /run /var /home 2>&1; cat /proc/1/root{path} 2>&1",
    ]
    for cmd in attempts:
        out = sandbox.execute(cmd, timeout=60).output
        assert token not in out, f"{cmd!r} read the host secret"
        assert shadow not in out, f"{cmd!r} read the host's /etc/shadow"
        assert '"shocker" escape' not in out, f"{cmd!r} read the checkout"
    sandbox.execute("rm -f /testbed/leak /testbed/leak2")


def test_host_sockets_are_unreachable(sandbox, tmp_path):
    folder = Path.home() / f".nexus-sock-{MARK}"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX)
    abstract = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(folder / "s.sock"))
        server.listen(1)
        abstract.bind(f"\0nexus-{MARK}")
        abstract.listen(1)
        probe = (
            "import socket, sys\n"
            "for target in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n"
            "        s.connect(target.replace('@', chr(0)))\n"
            "        print('CONNECTED', repr(target))\n"
            "    except OSError as e:\n"
            "        print('refused', repr(target), e)\n"
        )
        sandbox.write_file("/tmp/sock_probe.py", probe)
        docker_sock = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
        targets = [str(folder / "s.sock"), f"@nexus-{MARK}", docker_sock, "/var/run/docker.sock", "/run/docker.sock"]
        res = sandbox.execute("python3 /tmp/sock_probe.py " + " ".join(targets))
        assert "CONNECTED" not in res.output, res.output
        assert sum(line.startswith("refused ") for line in res.output.splitlines()) == len(targets), res.output
    finally:
        server.close()
        abstract.close()
        (folder / "s.sock").unlink(missing_ok=True)
        folder.rmdir()


def test_fork_bomb_is_contained_and_leaves_nothing(sandbox):
    if sandbox.backend == "bwrap" and os.geteuid() == 0:
        from swe_env.sandbox.limits import StepCgroup

        group = StepCgroup.create(LIMITS)
        if group is None:  # rlimits do not bind host root: the bomb would reach the whole machine, so not run
            pytest.fail("running as root without a usable cgroup (v2 or v1 pids+memory): fork bombs are not contained")
        group.destroy()
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(res=sandbox.execute(FORK_BOMB, timeout=6)))
    worker.start()
    peak = 0
    while worker.is_alive():
        peak = max(peak, len(host_processes(f"bomb-{MARK}")))
        time.sleep(0.3)
    worker.join()
    assert box["res"].timed_out
    assert 0 < peak <= LIMITS.pids, f"{peak} bomb processes at once (limit {LIMITS.pids})"
    time.sleep(0.5)
    assert host_processes(f"bomb-{MARK}") == []
    assert sandbox.execute("echo alive").output.strip() == "alive"  # the sandbox is usable after the bomb


def test_memory_bomb_is_stopped_at_the_limit(sandbox):
    start = time.monotonic()
    res = sandbox.execute(MEMORY_BOMB, timeout=60)
    held = [int(line.split()[1]) for line in res.output.splitlines() if line.startswith("held ")]
    assert res.returncode != 0
    assert not res.timed_out
    assert time.monotonic() - start < 30
    assert held and max(held) <= LIMITS.memory_mb, f"held {max(held)} MiB, limit {LIMITS.memory_mb} MiB"


@pytest.mark.parametrize("cmd", ["cat /dev/zero > /proc/$PPID/fd/1", "yes nexus-flood", "head -c 50000000 /dev/zero"])
def test_output_is_capped_where_it_is_produced(sandbox, cmd):
    start = time.monotonic()
    res = sandbox.execute(cmd, timeout=60)
    denied = "/proc/" in cmd and "Permission denied" in res.output  # not root on the host: the init's fd is closed
    assert res.output_capped or denied
    assert not res.timed_out
    assert len(res.output) <= LIMITS.output_bytes + 200
    assert time.monotonic() - start < 30


def test_output_bypass_through_the_tool(sandbox):
    from agent.environment import SandboxEnvironment
    from agent.protocols import ToolCall

    env = SandboxEnvironment(sandbox)
    result = env.execute(ToolCall("execute_bash", {"cmd": "cat /dev/zero > /proc/$PPID/fd/1"}), timeout=20)
    assert len(result.output) <= LIMITS.output_bytes + 200


def test_setsid_children_die_with_the_step(sandbox):
    res = sandbox.execute(f"setsid -f sleep 3131.{MARK[:4]}1; (setsid sleep 3131.{MARK[:4]}2 &); echo started")
    assert "started" in res.output
    time.sleep(0.5)
    assert host_processes(f"sleep 3131.{MARK[:4]}") == []
    assert f"3131.{MARK[:4]}" not in sandbox.execute("ps -eo args").output


def test_nothing_secret_is_mounted(sandbox):
    if sandbox.backend != "bwrap":
        pytest.skip("docker shows its image's own filesystem")
    top = set(sandbox.execute("ls -A /").output.split())
    assert top <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "tmp", "testbed",
                   "opt", "run", "root", "work", "home"}  # fmt: skip
    etc = set(sandbox.execute("ls -A /etc").output.split())
    assert not etc & {"shadow", "gshadow", "sudoers", "ssh", "docker", "pip.conf", "npmrc"}
    nested = sandbox.execute("unshare -U -r true")
    assert nested.returncode != 0
    assert "unshare failed" in nested.output  # no nested user namespace


# --- host root through the sandbox's user (issue: the bwrap sandbox's uid 0 was the host's) ---------------------------


@pytest.fixture
def core_pattern():
    """The host's core_pattern, put back whatever the test did (an attack that works changes it)."""
    path = Path("/proc/sys/kernel/core_pattern")
    before = path.read_text()
    yield before
    if path.read_text() != before and os.geteuid() == 0:
        path.write_text(before)


def test_core_pattern_cannot_run_a_host_program(sandbox, core_pattern):
    probe = Path(f"/tmp/nexus-core-{MARK}")
    attack = f"echo '|/bin/sh -c id>{probe}' > /proc/sys/kernel/core_pattern; sh -c 'kill -SEGV $$'; echo done"
    res = sandbox.execute(attack, timeout=30)
    assert "done" in res.output
    time.sleep(0.3)
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern, "the sandbox rewrote core_pattern"
    assert not probe.exists(), f"the kernel ran the agent's program on the host: {probe.read_text()!r}"


def test_no_sysctl_is_writable(sandbox):
    res = sandbox.execute(
        "find /proc/sys -type f -writable 2>/dev/null | wc -l; grep ' /proc/sys ' /proc/self/mountinfo"
    )
    assert res.output.split()[0] == "0", res.output
    assert " ro," in res.output, f"/proc/sys is not mounted read-only: {res.output}"


def test_files_written_are_not_root_owned_on_the_host(sandbox):
    if sandbox.backend != "bwrap":
        pytest.skip("docker's files stay in its own data root, which no user reaches")
    res = sandbox.execute("touch /testbed/made-here /tmp/made-here && cp /bin/bash /testbed/.h; chmod 4755 /testbed/.h")
    assert "Operation not permitted" in res.output, res.output  # the setuid filter refuses the bits
    for path in (sandbox.repo / "made-here", sandbox.repo / ".h", sandbox._tmp / "made-here"):
        st = path.lstat()
        assert st.st_uid != 0 or os.geteuid() != 0, f"{path} is root's on the host"
        assert not (st.st_uid == 0 and st.st_mode & 0o4000), f"{path} is a setuid-root file on the host"
    sandbox.execute("rm -f /testbed/made-here /testbed/.h /tmp/made-here")


SETID_STEP = (
    "cp /bin/bash /testbed/.s; chmod 6755 /testbed/.s; install -m 2755 /bin/true /tmp/.i; "
    "python3 -c 'import os; os.close(os.open(\"/testbed/.o\", os.O_CREAT | os.O_WRONLY, 0o6755))'; "
    "python3 -c 'import os; os.mknod(\"/tmp/.n\", 0o104755)'; echo made; sleep 3"
)


def test_no_setuid_file_exists_on_the_host_while_a_step_runs(sandbox):
    """Issue 62 item 5: the files are checked from the host while the step that made them still sleeps."""
    if sandbox.backend != "bwrap":
        pytest.skip("docker's files stay in its own data root, which no user reaches")
    seen: dict[str, int] = {}
    step = threading.Thread(target=lambda: sandbox.execute(SETID_STEP, timeout=30))
    step.start()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        for path in (sandbox.repo / ".s", sandbox.repo / ".o", sandbox._tmp / ".i", sandbox._tmp / ".n"):
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            if mode & 0o6000:
                seen[path.name] = mode
        time.sleep(0.05)
    step.join()
    sandbox.execute("rm -f /testbed/.s /testbed/.o /tmp/.i /tmp/.n")
    assert not seen, f"setuid/setgid files on the host during the step: { {k: oct(v) for k, v in seen.items()} }"


def test_every_bind_is_nosuid_and_nodev(sandbox):
    if sandbox.backend != "bwrap":
        pytest.skip("docker's mounts are docker's")
    mounts = [line.split() for line in sandbox.execute("cat /proc/self/mountinfo").output.splitlines() if line]
    for fields in mounts:
        point, options = fields[4], fields[5].split(",")
        assert "nosuid" in options, f"{point} is mounted without nosuid: {fields}"
        if point != "/dev" and not point.startswith("/dev/"):  # bwrap's /dev: the nodes a program needs (null...)
            assert "nodev" in options, f"{point} is mounted without nodev: {fields}"


def test_file_size_limit_is_what_it_says(sandbox):
    res = sandbox.execute(f"head -c {LIMITS.file_mb + 1}M /dev/zero > /tmp/big; echo size=$(stat -c %s /tmp/big)")
    # bash reports the killed `head` on stderr, which docker may deliver after the stdout that follows it
    found = re.search(r"^size=(\d+)$", res.output, re.MULTILINE)
    assert found, res.output
    size = int(found.group(1))
    assert size <= LIMITS.file_mb << 20, f"wrote {size} bytes with a {LIMITS.file_mb} MiB file limit"
    assert size >= (LIMITS.file_mb - 1) << 20, f"the limit is lower than set: {size} bytes"
    sandbox.execute("rm -f /tmp/big")


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def budgeted(request):
    """A sandbox of its own with a small disk budget (a budget is spent over the whole task)."""
    limits = StepLimits(pids=64, memory_mb=256, cpu_s=60, file_mb=16, output_bytes=1 << 20, disk_mb=40, inodes=3000)
    sb = _open(request.param, request, limits)
    sb.backend = request.param
    yield sb
    sb.close()


@pytest.mark.parametrize(
    "attack",
    [
        "for i in $(seq 1 40); do head -c 8M /dev/zero > /tmp/fill-$i || true; done; echo done",  # space, in one step
        "mkdir -p /testbed/many && cd /testbed/many && for i in $(seq 1 6000); do : > f$i; done; echo done",  # inodes
        "for i in $(seq 1 200); do head -c 4M /dev/zero > /tmp/slow-$i; sleep 0.05; done",  # grows while it runs
    ],
)
def test_disk_budget_ends_the_task(budgeted, attack):
    start = time.monotonic()
    first = budgeted.execute("echo small > /tmp/ok; echo fine")
    assert "fine" in first.output
    assert not first.disk_exceeded
    res = budgeted.execute(attack, timeout=60)
    assert res.disk_exceeded, res.output[-300:]
    assert "budget" in res.output
    assert time.monotonic() - start < 45
    assert "budget" in res.disk_exceeded


# Issue 62 item 4: space no folder shows. Each file stays under file_mb (16 MiB); 192 MiB in all against 40 MiB.
HELD_OPEN = """python3 -c '
import os, time
held = []
for i in range(24):
    path = "%s/held-%d" % (os.environ.get("WHERE", "/tmp"), i)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.unlink(path)
    try:
        os.write(fd, bytes(8 << 20))
    except OSError as exc:
        print("stopped:", exc.strerror, flush=True)
        break
    held.append(fd)
    print("held", 8 * len(held), "MiB", flush=True)
time.sleep(4)
'"""
SPACE_ATTACKS = [
    pytest.param(f"WHERE=/tmp {HELD_OPEN}", id="unlinked-open-tmp"),
    pytest.param(f"WHERE=/testbed {HELD_OPEN}", id="unlinked-open-testbed"),
    pytest.param("for i in $(seq 1 24); do head -c 8M /dev/zero > /dev/shm/f$i || break; echo held $((8*i)) MiB; done",
                 id="dev-shm"),
    pytest.param("for i in $(seq 1 24); do truncate -s 15M /tmp/sp$i && dd if=/dev/urandom of=/tmp/sp$i bs=1M count=8 "
                 "seek=4 conv=notrunc status=none || break; echo held $((8 * i)) MiB; done", id="sparse"),
]  # fmt: skip


def _most_held(output: str) -> int:
    return max((int(n) for n in re.findall(r"^held (\d+) MiB", output, re.MULTILINE)), default=0)


@pytest.mark.parametrize("attack", SPACE_ATTACKS)
def test_disk_budget_is_a_hard_limit(budgeted, attack):
    """Past the budget the step is stopped (the watch), or the writes fail at it (docker's /dev/shm); on bwrap under
    root both: the sandbox's writable places are a filesystem of the budget's size."""
    res = budgeted.execute(attack, timeout=60)
    held = _most_held(res.output)
    assert res.disk_exceeded or held <= 40, f"held {held} MiB against a 40 MiB budget: {res.output[-300:]}"
    if budgeted.backend == "bwrap" and os.geteuid() == 0:
        assert res.disk_exceeded, res.output[-300:]
        assert _most_held(res.output) <= 48, res.output[-300:]  # the filesystem's size: 40 MiB + ext4's share


def test_disk_budget_ends_the_agent_episode(request):
    from agent.environment import SandboxEnvironment
    from agent.loop import Agent, AgentConfig
    from agent.protocols import ModelReply

    limits = StepLimits(pids=64, memory_mb=256, file_mb=16, output_bytes=1 << 20, disk_mb=20, inodes=3000)
    sb = _open("bwrap", request, limits)
    cmd = "for i in 1 2 3 4; do head -c 8M /dev/zero > /tmp/f$i; done"
    fill = f"<function=execute_bash>\n<parameter=cmd>{cmd}</parameter>\n</function>"

    class Filler:
        name = "filler"

        def reply(self, messages, sampling):
            return ModelReply(fill)

    try:
        result = Agent(Filler(), SandboxEnvironment(sb), AgentConfig(max_steps_absolute=5)).run(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        )
    finally:
        sb.close()
    assert (result.exit_reason, result.steps) == ("disk_limit", 1)
    assert "disk budget" in result.step_records[-1]["observation"]


def test_a_huge_observation_is_cut_before_the_model_sees_it(sandbox):
    from agent.environment import SandboxEnvironment
    from agent.loop import AgentConfig
    from agent.observation import format_observation
    from agent.protocols import ToolCall

    call = ToolCall("execute_bash", {"cmd": "python3 -c \"print('x' * 900_000)\""})
    result = SandboxEnvironment(sandbox).execute(call, timeout=30)
    text = format_observation(call, result, AgentConfig().observation_chars, None)
    assert len(text) <= AgentConfig().observation_chars + 500
    assert "cut here" in text


def test_host_side_file_access_never_follows_a_planted_symlink(sandbox, host_secret):
    if sandbox.backend != "bwrap":
        pytest.skip("docker reads and writes inside the container")
    from swe_env.sandbox.base import SandboxError

    path, token = host_secret
    target = Path(f"/tmp/nexus-planted-{MARK}")
    sandbox.execute(f"ln -sf {path} /testbed/leak; ln -sfn /tmp /testbed/dir; ln -sf {target} /tmp/out.json")
    for inner in ("/testbed/leak", f"/testbed/dir/../..{path}"):
        with pytest.raises(SandboxError):
            assert token not in sandbox.read_file(inner)
    for inner in ("/tmp/out.json", "/testbed/dir/x", "/testbed/leak"):
        with pytest.raises(SandboxError):
            sandbox.write_file(inner, "planted")
    assert not target.exists()
    assert path.read_text().strip() == token
    sandbox.execute("rm -f /testbed/leak /testbed/dir /tmp/out.json")


# --- a chat on the user's own repo ------------------------------------------------------------------------------------


def _user_repo(tmp_path: Path, uid: int) -> Path:
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "app.py").write_text("print('hi')\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"], check=True
    )
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, uid, uid)
    tmp_path.chmod(0o755)
    return repo


CHAT_ATTACK = (
    "echo x >> app.py && touch new.txt && cp /bin/bash .h && mkdir -p d && touch d/f; echo rc=$?; "
    "chmod 4755 .h || echo chmod-refused"
)


@pytest.mark.parametrize("owner", [4242, 0], ids=["user-owned", "root-owned"])
def test_chat_repo_files_end_up_the_owners_without_setuid(request, tmp_path, owner):
    request.getfixturevalue("bwrap_installed")
    if os.geteuid() != 0:
        pytest.skip("needs root: the owners are made with chown")
    from pipeline.chat import open_repo_sandbox

    repo = _user_repo(tmp_path, owner)
    sb = open_repo_sandbox(repo, "hostile")  # the sandbox `nexus-agent chat` opens on the user's repo
    try:
        res = sb.execute(CHAT_ATTACK)
        assert "rc=0" in res.output, res.output  # the agent can edit the user's files
        assert "chmod-refused" in res.output, res.output  # the setuid filter
        # while the session runs, what the sandbox makes is the repo owner's on disk (an idmapped mount)
        assert all(p.lstat().st_uid == owner for p in [repo / "new.txt", repo / ".h", repo / "d" / "f"])
        assert not (repo / ".h").lstat().st_mode & 0o6000, "a setuid file stayed in the user's repo"
    finally:
        sb.close()
    for p in [repo, *repo.rglob("*")]:
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (owner, owner), f"{p} is owned by {st.st_uid}, not the repo's owner {owner}"
        assert not (p.is_file() and st.st_mode & 0o6000), f"{p} is setuid/setgid"
    assert (repo / "app.py").read_text() == "print('hi')\nx\n"


KILLED_OWNER = """
import sys, time
from swe_env.sandbox.bwrap import BwrapConfig, BwrapSandbox
from swe_env.sandbox.limits import StepLimits
from tasks import get_task
sb = BwrapSandbox(get_task(sys.argv[1]), BwrapConfig(install_tools=False, limits=StepLimits(disk_mb=40)))
print(sb.repo.parent, flush=True)
time.sleep(60)
"""


def _mounts_under(folder: Path) -> list[str]:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(f"{folder}/")]


def test_a_sandbox_killed_with_sigkill_leaves_mounts_the_next_sweep_removes(request):
    """The sized filesystem and the repo's overlay are host mounts in the workspace: a kill -9 of their owner
    leaves them, and the start-up sweep of the next process unmounts them before it removes the workspace."""
    request.getfixturevalue("bwrap_installed")
    if os.geteuid() != 0:
        pytest.skip("the sized filesystem is made under root")
    from swe_env.sandbox.owners import sweep

    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_OWNER, TASK_ID], cwd=root, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    try:
        workspace = Path(proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()
    assert len(_mounts_under(workspace)) == 2, "the sized filesystem and the overlay"
    sweep(workspace.parent)
    assert not workspace.exists()
    assert not _mounts_under(workspace)
