"""``hlo`` control flow: ``hlo.if``, ``hlo.while`` and their ``hlo.return``.

Semantics follow StableHLO (https://openxla.org/stablehlo/spec, sections
``if`` and ``while``); TF's ``tf.cond`` and ``tf.while_loop`` trace to them.
Regions may use values defined above them (they are not isolated), as in
StableHLO.  An outside-compilation cluster inside a region runs on the host
each time the region runs, and never when it does not.

Syntax::

  %r = hlo.if %pred -> (tensor<f32>) {
    hlo.return %a : tensor<f32>
  } else {
    hlo.return %b : tensor<f32>
  }

  %r:2 = hlo.while(%i = %i0, %x = %x0) : tensor<i32>, tensor<f32> cond {
    hlo.return %p : tensor<i1>
  } do {
  ^bb0(%i1: tensor<i32>, %x1: tensor<f32>):
    hlo.return %i2, %x2 : tensor<i32>, tensor<f32>
  }
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import TensorType, i1
from xdsl.irdl import (
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    region_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator
from xdsl.utils.exceptions import VerifyException

from xtpu.dialects.primitive import PrimitiveOp
from xtpu.dialects.tensor_spec import TensorSpec
from xtpu.runtime.errors import ReplicasDiverged


@irdl_op_definition
class ReturnOp(PrimitiveOp):
    """Ends a region of ``hlo.if`` / ``hlo.while`` with its values
    (StableHLO spec: return)."""

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "hlo.return"
    results_ = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(IfOp, WhileOp)))
    assembly_format = "attr-dict ($results_^ `:` type($results_))?"

    @classmethod
    def infer(cls, specs, **_):
        return []


def _returned(region, what: str, op: str) -> list:
    term = region.block.last_op
    if not isinstance(term, ReturnOp):
        raise VerifyException(f"'{op}' op {what} must end with hlo.return")
    return list(term.operand_types)


def _types(ts) -> str:
    return ", ".join(str(t) for t in ts)


@irdl_op_definition
class IfOp(PrimitiveOp):
    """Run ``true_branch`` when ``pred`` holds, else ``false_branch``; the
    results are what the branch that ran returns (StableHLO spec: if)."""

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "hlo.if"
    pred = operand_def(TensorType(i1, []))
    true_branch = region_def("single_block")
    false_branch = region_def("single_block")
    outputs = var_result_def(TensorType)
    assembly_format = "$pred (`->` `(` type($outputs)^ `)`)? $true_branch `else` $false_branch attr-dict"

    def verify_(self) -> None:
        p = TensorSpec.of_type(self.pred.type)
        if p.shape != () or p.dtype != "bool":
            raise VerifyException(f"'hlo.if' op predicate must be a bool scalar (tensor<i1>), got {self.pred.type}")
        want = list(self.result_types)
        for what, region in (("true_branch", self.true_branch), ("false_branch", self.false_branch)):
            if region.block.args:
                raise VerifyException(f"'hlo.if' op {what} takes no arguments")
            got = _returned(region, what, self.name)
            if got != want:
                raise VerifyException(
                    f"'hlo.if' op {what} returns ({_types(got)}) but the op has results ({_types(want)})"
                )

    @staticmethod
    def region_kernel(op: IfOp, runners):
        """Run the true or the false branch's plan; ``runners`` are the
        regions' ``(run, kernels)``; the kernel takes ``pred, *captures``."""
        (run_t, k_t), (run_f, k_f) = runners
        n = len(op.results)

        def if_kernel(pred, *caps):
            res = run_t(caps, k_t) if pred else run_f(caps, k_f)
            return res[0] if n == 1 else (res if n else None)

        return if_kernel

    @staticmethod
    def together_kernel(op: IfOp, runners):
        """The sequential mode's kernel (runtime/sequential.py): the
        branches' plans run for all replicas at once (their collectives meet
        there); per operand the sequence of the replicas' values in, per
        result the sequence of theirs out.  Replicas whose predicates differ
        raise ``ReplicasDiverged`` (the step then runs a thread per
        replica)."""
        (run_t, k_t), (run_f, k_f) = runners
        n = len(op.results)

        def if_together(preds, *caps):
            first = _agreed(op, preds)
            res = run_t(caps, k_t) if first else run_f(caps, k_f)
            return res[0] if n == 1 else (res if n else None)

        return if_together


def _agreed(op, preds) -> bool:
    """The replicas' common predicate; ``ReplicasDiverged`` when they differ."""
    first = bool(preds[0])
    if any(bool(p) != first for p in preds):
        raise ReplicasDiverged(op.name, [bool(p) for p in preds])
    return first


@irdl_op_definition
class WhileOp(PrimitiveOp):
    """Run ``body`` while ``cond`` holds, starting from the operands; both
    regions take the loop values, ``cond`` returns a bool scalar, ``body`` the
    next loop values (StableHLO spec: while)."""

    STRUCTURAL_GRADIENT: ClassVar = True

    name = "hlo.while"
    operand = var_operand_def(TensorType)
    cond = region_def("single_block")
    body = region_def("single_block")
    outputs = var_result_def(TensorType)

    def verify_(self) -> None:
        types = list(self.operand_types)
        if list(self.result_types) != types:
            raise VerifyException(
                f"'hlo.while' op results ({_types(self.result_types)}) must have the operands' types ({_types(types)})"
            )
        for what, region in (("cond", self.cond), ("body", self.body)):
            args = [a.type for a in region.block.args]
            if args != types:
                raise VerifyException(
                    f"'hlo.while' op {what} takes ({_types(args)}) but the loop values are ({_types(types)})"
                )
        got = _returned(self.cond, "cond", self.name)
        if len(got) != 1 or TensorSpec.of_type(got[0]) != TensorSpec((), "bool"):
            raise VerifyException(f"'hlo.while' op cond must return one tensor<i1>, got ({_types(got)})")
        got = _returned(self.body, "body", self.name)
        if got != types:
            raise VerifyException(
                f"'hlo.while' op body returns ({_types(got)}) but the loop values are ({_types(types)})"
            )

    @staticmethod
    def region_kernel(op: WhileOp, runners):
        """Loop the body's plan while the cond's plan returns true; the kernel
        takes ``*loop_values, *captures``."""
        (run_c, k_c), (run_b, k_b) = runners
        n = len(op.operand)

        def while_kernel(*args):
            values, caps = args[:n], args[n:]
            while run_c(values + caps, k_c)[0]:
                values = run_b(values + caps, k_b)
            return values[0] if n == 1 else (values if n else None)

        return while_kernel

    @staticmethod
    def together_kernel(op: WhileOp, runners):
        """The sequential mode's kernel (see ``IfOp.together_kernel``): the
        cond's and the body's plans run for all replicas at once while every
        cond holds; replicas whose conds differ raise ``ReplicasDiverged``."""
        (run_c, k_c), (run_b, k_b) = runners
        n = len(op.operand)

        def while_together(*args):
            values, caps = args[:n], args[n:]
            while _agreed(op, run_c(values + caps, k_c)[0]):
                values = run_b(values + caps, k_b)
            return values[0] if n == 1 else (values if n else None)

        return while_together

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_list(
            zip(self.cond.block.args, self.operand),
            lambda p: (printer.print_ssa_value(p[0]), printer.print_string(" = "), printer.print_ssa_value(p[1])),
        )
        printer.print_string(")")
        if self.operand:
            printer.print_string(" : ")
            printer.print_list(self.operand_types, printer.print_attribute)
        if self.attributes:
            printer.print_string(" ")
            printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" cond ")
        printer.print_region(self.cond, print_entry_block_args=False)
        printer.print_string(" do ")
        printer.print_region(self.body, print_entry_block_args=True)

    @classmethod
    def parse(cls, parser: Parser) -> WhileOp:
        def assignment():
            arg = parser.parse_argument(expect_type=False)
            parser.parse_punctuation("=")
            return arg, parser.parse_unresolved_operand()

        pairs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, assignment)
        types = []
        if pairs:
            parser.parse_punctuation(":")
            types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
            if len(types) != len(pairs):
                parser.raise_error(f"hlo.while has {len(pairs)} loop values but {len(types)} types")
        attrs = parser.parse_optional_attr_dict_with_keyword()
        parser.parse_keyword("cond")
        cond = parser.parse_region([a.resolve(t) for (a, _), t in zip(pairs, types)])
        parser.parse_keyword("do")
        body = parser.parse_region()
        # Resolved after the regions, in the enclosing scope (as xDSL's generic
        # format does): before, a name a region defines would bind to it.
        operands = [parser.resolve_operand(o, t) for (_, o), t in zip(pairs, types)]
        op = cls.create(operands=operands, result_types=list(types), regions=[cond, body])
        if attrs is not None:
            op.attributes |= attrs.data
        return op


CONTROL_OPS = [IfOp, WhileOp, ReturnOp]
