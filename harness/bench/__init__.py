"""The oracle check's case matrix (``vk check``), side-by-side sweeps with peers (``vk bench``) and
their reports (``vk report``)."""
