"""The planner: will a recipe fit its hardware (heads vs tp, devices, memory per device), before allocating?"""

from crosstune.planner.estimate import MeshOption, Plan, plan_recipe, replicated_tensors
from crosstune.planner.memory import Memory

__all__ = ["Memory", "MeshOption", "Plan", "plan_recipe", "replicated_tensors"]
