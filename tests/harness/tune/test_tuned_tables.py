"""The tables the package ships match the current kernel sources (``vk tuned --check``): a change to
a kernel's files must re-tune or re-stamp (scripts/kernel_ptx_digest.py) its records."""

import pytest

from harness.tune.study import check_winners
from verify_kernels.dispatch import SHIPPED_TUNED_DIR


@pytest.mark.parametrize("table", sorted(SHIPPED_TUNED_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_table_is_current(table):
    assert check_winners(table) == []
