"""The DDTree decode loop on an MLA model: model, KV pool, drafters, trees, the verify forward in
CUDA graphs, the commit, the host and device loops (``vk decode``, ``vk decode-report``); README.md."""
