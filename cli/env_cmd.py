"""`nexus-agent env build|prune|status`: the docker images built-in tasks run in, leftovers, what is available."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.console import console
from cli.errors import json_flag

env_app = typer.Typer(
    no_args_is_help=True, help="Sandbox environments: build the offline docker images, prune leftovers, show status."
)


@env_app.command("build")
def build(
    force: bool = typer.Option(False, "--force", help="Rebuild every step, even those whose result exists."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Where the rootfs tarball is kept between runs."),
) -> None:
    """Build nexus-agent/base:bookworm (debootstrap -> docker import) and the built-in task image FROM it."""
    from swe_env.dockerd import connect  # lazy: docker, urllib, off --help
    from swe_env.images import ImageBuildConfig, build_images  # lazy: docker, urllib, off --help

    console = Console()
    cfg = ImageBuildConfig(force=force)
    if cache_dir is not None:
        cfg.cache_dir = cache_dir
    start = time.monotonic()

    def log(msg: str) -> None:
        console.print(f"[dim]{time.monotonic() - start:6.1f}s[/dim] {msg}", highlight=False)

    with console.status("building images"):
        tags = build_images(connect(for_sandbox=False), cfg, log)
    console.print(f"[green]ready:[/green] {', '.join(tags)}")


@env_app.command("prune")
def prune(
    images: bool = typer.Option(False, "--images", help="Also remove the nexus-agent/* images."),
    envs: bool = typer.Option(False, "--envs", help="Also remove the cached task Python envs."),
) -> None:
    """Remove every container labelled nexus-agent=1 (leftovers of interrupted runs)."""
    from swe_env.dockerd import connect  # lazy: docker, urllib, off --help

    client = connect(for_sandbox=False)
    containers = client.containers.list(all=True, filters={"label": "nexus-agent=1"})
    for container in containers:
        container.remove(force=True)
    typer.echo(f"removed {len(containers)} container(s)")
    if envs:
        from swe_env.pyenv import default_cache_dir  # lazy: urllib, off --help

        cached = [p for p in default_cache_dir().glob("*") if p.is_dir()] if default_cache_dir().is_dir() else []
        for path in cached:
            shutil.rmtree(path, ignore_errors=True)
            path.with_name(path.name + ".ready.json").unlink(missing_ok=True)  # the host's record of it
        volumes = client.volumes.list(filters={"label": "nexus-agent=1"})  # env volumes of earlier versions
        for volume in volumes:
            volume.remove(force=True)
        typer.echo(f"removed {len(cached)} cached env(s) from {default_cache_dir()} and {len(volumes)} volume(s)")
    if images:
        removed = 0
        for image in client.images.list(filters={"reference": "nexus-agent/*"}):
            for tag in image.tags:
                client.images.remove(tag, force=True)
                removed += 1
        typer.echo(f"removed {removed} image tag(s)")


@env_app.command("recipe")
def recipe(
    instance_id: str = typer.Argument(..., help="The task's instance_id."),
    dataset: str = typer.Option(None, "--dataset", "-d", help="Task source (default: built-in tasks)."),
) -> None:
    """The task's environment: its recipe (and source), the interpreter found for it, its cache key, built or not."""
    from swe_env.pyenv import plan_env  # lazy: urllib, off --help
    from swe_env.testspec import test_command  # lazy: docker, pyarrow, off --help
    from tasks import get_task  # lazy: urllib, off --help

    task = get_task(instance_id, dataset)
    env = plan_env(task, Path("/nonexistent"))  # requirement files are read from the working copy at build time
    r = env.recipe
    built = sorted(env.path.parent.glob(env.key.rsplit("__", 1)[0] + "__*.ready.json"))
    rows = {
        "recipe": r.source,
        "python": f"{r.python}: {env.interpreter.describe()}",
        "packages": " ".join([*r.packages, *(["+ the repo's requirements file"] if _from_file(task) else [])]) or "-",
        "pre-install": "; ".join(r.pre_install) or "-",
        "install": r.install or "- (the working copy is imported)",
        "test command": test_command(task),
        "cached": "\n".join(str(p)[: -len(".ready.json")] for p in built)
        or f"none (first use builds it under {env.path.parent})",
    }
    table = Table(show_header=False)
    for key, value in rows.items():
        table.add_row(key, value)
    Console().print(table, markup=False, highlight=False)


def _from_file(task) -> bool:
    from swe_env.envs.recipes import swebench_specs  # lazy: urllib, off --help

    return (swebench_specs(task.repo, task.version) or {}).get("packages") == "requirements.txt"


PACKAGES = {"bwrap": "bubblewrap", "debootstrap": "debootstrap", "dockerd": "docker.io"}  # the Debian package of
# each tool env status looks for (as scripts/test.sh installs them)


@env_app.command("status")
def status(as_json: bool = json_flag("Print the status as JSON (for scripts).")) -> None:
    """What sandboxes can run here: docker daemon and images, bubblewrap, debootstrap, leftovers."""

    from pipeline.env_status import environment_status  # lazy: docker, urllib, off --help

    found = environment_status()
    if as_json:
        typer.echo(json.dumps(found, indent=2))
        return
    table = Table(show_header=False)
    for tool, installed in found["tools"].items():
        table.add_row(tool, _yes(installed, "installed", f"missing (apt-get install -y {PACKAGES.get(tool, tool)})"))
    docker = found["docker"]
    if docker["answers"]:
        table.add_row("docker daemon", f"[green]answers[/green] ({docker['url']})")
        for tag, present in docker["images"].items():
            table.add_row(tag, _yes(present, "present", "missing (nexus-agent env build)"))
        left = docker["leftover_containers"]
        table.add_row("leftover containers", str(left) + (" (nexus-agent env prune)" if left else ""))
    else:
        table.add_row("docker daemon", "[red]not answering[/red] (see below)")
    out = console()
    out.print(table)
    if not docker["answers"]:
        out.print(docker["problem"], soft_wrap=True, highlight=False, markup=False)


def _yes(ok: bool, good: str, bad: str) -> str:
    return f"[green]{good}[/green]" if ok else f"[red]{bad}[/red]"
