"""Deciding where and how a model runs: the delegation plan and the precision policy.

The names are imported on first use (PEP 562): ``runtime.options`` needs only ``compile.precision``, and a warm
start that reads its plan from the compile cache (``runtime.warm_start``) does not import the planner."""

import sys
import types

from .._lazy import lazy_names

_PLAN = ("CPU", "GPU", "NPU", "LOWERED_CACHE_KEY", "Accelerator", "Boundary", "DelegationPlan",
         "PartialDelegationWarning", "Partition", "PlannedModel", "UnsupportedOp", "plan", "plan_model")
_WHERE = {**{name: ".plan" for name in _PLAN if name != "plan"},
          **{name: ".precision" for name in ("PRECISIONS", "PrecisionPolicy", "precision_policy")}}

__all__ = ["CPU", "GPU", "NPU", "LOWERED_CACHE_KEY", "Accelerator", "Boundary", "DelegationPlan", "PRECISIONS", "PartialDelegationWarning",
           "Partition", "PlannedModel", "PrecisionPolicy", "UnsupportedOp", "plan", "plan_model", "precision_policy"]


__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)


class _Package(types.ModuleType):
    """This package, whose ``plan`` is the planning function, as when it imported its names eagerly: importing
    the submodule ``compile.plan`` binds the package's attribute of that name to the submodule, which would hide
    the function from ``from litegpu.compile import plan``; the submodule stays in ``sys.modules``."""

    @property
    def plan(self):  # noqa: D102
        from .plan import plan

        return plan

    @plan.setter
    def plan(self, value) -> None:
        pass  # the import system binding the submodule


sys.modules[__name__].__class__ = _Package
