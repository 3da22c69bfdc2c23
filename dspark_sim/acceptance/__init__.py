"""Acceptance and confidence model: which drafts the target accepts, and what the head predicts.

The engine uses ``AcceptanceModel`` (built from the scenario's ``AcceptanceConfig``);
presets fitted to the DSpark paper live in presets.json (fitted by ``builtin``, which
``python benchmarks/fit_acceptance.py`` runs); ``dspark-sim calibrate`` (``calibrate``,
``inputs``) fits a preset and STS temperatures from a user's own numbers. The fitting
modules (``fit``, ``metrics``, ``calibrate``, ``builtin``) need scipy and are never imported
by a simulation, except to refit the head for an ``auc`` override. docs/acceptance.md
explains the model and the fit.
"""
from dspark_sim.acceptance.config import AcceptanceConfig
from dspark_sim.acceptance.model import AcceptanceModel
from dspark_sim.acceptance.paper import DATASETS
from dspark_sim.acceptance.preset import MAX_POSITIONS, AcceptancePreset, get_preset
from dspark_sim.names import DOMAINS, DRAFTERS

__all__ = ["DATASETS", "DOMAINS", "DRAFTERS", "MAX_POSITIONS", "AcceptanceConfig", "AcceptanceModel",
           "AcceptancePreset", "get_preset"]
