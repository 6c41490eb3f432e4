"""xtpu's dialects: ``hlo`` (the traced math), ``tpu`` (replication and
placement) and ``ccl`` (collectives) and ``fusion`` (fused kernels), defined with xDSL's IRDL."""

from xdsl.context import Context
from xdsl.ir import Dialect

from xtpu.dialects.autodiff import AUTODIFF_OPS
from xtpu.dialects.ccl import CCL
from xtpu.dialects.dynamic_shapes import DYNAMIC_SHAPE_OPS
from xtpu.dialects.fusion import FUSION
from xtpu.dialects.hlo import HLO_ATTRS, MATH_OPS
from xtpu.dialects.hlo_bits import BITS_OPS
from xtpu.dialects.hlo_complex import COMPLEX_OPS
from xtpu.dialects.hlo_control import CONTROL_OPS
from xtpu.dialects.hlo_host import HOST_OPS
from xtpu.dialects.hlo_indexing import INDEXING_ATTRS, INDEXING_OPS
from xtpu.dialects.hlo_linalg import LINALG_OPS
from xtpu.dialects.hlo_math import MATH_EXTRA_OPS
from xtpu.dialects.hlo_random import RANDOM_OPS
from xtpu.dialects.hlo_rounding import ROUNDING_OPS
from xtpu.dialects.hlo_window import WINDOW_OPS
from xtpu.dialects.host_variables import HOST_VARIABLE_OPS
from xtpu.dialects.summary_histogram import SUMMARY_HISTOGRAM_OPS
from xtpu.dialects.summary_write import SUMMARY_WRITE_OPS
from xtpu.dialects.tpu import TPU

HLO = Dialect(
    "hlo",
    MATH_OPS
    + INDEXING_OPS
    + ROUNDING_OPS
    + MATH_EXTRA_OPS
    + COMPLEX_OPS
    + LINALG_OPS
    + BITS_OPS
    + WINDOW_OPS
    + RANDOM_OPS
    + DYNAMIC_SHAPE_OPS
    + HOST_OPS
    + SUMMARY_HISTOGRAM_OPS
    + SUMMARY_WRITE_OPS
    + HOST_VARIABLE_OPS
    + CONTROL_OPS
    + AUTODIFF_OPS,
    HLO_ATTRS + INDEXING_ATTRS,
)

DIALECTS = (HLO, TPU, CCL, FUSION)


def make_context() -> Context:
    """A context with builtin, func and xtpu's dialects loaded."""
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context()
    for d in (Builtin, Func, *DIALECTS):
        ctx.load_dialect(d)
    return ctx
