"""Tree-verify attention for speculative decoding on MLA models.

Import cost is torch only: Triton and CuPy are imported by the variant that needs them.
"""

from .api import UnsupportedProblemError, verify_attention
from .commit import commit_accepted
from .contract import ProblemShape
from .plan_scope import plan_once
from .problem import VerifyProblem, make_problem
from .reference import reference_attention
from .variants import VARIANTS

__all__ = [
    "VARIANTS",
    "ProblemShape",
    "UnsupportedProblemError",
    "VerifyProblem",
    "commit_accepted",
    "make_problem",
    "plan_once",
    "reference_attention",
    "verify_attention",
]
