"""The planner: will a recipe fit its hardware (heads vs tp, devices, memory per device), before allocating?"""

from crosstune.planner.estimate import Memory, MeshOption, Plan, plan_recipe, replicated_tensors

__all__ = ["Memory", "MeshOption", "Plan", "plan_recipe", "replicated_tensors"]
