"""The matrix products a traced function performs, read from its jaxpr (for tests of which
matmuls a forward or backward runs, not of their values)."""

from __future__ import annotations

import jax
import jax.extend


def dot_operands(jaxpr, primitives=("dot_general",)) -> list[tuple]:
    """The operands' abstract values (shape, dtype) of every dot_general (or other `primitives`,
    e.g. "mul") in a jaxpr, nested jaxprs (custom_vjp, map, scan) included, in program order."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in primitives:
            found.append(tuple(v.aval for v in eqn.invars))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += dot_operands(sub, primitives)
    return found
