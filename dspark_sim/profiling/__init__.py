"""Raw profile -> fit -> profile: the offline pipeline that turns the profiler's timings into a cost profile.

:mod:`.fit` fits the target's and the drafters' terms (:mod:`.stages`, :mod:`.rows`),
:mod:`.host` the engine's host time, :mod:`.heldout` measures the held-out error,
:mod:`.slices` scales a model timed as layer slices to its whole and measures that error;
:mod:`.pipeline` writes the profile, its SGLang tables and its projections, :mod:`.plots`
draws it against its points, :mod:`.synthetic` makes raw data for dry runs, and
:mod:`.cli` is ``dspark-profile fit``. The simulator never imports this package (it
needs scipy): it reads the fitted files through :mod:`dspark_sim.cost`.
"""
