"""The static model: a variant's kernels compiled offline for an arch (Triton or nvcc), their
resources and occupancy, and the search spaces' static feasibility (``vk static``)."""
