"""Measurement harness: timer, roofline, sweeps, records and the ``vk`` command line."""
