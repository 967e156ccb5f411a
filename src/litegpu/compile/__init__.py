"""Deciding where and how a model runs: the delegation plan and the precision policy."""

from .plan import (CPU, GPU, NPU, LOWERED_CACHE_KEY, Accelerator, Boundary, DelegationPlan, PartialDelegationWarning,
                   Partition, PlannedModel, UnsupportedOp, plan, plan_model)
from .precision import PRECISIONS, PrecisionPolicy, precision_policy

__all__ = ["CPU", "GPU", "NPU", "LOWERED_CACHE_KEY", "Accelerator", "Boundary", "DelegationPlan", "PRECISIONS", "PartialDelegationWarning",
           "Partition", "PlannedModel", "PrecisionPolicy", "UnsupportedOp", "plan", "plan_model", "precision_policy"]
