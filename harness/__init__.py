"""The measurement harness around ``verify_kernels`` and its command line, ``vk`` (README.md here)."""
