"""The deployment files as an operator uses them: safe by default (issue 31).

- deploy/docker-compose.yml, through a real compose implementation (``podman-compose config``,
  which parses and interpolates the file without a container engine): without
  ``CROSSFEED_INBOUND_KEYS``, or with it empty, the configuration fails with the message that says
  what to set; with it, the key reaches the crossfeed service. No literal default key anywhere;
  every published port on 127.0.0.1.
- deploy/smoke.sh runs the compose service's settings flag for flag.
- Every container example in README.md, deploy/README.md and the Dockerfile's header: published on
  127.0.0.1, with a key, and no docker-only flag in a podman command.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import ROOT
from tests.support.services import require_service

COMPOSE = ROOT / "deploy" / "docker-compose.yml"
KEY_MESSAGE = "set CROSSFEED_INBOUND_KEYS to the comma-separated client keys"


def compose_config(tmp_path: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``podman-compose config`` on a copy of the compose file (so no deploy/.env of a developer
    supplies the key), in an environment without any CROSSFEED_ or COMPOSE_ variable."""
    try:
        import podman_compose  # noqa: F401
    except ImportError:
        require_service("podman-compose", "pip install -e '.[test]' (podman-compose is in the test extra)")
    project = tmp_path / "deploy"
    project.mkdir(exist_ok=True)
    (project / "docker-compose.yml").write_text(COMPOSE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROSSFEED_", "COMPOSE_", "PODMAN_"))}
    env |= extra_env
    # --dry-run: config only, no podman needed (nor asked for its version)
    return subprocess.run(
        [sys.executable, "-m", "podman_compose", "--dry-run", "-f", str(project / "docker-compose.yml"), "config"],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_compose_refuses_to_start_without_inbound_keys(tmp_path: Path, value: str | None) -> None:
    r = compose_config(tmp_path, {} if value is None else {"CROSSFEED_INBOUND_KEYS": value})
    assert r.returncode != 0, r.stdout
    assert KEY_MESSAGE in r.stderr
    assert "crossfeed:" not in r.stdout  # nothing resolved, nothing to start


def test_compose_passes_the_key_and_publishes_on_loopback(tmp_path: Path) -> None:
    import yaml

    r = compose_config(tmp_path, {"CROSSFEED_INBOUND_KEYS": "sk-one,sk-two"})
    assert r.returncode == 0, r.stderr
    resolved = yaml.safe_load(r.stdout)
    crossfeed = resolved["services"]["crossfeed"]
    assert crossfeed["environment"]["CROSSFEED_INBOUND_KEYS"] == "sk-one,sk-two"
    assert crossfeed["ports"] == ["127.0.0.1:8080:8080"]


def compose_file() -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def test_compose_has_no_default_key_and_no_public_port() -> None:
    text = COMPOSE.read_text()
    services = compose_file()["services"]
    env = services["crossfeed"]["environment"]
    assert env["CROSSFEED_INBOUND_KEYS"] == "${CROSSFEED_INBOUND_KEYS:?" + KEY_MESSAGE + "}"
    # no fallback value for any variable (`${X:-default}`, `${X-default}`) and no sample key
    assert not re.search(r"\$\{[A-Z0-9_]+:?-", text), "a compose variable has a default value"
    assert "change-me" not in text
    for name, service in services.items():
        for port in service.get("ports", []):
            spec = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}"
            assert str(spec).startswith("127.0.0.1:"), f"{name} publishes {spec!r} beyond the host's loopback"


def smoke_array(name: str) -> list[str]:
    """A bash array of deploy/smoke.sh (``name=( ... )``), as words."""
    text = (ROOT / "deploy" / "smoke.sh").read_text()
    m = re.search(rf"^{name}=\((.*?)\)$", text, re.MULTILINE | re.DOTALL)
    assert m, f"no {name}=(...) in deploy/smoke.sh"
    return shlex.split(m.group(1), comments=True)


def test_smoke_runs_the_compose_settings() -> None:
    """deploy/smoke.sh's `compose` run uses the compose service's settings, flag for flag."""
    service = compose_file()["services"]["crossfeed"]
    flags = smoke_array("compose_flags")
    pairs = {(flags[i], flags[i + 1]) for i in range(len(flags) - 1)}

    assert service["read_only"] is True and "--read-only" in flags
    for path in service["tmpfs"]:
        assert ("--tmpfs", path) in pairs
    for opt in service["security_opt"]:
        assert ("--security-opt", opt) in pairs
    for volume in service["volumes"]:
        source, target, *mode = volume.split(":")
        if source.startswith("./"):  # the config file; named volumes are the image's own here
            mount = f"$here/{source[2:]}:{target}{':' + mode[0] if mode else ''}"
            assert ("-v", mount) in pairs, f"smoke.sh does not mount {volume}"
    for key, value in service["environment"].items():
        if key == "CROSSFEED_UPSTREAM":
            continue  # the fake upstream's address, set on every run
        if key == "CROSSFEED_INBOUND_KEYS":
            assert ("-e", "CROSSFEED_INBOUND_KEYS=$compose_key") in pairs
        else:
            assert ("-e", f"{key}={value}") in pairs, f"smoke.sh does not set {key}"
    assert smoke_array("compose_args") == service["command"]
    assert service["ports"] == ["127.0.0.1:8080:8080"]  # smoke.sh publishes every run on 127.0.0.1
    smoke = (ROOT / "deploy" / "smoke.sh").read_text()
    assert 'publish=(-p "127.0.0.1:$port:8080")' in smoke
    assert 'run_checks compose --key "$compose_key" "${compose_flags[@]}" -- "${compose_args[@]}"' in smoke


# -- the examples in the docs ---------------------------------------------------------------------


def run_commands(path: Path) -> list[str]:
    """Every `docker run` / `podman run` of crossfeed's image in a file, continuation lines joined
    (comment markers of the Dockerfile's header dropped)."""
    lines = [
        re.sub(r"^\s*#\s?", "", line) if path.name == "Dockerfile" else line for line in path.read_text().splitlines()
    ]
    commands = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if re.match(r"(docker|podman) run\b", line):
            command = line
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            commands.append(" ".join(command.split()))
        i += 1
    return commands


DOC_FILES = [ROOT / "README.md", ROOT / "deploy" / "README.md", ROOT / "Dockerfile"]


def test_container_examples_publish_on_loopback_with_a_key() -> None:
    seen = 0
    for path in DOC_FILES:
        for command in run_commands(path):
            words = shlex.split(command.split(" #", 1)[0])
            image = "crossfeed" in words or any(w.startswith("localhost/crossfeed") for w in words)
            ports = [words[k + 1] for k, w in enumerate(words) if w == "-p"] + [
                w.split("=", 1)[1] for w in words if w.startswith(("-p=", "--publish="))
            ]
            for port in ports:
                assert port.startswith("127.0.0.1:"), f"{path.name}: `{command}` publishes {port} beyond loopback"
            if words[0] == "podman":
                assert not any("host-gateway" in w for w in words), f"{path.name}: docker's flag in `{command}`"
            if image:
                seen += 1
                assert ports, f"{path.name}: `{command}` publishes no port"
                # the key: its value, or `-e CROSSFEED_INBOUND_KEYS` passing the caller's on
                assert any(w.startswith("CROSSFEED_INBOUND_KEYS") for w in words), (
                    f"{path.name}: `{command}` has no key"
                )
    assert seen >= 6  # README (docker, podman), deploy/README.md (env, file, read-only; each engine), Dockerfile


def test_docker_examples_have_a_podman_variant() -> None:
    """Where a docker example needs docker's --add-host, the same file shows the podman command."""
    for path in (ROOT / "README.md", ROOT / "deploy" / "README.md"):
        commands = run_commands(path)
        for command in commands:
            if command.startswith("docker run") and "host-gateway" in command:
                expected = (
                    command.replace("docker run", "podman run", 1)
                    .replace(" --add-host=host.docker.internal:host-gateway", "")
                    .replace("host.docker.internal", "host.containers.internal")
                )
                assert expected in commands, f"{path.name}: no podman variant of `{command}`"


def test_no_sample_key_in_the_docs() -> None:
    for path in (*DOC_FILES, COMPOSE, ROOT / "deploy" / "kubernetes-sidecar.yaml"):
        assert "change-me" not in path.read_text(), path
