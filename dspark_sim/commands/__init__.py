"""The ``dspark-sim`` sub-commands: each module parses its arguments (``register``) and prints.

The work is done by library modules (:mod:`dspark_sim.run`, :mod:`dspark_sim.sweep`,
:mod:`dspark_sim.capacity`, :mod:`dspark_sim.validation`, :mod:`dspark_sim.acceptance`).
"""
