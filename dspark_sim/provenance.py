"""Where a run's numbers come from: the provenance block every output carries.

A block has three parts:

- ``cost_model``: the cost model's own account (``ProfileCost.provenance`` /
  ``RooflineCost.provenance``): each term measured (GPU, date, decoder commit), projected
  from another GPU by spec-sheet ratios, substituted from a sibling profile, roofline or
  missing; TP measured or not; the profile's held-out errors; the ``engine`` whose host
  time the run prices (the scenario's ``engine:``, ``decoder project`` when not given).
- ``acceptance``: ``preset`` (the built-in presets fitted to published tables), ``calibrated``
  (a preset file ``dspark-sim calibrate`` fitted to the user's log), ``substituted`` (another
  target's preset used for this one, named), ``fixed`` or ``none``; with the overrides the
  scenario applied. The simulator always draws acceptance from its generative model.
- ``uses``: the terms this run's method needs, and ``caveats``: one phrase for each of
  them (and the acceptance) that is not measured for this model on this GPU.

:func:`provenance_line` is the one line a command prints when there are caveats.
"""
from __future__ import annotations

from dspark_sim.speculation.config import Speculation

MEASURED = "measured"
BUILTIN_ORIGIN = {"mtp": "DeepSeek-V3's published MTP acceptance",
                  "deepseek-v4-flash": "the DeepSeek-V4-Flash engine report (chat; math and code scaled by "
                  "V4-Pro's verify windows in the LMSYS DeepSeek-V4 DSpark blog)",
                  "deepseek-v4-pro": "the LMSYS DeepSeek-V4 DSpark blog (accept length about 5, taken as gsm8k's; "
                  "chat and code derived from its verify windows and the paper's code / math ratio)"}


def acceptance_block(spec: Speculation, model: str) -> dict:
    """The ``acceptance`` part of a run's provenance (see the module docstring)."""
    from dspark_sim.acceptance.preset import PresetTable, builtin, normalize_target

    if spec.method == "none":
        return {"kind": "none", "detail": "no speculation", "overrides": []}
    cfg = spec.acceptance
    if cfg.fixed_accept_prob is not None:
        return {"kind": "fixed", "detail": f"every draft accepted with probability {cfg.fixed_accept_prob:g} "
                "(an assumed baseline)", "overrides": []}
    table = PresetTable.load(cfg.preset_file) if cfg.preset_file else builtin()
    target = cfg.target or model
    chosen = table.resolve_target(cfg.drafter, target)
    origin = (f"calibrated from the user's log ({cfg.preset_file})" if cfg.preset_file else
              "built-in preset fitted to "
              + BUILTIN_ORIGIN.get(cfg.drafter, BUILTIN_ORIGIN.get(chosen, "the DSpark paper's Table 1")))
    if chosen != normalize_target(target):
        kind = "substituted"
        detail = f"{cfg.drafter}/{chosen} acceptance borrowed for {normalize_target(target)} ({origin})"
    else:
        kind = "calibrated" if cfg.preset_file else "preset"
        detail = f"{cfg.drafter}/{chosen} ({origin})"
    overrides = [f"{name}={getattr(cfg, name)}" for name in ("dataset", "auc", "difficulty_sigma")
                 if getattr(cfg, name) is not None]
    if cfg.calibration != "sts":
        overrides.append(f"calibration={cfg.calibration}")
    if spec.sts is not None:
        overrides.append(f"sts={spec.sts}")
    return {"kind": kind, "detail": detail, "overrides": overrides,
            "draws": "the simulator's generative acceptance model (per-request difficulty, per-step noise)"}


def terms_used(spec: Speculation) -> tuple[str, ...]:
    """The cost terms a run of ``spec`` prices its steps with."""
    kind = spec.draft_kind if spec.method != "none" else None
    return ("target", *((f"draft_{kind}",) if kind else ()), f"host_{kind or 'none'}", "sched")


def caveats(cost_block: dict, acceptance: dict, uses: tuple[str, ...]) -> list[str]:
    """One phrase for each used term, the TP scaling and the acceptance that are not measured here."""
    out = []
    terms = cost_block["terms"]
    if cost_block["kind"] == "roofline":
        out.append(f"cost model: roofline for {cost_block['gpu']}/{cost_block['model']} (no measured profile)")
    else:
        by_kind: dict[str, list[str]] = {}
        for name in uses + tuple(t for t in ("comm", "power_limit") if t in terms):
            term = terms.get(name)
            if term is not None and term["kind"] != MEASURED:
                if term.get("caveat"):  # a term that says what it assumes in its own words
                    out.append(term["caveat"])
                    continue
                by_kind.setdefault(term["kind"], []).append(name)
        proj = cost_block.get("projected")
        for kind, names in by_kind.items():
            if kind == "projected" and proj:
                out.append(f"{cost_block['gpu']}/{cost_block['model']} profile projected from {proj['from']} "
                           f"(measured {cost_block['measured']['date']}) by spec-sheet ratios")
            elif kind == "substituted":
                out += [f"{name} substituted: {terms[name]['detail']}" for name in names]
            else:
                out.append(f"{'/'.join(names)} {kind}")
        if not cost_block["tp"]["measured"]:
            out.append(f"tp={cost_block['tp']['size']} scaled from {cost_block['tp'].get('from', 'tp=1')}, not measured")
    if acceptance["kind"] in ("substituted", "fixed"):
        out.append(f"acceptance {acceptance['kind']}: {acceptance['detail']}")
    return out


def provenance(cost, spec: Speculation, model: str) -> dict:
    """The provenance block of a run pricing ``spec`` on ``model`` with ``cost``."""
    block = cost.provenance() if hasattr(cost, "provenance") else {
        "kind": "unknown", "name": getattr(cost, "name", type(cost).__name__), "gpu": None, "model": model,
        "source": getattr(cost, "source", ""), "tp": {"size": None, "measured": False}, "terms": {}}
    acc = acceptance_block(spec, model)
    uses = terms_used(spec)
    return {"cost_model": block, "acceptance": acc, "uses": list(uses),
            "caveats": caveats(block, acc, uses)}


def scenario_provenance(scenario, cost=None) -> dict:
    """:func:`provenance` of ``scenario`` (its cost model built when not given)."""
    if cost is None:
        from dspark_sim.cost.scenario import scenario_cost

        cost = scenario_cost(scenario, warn=False)
    block = provenance(cost, scenario.speculation, scenario.model)
    block["cost_model"]["engine"] = scenario.engine.label
    note = scenario.engine.release.note
    if note:  # a release not modelled: the nearest modelled release's defaults stand in
        block["cost_model"]["engine_release"] = note
        block["caveats"].append(note)
    if scenario.cost_scale != 1.0:
        block["cost_model"]["time_scale"] = scenario.cost_scale
        block["caveats"].append(f"every profiled step time x {scenario.cost_scale:g} (cost_scale)")
    return block


def basis(block: dict) -> str:
    """A short label of what a result rests on, for table columns: ``measured h200``,
    ``projected from h200``, ``roofline``; ``+`` when anything else is not measured."""
    cost = block["cost_model"]
    if cost["kind"] == "roofline":
        label = "roofline"
    elif cost.get("projected"):
        label = f"projected from {cost['projected']['from']}"
    else:
        label = f"measured {cost['measured']['gpu']}" if cost.get("measured") else cost["kind"]
    extra = [c for c in block["caveats"] if "projected from" not in c and not c.startswith("cost model: roofline")]
    return label + (" +" if extra else "")


def provenance_line(blocks: list[dict]) -> str | None:
    """The one line to print when any of ``blocks`` rests on something not measured; None otherwise."""
    seen = list(dict.fromkeys(c for b in blocks for c in b["caveats"]))
    if not seen:
        return None
    return "provenance: " + "; ".join(seen)


__all__ = ["provenance", "scenario_provenance", "acceptance_block", "terms_used", "caveats", "basis",
           "provenance_line"]
