"""Reverse-mode differentiation: ``gradients`` (TF 1), ``GradientTape``
(TF 2), ``custom_gradient``, ``stop_gradient`` and the gradients of
control flow (``cond``/``while_loop`` regions) and of outside-compilation
clusters (colocated as ``C.<gradient_uid>``, after the seed patch).

The engine (:mod:`~xtpu.autodiff.gradients`) walks the recorded ops
backwards and applies each op's own VJP rule (``PrimitiveOp.vjp``, in the
dialects); region ops register their structural rules from
:mod:`~xtpu.autodiff.gradients_control_flow`; :mod:`~xtpu.autodiff.tape`
records eagerly or while tracing.

Layer: above ``xtpu.ops`` and ``xtpu.core``. May import those and the IR
and runtime layers; never ``replication``, ``distribute``, ``train``,
``tools`` nor the ``xtpu`` namespace (variables are recognised by the
``xtpu.core.tracing`` variable protocol, not by importing them).
"""

__all__: list[str] = []
