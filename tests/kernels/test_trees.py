"""Tree utilities: round trips, brute-force ancestor sets, validation of malformed masks."""

import pytest
import torch

from verify_kernels import trees

SIZES = [1, 2, 31, 32, 33, 64, 97, 1024]


def brute_force_ancestors(parents: list[int]) -> list[set[int]]:
    result = []
    for node in range(len(parents)):
        chain, current = set(), node
        while current >= 0:
            chain.add(current)
            current = parents[current]
        result.append(chain)
    return result


@pytest.mark.parametrize("kind", sorted(trees.TREE_GENERATORS))
@pytest.mark.parametrize("size", SIZES)
def test_generators_make_valid_trees_and_masks_round_trip(kind, size):
    parents = trees.make_tree(kind, size, torch.Generator().manual_seed(size))
    trees.validate_parents(parents)
    mask = trees.parents_to_mask(parents)
    assert mask.shape == (1, size, trees.mask_words(size)) and mask.dtype == torch.int32
    trees.validate_tree_mask(mask)
    assert torch.equal(trees.mask_to_parents(mask)[0], parents)


@pytest.mark.parametrize("size", [5, 40, 130])
def test_ancestor_matrix_matches_brute_force(size):
    parents = trees.random_tree(size, torch.Generator().manual_seed(7))
    expected = brute_force_ancestors(parents.tolist())
    matrix = trees.ancestor_matrix(parents)
    for node in range(size):
        assert set(matrix[node].nonzero().flatten().tolist()) == expected[node], f"node {node}"
    depths = trees.depths(trees.parents_to_mask(parents))[0]
    assert depths.tolist() == [len(s) - 1 for s in expected]


@pytest.mark.parametrize("size", SIZES)
def test_ancestor_words_equal_parents_to_mask(size):
    """The decode loop's fast host-side mask equals the reference packing, bit 31 included."""
    parents = trees.random_tree(size, torch.Generator().manual_seed(size))
    assert torch.equal(trees.ancestor_words(parents.tolist()), trees.parents_to_mask(parents))
    with pytest.raises(ValueError, match="node 2 has parent 2"):
        trees.ancestor_words([-1, 0, 2])


def test_shapes_of_named_trees():
    assert trees.depths(trees.parents_to_mask(trees.chain_tree(40)))[0].tolist() == list(range(40))
    assert trees.depths(trees.parents_to_mask(trees.star_tree(40)))[0].tolist() == [0] + [1] * 39
    binary = trees.depths(trees.parents_to_mask(trees.binary_tree(15)))[0].tolist()
    assert binary == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]


def test_position_ids_add_prefix_lengths():
    parents = torch.stack([trees.chain_tree(4), trees.star_tree(4)])
    positions = trees.position_ids(trees.parents_to_mask(parents), torch.tensor([10, 0], dtype=torch.int32))
    assert positions.tolist() == [[10, 11, 12, 13], [0, 1, 1, 1]]


def test_pack_unpack_round_trip_including_bit_31():
    bits = torch.rand(3, 5, 70, generator=torch.Generator().manual_seed(0)) > 0.5
    bits[..., 31] = True  # the sign bit of word 0
    packed = trees.pack_bits(bits)
    assert packed.dtype == torch.int32 and (packed[..., 0] < 0).all()
    assert torch.equal(trees.unpack_bits(packed, 70), bits)


def test_batched_trees_of_different_shapes():
    parents = torch.stack([trees.chain_tree(33), trees.binary_tree(33), trees.star_tree(33)])
    mask = trees.parents_to_mask(parents)
    assert torch.equal(trees.mask_to_parents(mask), parents)


def _good_mask(size=40):
    return trees.parents_to_mask(trees.random_tree(size, torch.Generator().manual_seed(1)))


def _set_bit(mask, row, bit, value):
    mask = mask.clone()
    word = mask[0, row, bit // 32].item() & 0xFFFFFFFF
    word = word | (1 << (bit % 32)) if value else word & ~(1 << (bit % 32))
    mask[0, row, bit // 32] = word - (1 << 32) if word >= 1 << 31 else word
    return mask


@pytest.mark.parametrize("corrupt, message", [
    pytest.param(lambda m: _set_bit(m, 5, 5, False), "its own bit", id="own_bit_clear"),
    pytest.param(lambda m: _set_bit(m, 5, 9, True), "above", id="bit_above_diagonal"),
    pytest.param(lambda m: _set_bit(m, 0, 3, True), "root's row must be", id="root_not_alone"),
    pytest.param(lambda m: _set_bit(m, 20, 0, False), "row 20: not its parent's row", id="root_missing"),
    pytest.param(lambda m: _set_bit(m, 33, 31, True), "row 33: not its parent's row", id="extra_ancestor"),
])
def test_validate_tree_mask_rejects_malformed(corrupt, message):
    with pytest.raises(ValueError, match=message):
        trees.validate_tree_mask(corrupt(_good_mask()))


def test_validate_rejects_row_not_parent_plus_self():
    parents = trees.chain_tree(6)
    mask = _set_bit(trees.parents_to_mask(parents), 4, 2, False)  # 4's ancestors skip 2
    with pytest.raises(ValueError, match="parent's row"):
        trees.validate_tree_mask(mask)


def test_validate_rejects_padding_bits_past_last_node():
    mask = trees.parents_to_mask(trees.chain_tree(3))
    mask[0, 2, 0] |= 1 << 10
    with pytest.raises(ValueError, match="past the last node"):
        trees.validate_tree_mask(mask)


@pytest.mark.parametrize("parents, message", [
    pytest.param([0, 0, 1], "parent -1", id="root_with_parent"),
    pytest.param([-1, 0, 2], "parent 2", id="self_parent"),
    pytest.param([-1, 2, 0], "parent 2", id="child_before_parent"),
])
def test_validate_parents_rejects(parents, message):
    with pytest.raises(ValueError, match=message):
        trees.validate_parents(torch.tensor(parents))


def test_make_tree_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown kind 'bushy'"):
        trees.make_tree("bushy", 4)


@pytest.mark.gpu
def test_tree_utilities_on_gpu_match_cpu():
    parents = trees.random_tree(1024, torch.Generator().manual_seed(3))
    cpu = trees.parents_to_mask(parents)
    gpu = trees.parents_to_mask(parents.cuda())
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
    trees.validate_tree_mask(gpu)
    assert torch.equal(trees.mask_to_parents(gpu).cpu()[0], parents)
