"""Deciding where and how a model runs: the delegation plan and the precision policy."""

from .plan import CPU, GPU, NPU, DelegationPlan, Partition, UnsupportedOp, plan
from .precision import PRECISIONS, PrecisionPolicy, precision_policy

__all__ = ["CPU", "GPU", "NPU", "DelegationPlan", "PRECISIONS", "Partition", "PrecisionPolicy",
           "UnsupportedOp", "plan", "precision_policy"]
