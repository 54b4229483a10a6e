"""Validation: engines on a chosen runner (``engine``), transformers references
(``references``), the checkpoints made at run time (the ``checkpoints``
package), the HF-comparison matrix (the ``matrix`` package), the smoke jobs,
upstream's pooling tests on a line and the ``vllm serve`` harness."""
