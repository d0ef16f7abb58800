"""Adapters from serving stacks' attention calls to this library's contract (one module per stack).

Imported on demand: ``from verify_kernels.adapters import sglang``.
"""
