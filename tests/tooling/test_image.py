"""``make image`` (``scripts/series/image.py``, ``docker/Containerfile.cpu``):
the CPU flavor's image built as a platform team builds it (on a Debian base
made from Debian's archive), its server started the way the image is
configured to start (its entrypoint, its user, its environment), asked for
embeddings by the ``openai`` client and for its health by the image's own
health check. Containers run with buildah (``--isolation chroot``, the host's
network), which is what runs them on these machines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from scripts.common.paths import REPO
from scripts.series.image import DEBIAN_BASE, ImageError, build, image_tag
from scripts.validation.checkpoints.models import minilm_path
from scripts.validation.engine import expected_input_preparation
from scripts.validation.references import hf_mean_embed
from scripts.validation.server import VllmServer
from tests.tooling.test_wheel import BASE, cpu_wheel  # noqa: F401 - fixture

IMAGE = f"localhost/vllm-mrv2pool-cpu:test-{os.getpid()}"
# The port the image exposes and its health check asks (the container shares this machine's network).
IMAGE_PORT = 8000
SENTENCES = ["A man is playing a guitar.", "A woman is slicing an onion.", "The cat sits on the mat."]


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=check)


def image_config(name: str) -> dict:
    """The image's Docker-format configuration (entrypoint, user, env, health check)."""
    return json.loads(buildah("inspect", "--type", "image", name).stdout)["Docker"]["config"]


def layers(name: str) -> list[str]:
    """The diff ids of the image's layers, the first one first."""
    return json.loads(buildah("inspect", "--type", "image", name).stdout)["OCIv1"]["rootfs"]["diff_ids"]


class ImageServer(VllmServer):
    """``VllmServer``'s ``vllm serve`` run in a container of ``image``
    (``buildah run --isolation chroot``: the host's network and process
    table): the image's entrypoint and user, the model directory mounted
    read-only at ``/models/<name>``, and this repository's ``scripts`` at
    ``/opt/probe/scripts`` for the worker probe. The container is removed
    when the server stops."""

    def __init__(self, image: str, model: Path, **kwargs):
        super().__init__(model, executable="vllm", **kwargs)
        self.container = buildah("from", image).stdout.strip()
        entrypoint = image_config(image)["Entrypoint"]
        inside = f"/models/{self.name}"
        # vllm serve's arguments as VllmServer builds them, with the model's path as the container
        # sees it and the image's port, which its health check asks
        args = self.cmd[2:]
        args[args.index(self.model)] = inside
        args[args.index("--port") + 1] = str(IMAGE_PORT)
        self.port = IMAGE_PORT
        env = ["HF_HUB_OFFLINE=1", "PYTHONPATH=/opt/probe"]
        if "VLLM_SERVER_DEV_MODE" in self.env:
            env.append("VLLM_SERVER_DEV_MODE=1")
        self.cmd = ["buildah", "run", "--isolation", "chroot",
                    "-v", f"{self.model}:{inside}:ro", "-v", f"{REPO / 'scripts'}:/opt/probe/scripts:ro",
                    *[x for e in env for x in ("--env", e)], self.container, "--", *entrypoint, *args]

    def exec(self, *cmd: str) -> subprocess.CompletedProcess:
        """``cmd`` run in the server's container (beside the server)."""
        return buildah("run", "--isolation", "chroot", self.container, "--", *cmd, check=False)

    def stop(self, timeout: float = 60.0) -> int | None:
        try:
            return super().stop(timeout)
        finally:
            buildah("rm", self.container, check=False)


def server_processes(server: ImageServer) -> dict[int, str]:
    """The server's Python processes by pid (this machine's pids: chroot
    isolation shares the process table) with their command lines: the API
    server, the engine core, the worker and multiprocessing's resource
    tracker, all under the ``buildah run`` process group."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "-g", str(server.proc.pid)], capture_output=True, text=True)
    rows = [line.split(maxsplit=1) for line in out.stdout.splitlines()]
    return {int(pid): args for pid, args in rows if args.startswith(("/opt/venv/bin/python3 ", "VLLM::"))}


@pytest.fixture(scope="module")
def image(cpu_wheel):  # noqa: F811 - the fixture
    """The CPU image of the line's wheel, built by ``make image`` under a
    name of this test's own; removed afterwards (the Debian base is kept, as
    ``make image`` keeps it)."""
    subprocess.run(["make", "--no-print-directory", f"LINE={BASE.version}", f"IMAGE={IMAGE}", "BASE_IMAGE=", "image"],
                   cwd=REPO, check=True)
    yield IMAGE
    buildah("rmi", IMAGE, check=False)


def test_image_tag_names_flavor_and_version():
    assert (image_tag(Path("vllm-0.32.0+mrv2pool.12.cpu-cp38-abi3-linux_x86_64.whl"))
            == "localhost/vllm-mrv2pool-cpu:0.32.0-mrv2pool.12")
    assert (image_tag(Path("vllm-0.32.0+mrv2pool.12-cp38-abi3-linux_x86_64.whl"))
            == "localhost/vllm-mrv2pool-cuda:0.32.0-mrv2pool.12")


def test_a_missing_wheel_is_named_with_the_fix(tmp_path):
    missing = tmp_path / "vllm-0.32.0+mrv2pool.12.cpu-cp38-abi3-linux_x86_64.whl"
    with pytest.raises(ImageError, match=r"does not exist\.\nFix: make wheel"):
        build(missing)


@pytest.mark.slow
def test_image_is_configured_as_upstreams_cpu_image(image):
    """Entrypoint ``vllm serve``, a non-root user, port 8000, tcmalloc and
    Intel's OpenMP preloaded (files the image holds), a health check on
    ``/health``; built on the Debian base made from Debian's archive."""
    config = image_config(image)
    assert config["Entrypoint"] == ["vllm", "serve"]
    assert config["User"] == "vllm"
    assert config["ExposedPorts"] == {"8000/tcp": {}}
    env = dict(e.split("=", 1) for e in config["Env"])
    preload = env["LD_PRELOAD"].split(":")
    assert preload == ["/opt/venv/lib/python3.11/site-packages/vllm/libs/libtcmalloc_minimal.so.4",
                       "/opt/venv/lib/libiomp5.so"]
    assert config["Healthcheck"]["Test"][0] == "CMD"
    assert "http://127.0.0.1:8000/health" in config["Healthcheck"]["Test"][-1]
    assert config["Labels"]["org.opencontainers.image.version"] == BASE.flavor_version("cpu")
    # its first layer is the Debian base's only one: the root file system debootstrap made
    (base_layer,) = layers(DEBIAN_BASE)
    assert layers(image)[0] == base_layer
    container = buildah("from", image).stdout.strip()
    try:
        listed = subprocess.run(["buildah", "run", "--isolation", "chroot", container, "--", "ls", *preload],
                                capture_output=True, text=True)
        assert listed.returncode == 0, listed.stderr
        version = subprocess.run(["buildah", "run", "--isolation", "chroot", container, "--", "vllm", "--version"],
                                 capture_output=True, text=True)
        assert version.stdout.strip() == BASE.flavor_version("cpu")
    finally:
        buildah("rm", container, check=False)


@pytest.mark.slow
def test_image_serves_embeddings_on_mrv2(image):
    """The image's server, started by its entrypoint as its user: ready on
    ``/health``, its health check passes, the ``openai`` client's embeddings
    equal transformers' (mean pooling, what sentence-transformers computes
    for all-MiniLM-L6-v2) within 1e-5 cosine, computed on MRV2 with native
    input preparation, in processes of uid 1000 with tcmalloc and libiomp5
    mapped."""
    import openai

    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", IMAGE_PORT)) != 0, f"port {IMAGE_PORT} is in use: stop what listens there"
    with ImageServer(image, minilm_path(), name="all-MiniLM-L6-v2") as server:
        assert server.runner() == "MRV2"
        assert server.input_preparation() == expected_input_preparation() == "native"
        client = openai.OpenAI(base_url=server.url("/v1"), api_key="unused")
        data = client.embeddings.create(model=server.served_model(), input=SENTENCES).data
        got = np.asarray([d.embedding for d in data], dtype=np.float64)
        want = hf_mean_embed(minilm_path(), SENTENCES).astype(np.float64)
        cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cosine.min() >= 0.99999
        health = image_config(image)["Healthcheck"]["Test"][1:]
        checked = server.exec(*health)
        assert checked.returncode == 0, checked.stderr
        processes = server_processes(server)
        kinds = sorted("api server" if " /opt/venv/bin/vllm serve " in args else args.split()[0]
                       for args in processes.values() if "resource_tracker" not in args)
        assert kinds == ["VLLM::EngineCore", "VLLM::Worker", "api server"]
        for pid in processes:
            status = Path(f"/proc/{pid}/status").read_text()
            uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert (uid, "libtcmalloc_minimal.so.4" in maps, "libiomp5.so" in maps) == ("1000", True, True), pid
