"""Stand-ins for vLLM objects that unit tests and ``scripts.bench.pool_overhead``
drive without an engine."""

from __future__ import annotations

import torch


class StandInPoolingModel(torch.nn.Module):
    """A model with what vLLM's ``is_pooling_model`` checks for
    (vllm/model_executor/models/interfaces_base.py: a ``vllm_config`` init
    keyword, ``embed_input_ids``, ``forward`` and ``is_pooling_model``) and
    ``pooler``, the one part MRV2's pooling runner calls. ``embed_input_ids``
    and ``forward`` raise ``NotImplementedError``: the stand-in is for driving
    the pooler with given hidden states, not for running a model."""

    is_pooling_model = True

    def __init__(self, *, vllm_config=None, pooler=None):
        super().__init__()
        self.pooler = pooler

    def embed_input_ids(self, input_ids):
        raise NotImplementedError

    def forward(self, input_ids, positions):
        raise NotImplementedError
