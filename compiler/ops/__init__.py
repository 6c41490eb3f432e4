"""TF's ops, eager and traced, each built on the ``hlo`` dialect's ops
through :func:`xtpu.core.tracing.bind`: math (``math_ops``,
``more_math_ops``), arrays (``array_ops``, ``shape_ops``,
``construction_ops``, ``gather_ops``, ``einsum_op``), ``nn_ops``, strings,
summaries (``summary_ops``, the ``xtpu.summary`` namespace), control flow
(``cond``, ``while_loop``, ``switch_case``), logical-device sharding, and
the Python and numpy operators of ``Tensor`` / ``EagerTensor``
(``operators``).

Layer: above ``xtpu.core``. May import ``xtpu.core`` and the IR and runtime
layers; never ``autodiff``, ``replication``, ``distribute``, ``train``,
``tools`` nor the ``xtpu`` namespace.
"""

__all__: list[str] = []
