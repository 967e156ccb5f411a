"""Deciding where and how a model runs: the delegation plan and the precision policy."""

from .plan import (CPU, GPU, NPU, Accelerator, Boundary, DelegationPlan, PartialDelegationWarning, Partition,
                   UnsupportedOp, plan)
from .precision import PRECISIONS, PrecisionPolicy, precision_policy

__all__ = ["CPU", "GPU", "NPU", "Accelerator", "Boundary", "DelegationPlan", "PRECISIONS", "PartialDelegationWarning",
           "Partition", "PrecisionPolicy", "UnsupportedOp", "plan", "precision_policy"]
