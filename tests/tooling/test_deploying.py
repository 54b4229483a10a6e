"""``docs/deploying.md`` true to what it deploys: its Kubernetes manifests
are valid against the Kubernetes API schema (``kubernetes-validate``, strict:
an unknown field fails), agree with the image (port, user, entrypoint's
arguments), and every ``vllm serve`` command it gives, the manifest's
arguments included, parses with the line's own ``vllm serve`` parser."""

from __future__ import annotations

import re
import shlex

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from scripts.common.paths import REPO

PAGE = REPO / "docs" / "deploying.md"
# the oldest Kubernetes release the page promises, and the newest the schema package knows
KUBERNETES = ("1.32", latest_version())


def manifests() -> list[dict]:
    """The documents of the page's ```yaml blocks."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block)]


def serve_commands() -> list[list[str]]:
    """The ``vllm serve`` arguments of each command on the page (indented
    blocks, ``\\`` continuations joined): those after ``vllm serve``, and
    those after the image's name in a ``docker run`` (its entrypoint is
    ``vllm serve``)."""
    commands = []
    for line in PAGE.read_text().replace("\\\n", " ").splitlines():
        if not line.startswith("    "):
            continue
        if "vllm serve " in line:
            commands.append(shlex.split(line.split("vllm serve", 1)[1]))
        elif line.strip().startswith("docker run "):
            words = shlex.split(line)
            image = next(i for i, w in enumerate(words) if "/vllm-mrv2pool-cpu:" in w)
            commands.append(words[image + 1:])
    return commands


def serve_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def image_port() -> int:
    """The port ``docker/Containerfile.cpu`` exposes."""
    (port,) = re.findall(r"^EXPOSE (\d+)$", (REPO / "docker" / "Containerfile.cpu").read_text(), re.M)
    return int(port)


def deployment() -> dict:
    (dep,) = [m for m in manifests() if m["kind"] == "Deployment"]
    return dep


def test_page_has_a_deployment_and_a_service():
    assert [(m["apiVersion"], m["kind"]) for m in manifests()] == [("apps/v1", "Deployment"), ("v1", "Service")]


@pytest.mark.parametrize("version", KUBERNETES)
def test_manifests_are_valid_kubernetes(version):
    for manifest in manifests():
        kubernetes_validate.validate(manifest, version, strict=True)


def test_a_wrong_field_fails_the_schema():
    """The check above can fail: a misspelt probe field and a port given as
    text are refused."""
    dep = deployment()
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(dep, KUBERNETES[0], strict=True)
    service = manifests()[1]
    service["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(kubernetes_validate.ValidationError, match="'eighty' is not of type 'integer'"):
        kubernetes_validate.validate(service, KUBERNETES[0], strict=True)


def test_deployment_agrees_with_the_image_and_its_server():
    """The container's port is the image's, its probes ask ``/health`` there,
    it runs as the image's user under Pod Security's "restricted" rules, the
    grace period outlasts the drain (twice ``--shutdown-timeout`` plus the
    preStop sleep), the model's directory is a mounted volume, ``/dev/shm``
    is memory, and the Service sends to the named port."""
    dep = deployment()
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = serve_parser().parse_args(container["args"])
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"], args.port, args.host) == ("http", image_port(), image_port(),
                                                                           "0.0.0.0")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (1000, True)
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    # the drain, and the engine's own drain after it when requests outlast it (docs: Draining)
    assert pod["terminationGracePeriodSeconds"] > 2 * args.shutdown_timeout + int(sleep[1])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes)
    assert args.model_tag.rsplit("/", 1)[0] in mounts
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    # Pod Security "restricted": what it requires of the pod and the container
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    service = manifests()[1]
    assert service["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_every_serve_command_parses():
    """Each ``vllm serve`` command of the page (four: docker run, buildah run, the serve
    command, the manifest's arguments) is accepted by the line's parser; a misspelt
    option is not."""
    parser = serve_parser()
    commands = [*serve_commands(), deployment()["spec"]["template"]["spec"]["containers"][0]["args"]]
    assert len(commands) == 4
    for argv in commands:
        args = parser.parse_args(argv)
        assert args.served_model_name == ["all-MiniLM-L6-v2"]
        assert args.dtype == "float32"
    with pytest.raises(SystemExit):
        parser.parse_args(["/models/m", "--max-inputs-per-requests", "256"])
