"""Draft-tree utilities: parents arrays, ancestor bitmasks, depths, validation, generators.

A tree of T nodes is given by ``parents`` ([T] or [B, T], integer): ``parents[0] == -1`` (node 0 is
the root, the previous bonus token) and ``0 <= parents[i] < i`` for every other node, so nodes are
in topological order (parents before children).

The ancestor bitmask is the contract's ``tree_mask`` ([B, T, ceil(T/32)] int32): bit ``j % 32`` of
word ``j // 32`` of row ``i`` is set iff node ``j`` is node ``i`` or one of its ancestors.

Everything here is vectorised torch and runs on the CPU or the GPU without host loops over nodes.
"""

from __future__ import annotations

import math

import torch

BITS_PER_WORD = 32


def mask_words(num_nodes: int) -> int:
    """Number of int32 words per tree-mask row."""
    return (num_nodes + BITS_PER_WORD - 1) // BITS_PER_WORD


def _as_batched(parents: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if parents.dim() == 1:
        return parents.unsqueeze(0), True
    if parents.dim() != 2:
        raise ValueError(f"parents: expected shape [T] or [B, T], got {tuple(parents.shape)}")
    return parents, False


def validate_parents(parents: torch.Tensor) -> None:
    """Raise ValueError unless ``parents`` describes a topologically ordered tree rooted at 0."""
    batched, _ = _as_batched(parents)
    if batched.dtype.is_floating_point or batched.dtype == torch.bool:
        raise TypeError(f"parents: expected an integer tensor, got {batched.dtype}")
    if batched.shape[-1] < 1:
        raise ValueError("parents: a tree needs at least one node (the root)")
    if (batched[:, 0] != -1).any():
        raise ValueError("parents: node 0 is the root and must have parent -1")
    node = torch.arange(batched.shape[-1], device=batched.device)
    bad = (batched[:, 1:] < 0) | (batched[:, 1:] >= node[1:])
    if bad.any():
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"parents: node {i + 1} of tree {b} has parent {int(batched[b, i + 1])}; "
            f"expected a parent in [0, {i + 1}) (parents before children)"
        )


def ancestor_matrix(parents: torch.Tensor) -> torch.Tensor:
    """Bool [B, T, T] (or [T, T]): ``A[i, j]`` iff j is i or an ancestor of i.

    Pointer doubling: after round k each row holds every ancestor within distance 2**k, so
    ceil(log2 T) rounds of one gather each suffice.
    """
    batched, squeeze = _as_batched(parents)
    validate_parents(batched)
    num_trees, num_nodes = batched.shape
    device = batched.device
    node = torch.arange(num_nodes, device=device)
    jump = torch.where(batched < 0, node, batched.long())  # the root points at itself
    anc = torch.zeros(num_trees, num_nodes, num_nodes, dtype=torch.bool, device=device)
    anc[:, node, node] = True
    anc.scatter_(2, jump.unsqueeze(-1), True)
    for _ in range(max(1, math.ceil(math.log2(max(num_nodes, 2))))):
        anc = anc | torch.gather(anc, 1, jump.unsqueeze(-1).expand(-1, -1, num_nodes))
        jump = torch.gather(jump, 1, jump)
    return anc[0] if squeeze else anc


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Bool [..., T] -> int32 [..., ceil(T/32)], bit j of the row at bit j % 32 of word j // 32."""
    num_nodes = bits.shape[-1]
    words = mask_words(num_nodes)
    padded = torch.zeros(*bits.shape[:-1], words * BITS_PER_WORD, dtype=torch.int64, device=bits.device)
    padded[..., :num_nodes] = bits.to(torch.int64)
    weights = torch.bitwise_left_shift(
        torch.ones(BITS_PER_WORD, dtype=torch.int64, device=bits.device),
        torch.arange(BITS_PER_WORD, dtype=torch.int64, device=bits.device),
    )
    packed = (padded.view(*bits.shape[:-1], words, BITS_PER_WORD) * weights).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)  # two's complement into int32
    return packed.to(torch.int32)


def unpack_bits(mask: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """int32 [..., W] -> bool [..., num_nodes]; the inverse of :func:`pack_bits`."""
    shifts = torch.arange(BITS_PER_WORD, dtype=torch.int32, device=mask.device)
    bits = (mask.unsqueeze(-1) >> shifts) & 1  # arithmetic shift is fine: only bit 0 is kept
    return bits.flatten(-2)[..., :num_nodes].bool()


def parents_to_mask(parents: torch.Tensor) -> torch.Tensor:
    """parents [T] or [B, T] -> tree_mask int32 [B, T, ceil(T/32)] (always batched)."""
    batched, _ = _as_batched(parents)
    return pack_bits(ancestor_matrix(batched))


def ancestor_words(parents: list[int]) -> torch.Tensor:
    """One tree's mask [1, T, ceil(T/32)] int32 from a parents list whose parents come before their
    children (what the DDTree builder emits): ``parents_to_mask`` for the decode loop's host side,
    ~10x faster at T = 64 (one Python integer per node instead of a T x T tensor walk)."""
    words = mask_words(len(parents))
    rows: list[int] = []
    for node, parent in enumerate(parents):
        if not -1 <= parent < node:
            raise ValueError(f"parents: node {node} has parent {parent}; expected -1 or an earlier node")
        rows.append((rows[parent] if parent >= 0 else 0) | (1 << node))
    data = b"".join(row.to_bytes(4 * words, "little") for row in rows)
    return torch.frombuffer(bytearray(data), dtype=torch.int32).view(1, len(parents), words)


def mask_to_parents(tree_mask: torch.Tensor) -> torch.Tensor:
    """tree_mask [B, T, W] -> parents [B, T] int64: the highest set bit below the diagonal, -1 if none.

    Exact for well-formed masks (see :func:`validate_tree_mask`).
    """
    num_nodes = tree_mask.shape[1]
    bits = unpack_bits(tree_mask, num_nodes)
    node = torch.arange(num_nodes, device=tree_mask.device)
    below = bits & (node[None, :] < node[:, None])
    return torch.where(below, node, -1).amax(-1)


def depths(tree_mask: torch.Tensor) -> torch.Tensor:
    """Depth of every node ([B, T] int64, root 0): the number of strict ancestors."""
    return unpack_bits(tree_mask, tree_mask.shape[1]).sum(-1) - 1


def position_ids(tree_mask: torch.Tensor, prefix_lens: torch.Tensor) -> torch.Tensor:
    """RoPE positions of the tree tokens ([B, T] int64): ``prefix_len + depth``."""
    return prefix_lens.to(torch.int64).unsqueeze(-1) + depths(tree_mask)


def tree_mask_problems(tree_mask: torch.Tensor) -> list[str]:
    """Every way ``tree_mask`` [B, T, W] breaks the ancestor-bitmask rules (empty list: well formed).

    Rules: bit i set in row i; no bit above i; row 0 is exactly {0}; each row equals its parent's
    row plus its own bit, where the parent is the highest set bit below i.
    """
    num_trees, num_nodes, _ = tree_mask.shape
    bits = unpack_bits(tree_mask, num_nodes)
    device = tree_mask.device
    node = torch.arange(num_nodes, device=device)
    problems = []

    def first(bad: torch.Tensor) -> tuple[int, int]:
        return tuple(int(x) for x in bad.nonzero()[0][:2])

    # Bits beyond T in the last word are padding and must be clear.
    padding_bits = (tree_mask.unsqueeze(-1) >> torch.arange(32, device=device, dtype=torch.int32)) & 1
    padding_bits = padding_bits.flatten(-2)[..., num_nodes:]
    if padding_bits.numel() and padding_bits.any():
        b, i = first(padding_bits.any(-1))
        problems.append(f"tree {b} row {i}: bits set past the last node ({num_nodes})")
    diagonal = bits[:, node, node]
    if not diagonal.all():
        b, i = first(~diagonal)
        problems.append(f"tree {b} row {i}: its own bit {i} is not set")
    above = bits & (node[None, :] > node[:, None])
    if above.any():
        b, i = first(above.any(-1))
        problems.append(f"tree {b} row {i}: a bit above {i} is set (parents must come first)")
    row0_extra = bits[:, 0, 1:].any(-1) if num_nodes > 1 else torch.zeros(num_trees, dtype=torch.bool)
    if row0_extra.any():
        problems.append(f"tree {int(row0_extra.nonzero()[0])} row 0: the root's row must be {{0}}")
    if num_nodes > 1:
        parents = mask_to_parents(tree_mask)
        orphan = parents[:, 1:] < 0
        if orphan.any():
            b, i = first(orphan)
            problems.append(f"tree {b} row {i + 1}: no ancestor set (every node but the root has a parent)")
        parent_rows = torch.gather(
            bits, 1, parents.clamp(min=0).unsqueeze(-1).expand(-1, -1, num_nodes)
        )
        expected = parent_rows | torch.eye(num_nodes, dtype=torch.bool, device=device)
        wrong = (expected != bits).any(-1)
        wrong[:, 0] = False
        wrong[:, 1:] &= ~orphan
        if wrong.any():
            b, i = first(wrong)
            problems.append(
                f"tree {b} row {i}: not its parent's row (node {int(parents[b, i])}) plus bit {i}"
            )
    return problems


def validate_tree_mask(tree_mask: torch.Tensor) -> None:
    """Raise ValueError naming the first broken rule of a [B, T, W] ancestor bitmask."""
    problems = tree_mask_problems(tree_mask)
    if problems:
        raise ValueError("tree_mask: malformed ancestor bitmask: " + "; ".join(problems[:3]))


# ---------------------------------------------------------------------------------------------
# Generators. Each returns parents [T] int64 on ``device``.


def chain_tree(num_nodes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A single path 0 -> 1 -> ... -> T-1 (plain speculative decoding, or chunked prefill)."""
    return torch.arange(-1, num_nodes - 1, device=device)


def star_tree(num_nodes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Every node a child of the root (T-1 alternatives for one token)."""
    parents = torch.zeros(num_nodes, dtype=torch.int64, device=device)
    parents[0] = -1
    return parents


def binary_tree(num_nodes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A complete binary tree in breadth-first order: parent of i is (i - 1) // 2."""
    node = torch.arange(num_nodes, device=device)
    return torch.where(node == 0, -1, (node - 1) // 2)


def random_tree(
    num_nodes: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """A random topologically ordered tree: node i picks its parent in [max(0, i-8), i).

    Drawing parents from a window of recent nodes gives deep, bushy trees like a DDTree heap's
    pop order rather than the shallow ones a uniform choice gives.
    """
    node = torch.arange(num_nodes)
    low = (node - 8).clamp(min=0)
    span = (node - low).clamp(min=1)
    draw = torch.rand(num_nodes, generator=generator)
    parents = low + (draw * span).long().clamp(max=span - 1)
    parents[0] = -1
    return parents.to(device)


TREE_GENERATORS = {
    "chain": chain_tree,
    "star": star_tree,
    "binary": binary_tree,
    "random": random_tree,
}


def make_tree(kind: str, num_nodes: int, generator: torch.Generator | None = None,
              device: torch.device | str = "cpu") -> torch.Tensor:
    """parents [T] for a tree of the named kind (one of TREE_GENERATORS)."""
    if kind not in TREE_GENERATORS:
        raise ValueError(f"tree: unknown kind {kind!r}; expected one of {sorted(TREE_GENERATORS)}")
    if num_nodes < 1:
        raise ValueError(f"tree: expected at least 1 node, got {num_nodes}")
    if kind == "random":
        return random_tree(num_nodes, generator, device)
    return TREE_GENERATORS[kind](num_nodes, device)
