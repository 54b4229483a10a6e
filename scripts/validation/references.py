"""Reference values of the validation matrix: what transformers (or the
architecture's published pooling recipe, composed from transformers modules)
computes on the same weights, fp32 on the CPU. Never derived from vLLM.

Every function takes a checkpoint directory and the inputs, and returns a
list of float32 arrays, one per input (a pooled vector ``[d]``, per-token
values ``[n_tokens, d]`` or a score ``[1]``). Prompts are encoded alone,
without padding, with the checkpoint's own tokenizer, exactly as vLLM
encodes them (special tokens added).

Activations follow transformers' loss semantics, as vLLM's classifier
poolers do (``vllm/model_executor/layers/pooler/activations.py``): sigmoid
for one label, softmax over labels otherwise.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np


def _torch():
    import torch

    return torch


@functools.cache
def _load(model_dir: str, auto_class: str, config_cls: str | None = None):
    """Tokenizer and model of a checkpoint; ``config_cls`` (a transformers
    config class name) reads ``config.json`` with that class instead of the
    one its ``model_type`` / ``auto_map`` names (checkpoints whose published
    config class is remote code that transformers has ported under another
    name: ``scripts/validation/checkpoints/zoo_published.py``)."""
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    kwargs = {}
    if config_cls:  # the class's own model_type, so that transformers' weight conversion for it applies
        fields = json.loads((Path(model_dir) / "config.json").read_text())
        kwargs["config"] = getattr(transformers, config_cls).from_dict(
            {k: v for k, v in fields.items() if k not in ("model_type", "auto_map")})
    model = getattr(transformers, auto_class).from_pretrained(model_dir, dtype=_torch().float32, **kwargs)
    return tok, model.eval()


def _ids(tok, prompt):
    return _torch().tensor([prompt]) if isinstance(prompt, list) else tok(prompt, return_tensors="pt")["input_ids"]


def activation(logits: np.ndarray) -> np.ndarray:
    """sigmoid for one label, softmax over the last axis otherwise."""
    if logits.shape[-1] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows (the last axis) divided by their L2 norm."""
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def forward(model_dir, prompts, auto_class="AutoModel", output="last_hidden_state", bidirectional=False,
            config_cls=None):
    """``output`` of ``transformers.<auto_class>`` for each prompt alone, [len, d].
    ``bidirectional``: every token attends to every other one (a 4-D all-True
    mask, as LlamaBidirectional's published modelling code builds);
    ``config_cls``: see ``_load``."""
    torch = _torch()
    tok, model = _load(str(model_dir), auto_class, config_cls)
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = _ids(tok, p)
            kwargs = {}
            if bidirectional:
                kwargs["attention_mask"] = torch.ones(1, 1, ids.shape[1], ids.shape[1], dtype=torch.bool)
            out.append(getattr(model(input_ids=ids, **kwargs), output)[0].float().numpy())
    return out


POOL = {"CLS": lambda h: h[0], "MEAN": lambda h: h.mean(axis=0), "LAST": lambda h: h[-1]}


def embed(model_dir, prompts, pooling="CLS", bidirectional=False, config_cls=None):
    """Sequence embedding: ``pooling`` (CLS, MEAN or LAST) of the last hidden
    state, L2-normalised (vLLM's embed default)."""
    return [l2_normalize(POOL[pooling](h)) for h in forward(model_dir, prompts, bidirectional=bidirectional,
                                                            config_cls=config_cls)]


def token_embed(model_dir, prompts, config_cls=None, bidirectional=False):
    """Per-token last hidden states, each L2-normalised (``bidirectional``: see ``forward``)."""
    return [l2_normalize(h) for h in forward(model_dir, prompts, bidirectional=bidirectional, config_cls=config_cls)]


def classify(model_dir, prompts):
    """``AutoModelForSequenceClassification`` logits through the activation."""
    return [activation(x) for x in forward(model_dir, prompts, "AutoModelForSequenceClassification", "logits")]


def token_classify(model_dir, prompts):
    """``AutoModelForTokenClassification`` per-token logits through the activation."""
    return [activation(x) for x in forward(model_dir, prompts, "AutoModelForTokenClassification", "logits")]


def cross_encoder_score(model_dir, pairs, config_cls=None):
    """sentence-transformers' CrossEncoder recipe: the tokenizer's pair
    encoding of (query, document) (token type ids included where the
    tokenizer makes them), ``AutoModelForSequenceClassification``, activation."""
    torch = _torch()
    tok, model = _load(str(model_dir), "AutoModelForSequenceClassification", config_cls)
    out = []
    with torch.inference_mode():
        for q, d in pairs:
            enc = tok(q, d, return_tensors="pt")
            out.append(activation(model(**enc).logits[0].numpy()))
    return out


def maxsim(q: np.ndarray, d: np.ndarray) -> float:
    """ColBERT's MaxSim: each query token's best dot product over the document's tokens, summed."""
    return float((q @ d.T).max(axis=1).sum())


def _safetensors(model_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def colbert_tokens(model_dir, prompts, weight="linear.weight", auto_class="AutoModel", config_cls=None):
    """ColBERT token embeddings: the backbone's last hidden state, projected
    by the checkpoint's bias-free ``linear`` and L2-normalised per token."""
    w = _safetensors(model_dir)[weight].numpy()
    return [l2_normalize(h @ w.T) for h in forward(model_dir, prompts, auto_class, config_cls=config_cls)]


def late_interaction_score(model_dir, pairs, **kw):
    """MaxSim of each (query, document) pair over ``colbert_tokens``."""
    return [np.array([maxsim(*colbert_tokens(model_dir, [q, d], **kw))]) for q, d in pairs]


def reward(model_dir, prompts, step_tag_id=None, returned_token_ids=None, use_activation=True):
    """Qwen2.5-Math-RM / PRM recipe (their published ``modeling_qwen2_rm.py``):
    ``Qwen2Model`` hidden states through ``score`` = Linear(h, h), ReLU,
    Linear(h, labels), then the activation unless ``use_activation`` is false
    (the reward model's raw scores: vLLM's ``Qwen2ForRewardModelConfig``,
    ``vllm/model_executor/models/config.py``, defaults ``use_activation`` to
    False); the process reward model keeps the positions whose token is
    ``step_tag_id`` and the label columns ``returned_token_ids``."""
    w = {k: v.numpy() for k, v in _safetensors(model_dir).items() if k.startswith("score.")}
    tok, _ = _load(str(model_dir), "AutoModel")
    out = []
    for p, h in zip(prompts, forward(model_dir, prompts)):
        logits = np.maximum(h @ w["score.0.weight"].T + w["score.0.bias"], 0) @ w["score.2.weight"].T
        logits = logits + w["score.2.bias"]
        if returned_token_ids:
            logits = logits[:, returned_token_ids]
        if step_tag_id is not None:
            logits = logits[_ids(tok, p)[0].numpy() == step_tag_id]
        out.append(activation(logits) if use_activation else logits)
    return out


def splade(model_dir, prompts):
    """SPLADE (sentence-transformers' ``SpladePooling``, max): the masked-LM
    logits, log(1 + ReLU(x)), max over the tokens: one vocabulary-sized vector."""
    logits = forward(model_dir, prompts, "AutoModelForMaskedLM", "logits")
    return [np.log1p(np.maximum(x, 0)).max(axis=0) for x in logits]


def _bgem3(model_dir, prompts):
    torch = _torch()
    sparse = torch.load(Path(model_dir) / "sparse_linear.pt")
    colbert = torch.load(Path(model_dir) / "colbert_linear.pt")
    for h in forward(model_dir, prompts):
        yield h, sparse["weight"].numpy(), sparse["bias"].numpy(), colbert["weight"].numpy(), colbert["bias"].numpy()


def bgem3(model_dir, prompts, part):
    """BGE-M3 (FlagEmbedding's ``BGEM3FlagModel``) on an XLM-R backbone:
    ``dense`` = CLS, normalised; ``sparse`` = ReLU(sparse_linear(h)), one
    weight per token, without the first and last (special) tokens; ``colbert`` =
    colbert_linear(h) of every token but the first, normalised;
    ``dense+sparse`` = the two concatenated (vLLM's ``embed&token_classify``)."""
    out = []
    for h, sw, sb, cw, cb in _bgem3(model_dir, prompts):
        dense, sp = l2_normalize(h[0]), np.maximum(h[1:-1] @ sw.T + sb, 0)[:, 0]
        out.append({"dense": dense, "sparse": sp, "colbert": l2_normalize(h[1:] @ cw.T + cb),
                    "dense+sparse": np.concatenate([dense, sp.reshape(-1)])}[part])
    return out


def qwen3_reranker(model_dir, prompts, yes="yes", no="no"):
    """Qwen3-Reranker recipe: the causal LM's last-token logits of ``yes``
    and ``no``; score = softmax over the two, the ``yes`` share
    (= sigmoid(logit_yes - logit_no))."""
    tok, _ = _load(str(model_dir), "AutoModelForCausalLM")
    y, n = tok.convert_tokens_to_ids(yes), tok.convert_tokens_to_ids(no)
    return [activation(np.array([x[-1, y] - x[-1, n]]))
            for x in forward(model_dir, prompts, "AutoModelForCausalLM", "logits")]


def mlm_logits(model_dir, prompts):
    """Masked-LM per-token logits over the vocabulary (no activation)."""
    return forward(model_dir, prompts, "AutoModelForMaskedLM", "logits")


def bidirectional_classify(model_dir, prompts):
    """NVIDIA's bidirectional Llama rerankers: the mean of the bidirectional
    last hidden states through the ``score`` head, then the activation."""
    w = _safetensors(model_dir)["score.weight"].numpy()
    return [activation(h.mean(axis=0) @ w.T) for h in forward(model_dir, prompts, bidirectional=True)]


def images(n: int = 3, size: int = 32, seed: int = 0) -> list:
    """``n`` deterministic random RGB images (PIL), ``size`` x ``size``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def _two_tower(model_dir, inputs, model_cls: str, processor_cls: str, text_features) -> list:
    """Text prompts through ``text_features(model, processor, text)``, images
    (PIL) through ``get_image_features`` with the checkpoint's processor;
    each feature vector L2-normalised, float32 ``[d]``."""
    import transformers

    torch = _torch()
    processor = getattr(transformers, processor_cls).from_pretrained(str(model_dir))
    model = getattr(transformers, model_cls).from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for x in inputs:
            if isinstance(x, str):
                f = text_features(model, processor, x)
            else:
                f = model.get_image_features(**processor(images=[x], return_tensors="pt"))
            f = getattr(f, "pooler_output", f)
            out.append(l2_normalize(f[0].numpy()))
    return out


def clip(model_dir, inputs):
    """CLIP (transformers ``CLIPModel``): text prompts through
    ``get_text_features``, images (PIL) through ``get_image_features`` with the
    checkpoint's ``CLIPProcessor``; L2-normalised, as CLIP's similarity uses them."""
    return _two_tower(model_dir, inputs, "CLIPModel", "CLIPProcessor", lambda model, processor, x:
                      model.get_text_features(**processor(text=[x], return_tensors="pt")))


SIGLIP_TEXT = {"padding": "max_length", "max_length": 64}  # how SigLIP was trained (and is served)


def siglip(model_dir, inputs):
    """SigLIP (transformers ``SiglipModel``): text prompts padded to 64 tokens
    (``SIGLIP_TEXT``) through ``get_text_features`` on their input ids alone
    (SigLIP's text tower was trained without an attention mask, its pads
    attended; transformers 4's ``SiglipTokenizer`` returned no mask,
    transformers 5's does, and vLLM, as SigLIP, has none), images through
    ``get_image_features`` with the checkpoint's ``SiglipProcessor``;
    L2-normalised (vLLM's embed default)."""
    return _two_tower(model_dir, inputs, "SiglipModel", "SiglipProcessor", lambda model, processor, x:
                      model.get_text_features(input_ids=processor(text=[x], return_tensors="pt",
                                                                  **SIGLIP_TEXT)["input_ids"]))


# --- references of the smoke job, the benchmarks and the e2e tests (also importable from
# scripts.validation.engine) ---------------------------------------------------------------


def st_embed(model_dir, sentences: list[str], batch_size: int = 64) -> np.ndarray:
    """sentence-transformers reference embeddings, fp32 on the CPU, shape (N, d)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    return model.encode(sentences, batch_size=batch_size, convert_to_numpy=True).astype(np.float32)


def hf_pair_scores(model_dir, first: list[str], second: list[str]) -> np.ndarray:
    """transformers reference of a one-label cross-encoder's ``LLM.score``:
    the sigmoid of the logit of each pair ``(first[i], second[i])``, tokenized
    as a pair (token types included), fp32, shape (N,) (``cross_encoder_score``)."""
    return np.asarray([s[0] for s in cross_encoder_score(model_dir, list(zip(first, second)))], dtype=np.float32)


def hf_last_token_embed(model_dir, prompts: list) -> np.ndarray:
    """transformers reference of last-token pooling: the final hidden state of
    each prompt's last token, L2-normalised, fp32, shape (N, d). Mirrors the
    default pooler of a decoder run as an embedding model in vLLM."""
    return np.stack(embed(model_dir, prompts, pooling="LAST"))


def hf_mean_embed(model_dir, prompts: list) -> np.ndarray:
    """transformers reference of mean pooling over all tokens, L2-normalised,
    fp32, shape (N, d): what sentence-transformers computes for MiniLM."""
    return np.stack(embed(model_dir, prompts, pooling="MEAN"))
