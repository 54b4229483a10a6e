"""The validation matrix (``make matrix``, ``python -m scripts.validation.matrix``):
every pooling architecture of the base's registry, checked task by task on
the default runner and on V1 against transformers on the same weights.

Modules: ``tasks`` (``Task``, ``MatrixCase``, the inputs and the engine call
per task), ``rows`` (the cases, as data), ``real`` (the real-weight and MTEB
STS rows), ``inventory`` (the registry's pooling architectures and their
status), ``selector_cases`` (architectures the runner selection keeps off
MRV2), ``report`` (``MatrixRow`` and the reports) and ``runner`` (the
command line). The package imports none of them: import the module whose
names you use.
"""
