"""DSpark GPU kernels (Triton) with plain torch references.

Public API (imported lazily, so ``import dspark_sim.kernels`` pulls in neither torch
nor triton until a name is used):

* :func:`schedule_verify` - per-request verify lengths, budget K and predicted Theta.
* :func:`accept`, :func:`accept_greedy` - verification over ragged verify windows.
* :class:`SpsTensors`, :class:`AdditiveSpsTensors` - SPS cost tables on the device.
* :func:`schedule_verify_ref`, :func:`accept_ref` - the loop references.
"""

import importlib
import sys
import types

_LAZY = {
    "schedule_verify": ".schedule_verify",
    "accept": ".accept",
    "accept_greedy": ".accept",
    "SpsTensors": ".sps_tensors",
    "AdditiveSpsTensors": ".sps_tensors",
    "sps_from_json_dict": ".sps_tensors",
    "sps_tensors": ".sps_tensors",
    "schedule_verify_ref": ".reference",
    "accept_ref": ".reference",
}

__all__ = sorted(_LAZY)


class _Package(types.ModuleType):
    """``accept`` and ``schedule_verify`` name both a function and its module. Importing
    a submodule makes Python set it as a package attribute; this class keeps the
    function there instead (the modules stay reachable through sys.modules)."""

    def __getattr__(self, name):
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        types.ModuleType.__setattr__(self, name, value)
        return value

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        types.ModuleType.__setattr__(self, name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_LAZY))


sys.modules[__name__].__class__ = _Package
