"""Speculation methods by name, as ``compare --methods`` and ``capacity --methods`` take them.

``none``, ``mtpK``, ``eagle3-K``, ``dflash-K``, ``dspark``, ``dspark-full`` and
``threshold-T`` each stand for a :class:`~dspark_sim.speculation.config.Speculation`
built on the scenario's own settings (its acceptance, and its DSpark knobs for ``dspark``).
"""
from __future__ import annotations

import re
from dataclasses import replace

from dspark_sim.config import located
from dspark_sim.errors import InputError
from dspark_sim.speculation.config import MAX_BLOCK_SIZE, Speculation

METHOD_HELP = ("none | mtpK (MTP chain verifying K drafts) | eagle3-K | dflash-K (block drafter, static K) | "
               "dspark (the scenario's DSpark settings or the defaults) | dspark-full (DSpark drafter, "
               "whole block verified) | threshold-T (DSpark drafter, survival >= T)")


def method_speculation(name: str, base: Speculation, file=None) -> Speculation:
    """The :class:`Speculation` a method name in ``--methods`` stands for, on ``base``'s settings."""
    with located(file, "--methods"):
        return _speculation(name, base, file)


def _speculation(name: str, base: Speculation, file) -> Speculation:
    acc = base.acceptance
    dspark = base if base.method == "dspark" else Speculation(method="dspark", acceptance=acc)
    if name == "none":
        return replace(base, method="none")
    if name == "dspark":
        return replace(dspark, acceptance=replace(acc, drafter="dspark"))
    if name == "dspark-full":
        return replace(dspark, method="static", drafter="dspark", acceptance=replace(acc, drafter="dspark"))
    m = re.fullmatch(r"(mtp|eagle3-|dflash-)(\d+)", name)
    if m:
        drafter, k = m.group(1).rstrip("-"), int(m.group(2))
        if not 1 <= k <= MAX_BLOCK_SIZE:
            raise InputError(file, "--methods", name, f"draft length must be 1..{MAX_BLOCK_SIZE}")
        return Speculation(method="static", drafter=drafter, block_size=k,
                           acceptance=replace(acc, drafter=drafter))
    m = re.fullmatch(r"threshold-([0-9.]+)", name)
    if m and 0.0 <= float(m.group(1)) <= 1.0:
        return replace(dspark, method="threshold", threshold=float(m.group(1)),
                       acceptance=replace(acc, drafter="dspark"))
    raise InputError(file, "--methods", name, f"unknown method; expected {METHOD_HELP}")
