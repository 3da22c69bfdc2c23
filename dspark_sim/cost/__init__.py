"""Cost models: seconds of one engine step, from a measured profile or the roofline.

Start at :func:`get_cost_model` (profile if shipped, roofline otherwise); the
SGLang SPS tables the DSpark scheduler reads are in :mod:`dspark_sim.cost.sps`. Fitting
a profile to the profiler's timings is :mod:`dspark_sim.profiling` (never imported here).
"""
from dspark_sim.cost.base import CostModel, DraftWork, StepWork, StepWorks
from dspark_sim.cost.profile import Profile, ProfileCost, get_cost_model, load_profile, project_profile
from dspark_sim.cost.roofline import RooflineCost, RooflineParams
from dspark_sim.cost.scenario import scenario_cost
from dspark_sim.cost.sps import (SpsAdditiveCostTable, SpsCostTable, default_probes, load_sps_table,
                                 sps_from_cost_model)

__all__ = ["CostModel", "DraftWork", "StepWork", "StepWorks", "Profile", "ProfileCost", "get_cost_model",
           "scenario_cost", "load_profile", "project_profile", "RooflineCost", "RooflineParams",
           "SpsAdditiveCostTable", "SpsCostTable", "default_probes", "load_sps_table",
           "sps_from_cost_model"]
