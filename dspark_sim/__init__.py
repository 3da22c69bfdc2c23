"""dspark-sim: a capacity planner for DSpark speculative decoding.

Importing this package is cheap: it pulls in neither torch nor triton (those
live in the ``[gpu]`` extra and in :mod:`dspark_sim.kernels`).
"""

__version__ = "0.1.0"
