"""``dot``: tl.dot with a CPU-interpreter workaround shared by the Triton variants.

Triton's interpreter (TRITON_INTERPRET=1, used by the CPU test suite) stores bf16 as uint16 and
multiplies those integers in tl.dot (seen in 3.6 and 3.9), so bf16 kernels only give right
answers on the CPU when the operands are upcast first. On the GPU ``UPCAST`` is False and the
operands go to the tensor cores as they are.
"""

import triton
import triton.language as tl


@triton.jit
def dot(a, b, acc, UPCAST: tl.constexpr):
    if UPCAST:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc
