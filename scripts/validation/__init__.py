"""Validation: engines on a chosen runner (``engine``), transformers references,
checkpoints made at run time (``models``, ``zoo``), the HF-comparison matrix,
the smoke jobs and the ``vllm serve`` harness."""
