"""The simulator against real runs: one run (``dspark-sim validate``) and the H200 fidelity suite.

:mod:`.validate` compares one simulated run with one real run; :mod:`.cases` writes the
fidelity suite's traces and scenarios; :mod:`.serve` has the decoder serve them (GPU);
:mod:`.fidelity` simulates every case and tabulates the errors, :mod:`.replay` prices every
served step with the cost model, and :mod:`.report` writes docs/validation.md and its plot.
"""
