"""The simulator's own speed: the timed cases and their targets (``cases.py``), and where a
run's time goes, phase by phase (``breakdown.py``). ``benchmarks/bench_sim.py`` and
``benchmarks/sim_breakdown.py`` time them."""
