"""How many GPUs of which kind serve a traffic within an SLO (the library behind ``dspark-sim capacity``).

:mod:`.search` finds the highest request rate one replica sustains (the SLO's rule, a
doubling-then-bisection search), :mod:`.plan` the fewest GPUs per (GPU kind, method) and
the cheapest, :mod:`.report` the table and the chart.
"""
