"""The systems a CPU user compares vLLM with, each run in a process of its own
(``scripts.bench.host``): sentence-transformers (the bench's environment),
ONNX Runtime and OpenVINO (the peers' environment, ``.venv-bench``, made
from ``requirements/bench-peers.txt`` by ``make bench-env``: their
transformers and optimum versions differ from vLLM's).

The peers run all-MiniLM-L6-v2 exported with optimum (``optimum-cli export
onnx`` / ``optimum-cli export openvino --weight-format fp32``, task
``feature-extraction``: the encoder's last hidden state), cached under
``.build/bench/exports/`` by what made them (``export``). Each call does
what sentence-transformers' ``encode`` does for this model, as a careful user
writes it: sentences sorted by length (longest first, by characters, as
``SentenceTransformer.encode`` sorts them), batches of ``batch_size`` (64,
sentence-transformers' default) padded to their longest sentence,
tokenised inside the call with the model's own tokenizer (Hugging Face
``tokenizers``, truncated at the model's ``max_seq_length``, 256), the
model, then mean pooling over the attention mask and L2 normalisation
(``mean_pool_normalise``), in float32.

Threads: ONNX Runtime's ``intra_op_num_threads``, OpenVINO's
``INFERENCE_NUM_THREADS``, torch's ``set_num_threads`` for
sentence-transformers; ``None`` leaves each library's default. OpenVINO's
CPU plugin computes in bf16 on CPUs that have it unless told otherwise:
``INFERENCE_PRECISION_HINT`` is ``f32`` here, as the model is.

    python -m scripts.bench.peers export --kind onnx|openvino --model DIR   (in the peers' venv; prints the directory)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from scripts.common.paths import BUILD

EXPORTS = BUILD / "bench" / "exports"
BATCH_SIZE = 64
# what each export needs, recorded in its cache key
EXPORT_PACKAGES = {"onnx": ("optimum", "optimum-onnx", "transformers", "torch", "onnx"),
                   "openvino": ("optimum", "optimum-intel", "transformers", "torch", "openvino")}
EXPORT_FILES = {"onnx": "model.onnx", "openvino": "openvino_model.xml"}


def mean_pool_normalise(hidden, mask):
    """Mean of ``hidden`` [batch, tokens, dim] over the tokens where ``mask``
    [batch, tokens] is 1, then L2-normalised: [batch, dim] float32, as
    sentence-transformers' ``Pooling(mean)`` + ``Normalize`` (the token
    count clamped at 1e-9, the norm at 1e-12)."""
    import numpy as np

    m = mask.astype(np.float32)[..., None]
    pooled = (hidden.astype(np.float32) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    norm = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)


def length_order(items: list[str]) -> list[int]:
    """Indices of ``items`` longest first (by characters; ties in input
    order), the order ``SentenceTransformer.encode`` batches them in."""
    return sorted(range(len(items)), key=lambda i: -len(items[i]))


def max_seq_length(model_dir: Path) -> int:
    """``max_seq_length`` of the model's ``sentence_bert_config.json``
    (tokens; 256 for all-MiniLM-L6-v2); ``FileNotFoundError`` without it."""
    return int(json.loads((Path(model_dir) / "sentence_bert_config.json").read_text())["max_seq_length"])


# --------------------------------------------------------------------------- export (peers' venv)

def _versions(kind: str) -> dict[str, str]:
    return {name: metadata.version(name) for name in EXPORT_PACKAGES[kind]}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export(kind: str, model_dir: Path, root: Path = EXPORTS) -> Path:
    """The model exported for ``kind`` (``onnx`` or ``openvino``), fp32:
    the cached directory when one exists for the same weights
    (``model.safetensors``' sha256) and the same exporter versions, else
    made with ``optimum-cli export`` (into a scratch directory renamed into
    place, so an interrupted export leaves nothing). Runs in the peers'
    environment. ``KeyError`` for another kind; ``CalledProcessError`` when
    optimum fails (its output is on standard error)."""
    model_dir = Path(model_dir)
    versions = _versions(kind)
    key = hashlib.sha256(json.dumps({"kind": kind, "versions": versions,
                                     "weights": _sha256(model_dir / "model.safetensors")},
                                    sort_keys=True).encode()).hexdigest()[:12]
    out = Path(root) / f"{kind}-{key}"
    if (out / EXPORT_FILES[kind]).exists():
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", kind, "--model", str(model_dir),
           "--task", "feature-extraction", "--library", "transformers"]
    if kind == "openvino":
        cmd += ["--weight-format", "fp32"]
    subprocess.run([*cmd, str(tmp)], check=True, stdout=sys.stderr)
    (tmp / "export.json").write_text(json.dumps({"kind": kind, "versions": versions, "model": str(model_dir),
                                                 "command": cmd}, indent=2))
    shutil.copyfile(model_dir / "sentence_bert_config.json", tmp / "sentence_bert_config.json")
    tmp.rename(out)
    return out


def export_in(python: str, kind: str, model_dir: Path) -> Path:
    """``export`` run by the interpreter ``python`` (the peers' venv), from
    the bench: the export's directory. ``CalledProcessError`` when it fails,
    ``OSError`` when ``python`` cannot start."""
    from scripts.common.paths import REPO

    done = subprocess.run([python, "-m", "scripts.bench.peers", "export", "--kind", kind, "--model", str(model_dir)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, stdout=subprocess.PIPE,
                          text=True)
    return Path(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- systems (run in a host)

class _Batched:
    """What ONNX Runtime and OpenVINO share: tokenisation, the batches
    sorted by length, pooling (see the module docstring); ``_forward(ids,
    mask, types)`` -> last hidden state [batch, tokens, dim] is the
    runtime's."""

    def __init__(self, model_dir: str, threads: int | None, batch_size: int = BATCH_SIZE):
        from tokenizers import Tokenizer

        self.model_dir, self.threads, self.batch_size = Path(model_dir), threads, batch_size
        config = json.loads((self.model_dir / "tokenizer_config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        self.max_length = max_seq_length(self.model_dir)
        self.tokenizer.enable_truncation(max_length=self.max_length)
        pad = config.get("pad_token", "[PAD]")
        self.tokenizer.enable_padding(pad_id=self.tokenizer.token_to_id(pad), pad_token=pad)

    def _batch(self, texts: list[str]):
        import numpy as np

        enc = self.tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in enc], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
        types = np.asarray([e.type_ids for e in enc], dtype=np.int64)
        return ids, mask, types

    def op_embed(self, items: list[str], return_embeddings: bool = False):
        """Embeddings of ``items``: ``{"n": count, "dim": d}``, and the
        [n, d] float32 array (input order) when ``return_embeddings``."""
        import numpy as np

        order = length_order(items)
        out = None
        for start in range(0, len(items), self.batch_size):
            idx = order[start:start + self.batch_size]
            ids, mask, types = self._batch([items[i] for i in idx])
            pooled = mean_pool_normalise(self._forward(ids, mask, types), mask)
            if out is None:
                out = np.empty((len(items), pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled
        dim = 0 if out is None else out.shape[1]
        return {"n": len(items), "dim": dim}, (out if return_embeddings else None)

    def _common_info(self) -> dict:
        return {"threads": self.threads, "batch_size": self.batch_size, "max_length": self.max_length,
                "model_dir": str(self.model_dir), "python": sys.executable,
                "torch_loaded": "torch" in sys.modules}


class OnnxRuntimeSystem(_Batched):
    """ONNX Runtime's CPU execution provider on ``model_dir/model.onnx``
    (``export``), ``threads`` intra-op threads (``None``: ORT's default,
    one per physical core), one inter-op thread, graph optimisations at
    ORT's default level (all)."""

    def __init__(self, model_dir: str, threads: int | None = None, batch_size: int = BATCH_SIZE):
        import onnxruntime as ort

        super().__init__(model_dir, threads, batch_size)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(self.model_dir / "model.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.version = ort.__version__

    def _forward(self, ids, mask, types):
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.session.run(["last_hidden_state"], {k: v for k, v in feed.items() if k in self.inputs})[0]

    def info(self) -> dict:
        """Versions and settings of this system (for the report)."""
        return {"system": "onnxruntime", "version": self.version, **self._common_info(),
                "providers": self.session.get_providers()}


class OpenVinoSystem(_Batched):
    """OpenVINO's CPU plugin on ``model_dir/openvino_model.xml`` (``export``),
    f32 inference precision, latency hint, ``threads`` inference threads
    (``None``: OpenVINO's default)."""

    def __init__(self, model_dir: str, threads: int | None = None, batch_size: int = BATCH_SIZE):
        import openvino as ov

        super().__init__(model_dir, threads, batch_size)
        core = ov.Core()
        self.config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            self.config["INFERENCE_NUM_THREADS"] = threads
        model = core.read_model(str(self.model_dir / "openvino_model.xml"))
        self.compiled = core.compile_model(model, "CPU", self.config)
        self.request = self.compiled.create_infer_request()
        self.inputs = {i.get_any_name() for i in self.compiled.inputs}
        self.output = self.compiled.output("last_hidden_state")
        self.version = ov.get_version()
        self.precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))

    def _forward(self, ids, mask, types):
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return self.request.infer({k: v for k, v in feed.items() if k in self.inputs})[self.output]

    def info(self) -> dict:
        """Versions and settings of this system (for the report)."""
        return {"system": "openvino", "version": self.version, **self._common_info(),
                "inference_precision": self.precision}


class SentenceTransformersSystem:
    """sentence-transformers on ``model_dir`` on the CPU, fp32, its
    ``encode(batch_size=64)`` (sorted by length inside; tokenisation in the
    call), ``threads`` torch threads (``None``: torch's default)."""

    def __init__(self, model_dir: str, threads: int | None = None, batch_size: int = BATCH_SIZE):
        import torch
        from sentence_transformers import SentenceTransformer

        if threads:
            torch.set_num_threads(threads)
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.threads, self.batch_size = torch.get_num_threads(), batch_size

    def op_embed(self, items: list[str], return_embeddings: bool = False):
        """As ``_Batched.op_embed``: ``{"n", "dim"}`` and the embeddings when asked."""
        out = self.model.encode(items, batch_size=self.batch_size, convert_to_numpy=True)
        return {"n": len(items), "dim": int(out.shape[1])}, (out if return_embeddings else None)

    def op_token_embed(self, items: list[str]):
        """Token embeddings of ``items``, each L2-normalised per token (as
        vLLM's ``token_embed``); ``{"n": count, "tokens": total}``."""
        import torch

        out = self.model.encode(items, batch_size=self.batch_size, output_value="token_embeddings")
        out = [torch.nn.functional.normalize(t, dim=-1) for t in out]
        return {"n": len(items), "tokens": sum(int(t.shape[0]) for t in out)}

    def info(self) -> dict:
        """Versions and settings of this system (for the report)."""
        import sentence_transformers
        import torch

        return {"system": "sentence-transformers", "version": sentence_transformers.__version__,
                "torch": torch.__version__, "threads": self.threads, "batch_size": self.batch_size,
                "python": sys.executable}


def main(argv=None) -> int:
    """Command line: ``export`` (prints the export's directory last)."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.peers", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="export the model for a peer (cached), print its directory")
    ex.add_argument("--kind", choices=sorted(EXPORT_FILES), required=True)
    ex.add_argument("--model", required=True, help="the model's directory (sentence-transformers layout)")
    args = parser.parse_args(argv)
    print(export(args.kind, Path(args.model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
