"""`dspark-tune`: Optuna studies over DSpark's knobs and its baselines, and their exports.

Read in this order: ``space`` (what is tuned; which knob each engine honours and what it
holds is :mod:`dspark_sim.engines.knobs`), ``scenarios`` (a trial as a scenario file),
``objective`` (what a trial scores, the noise rule), ``storage`` and
``runner`` (studies, workers, resume), ``confirm`` (winners on fresh seeds),
``exports`` (dspark.yaml, SPS and STS tables; the engines' configs are
:mod:`dspark_sim.engines.configs`), ``report``, ``tune`` (one run end to end) and ``cli``.
docs/tuning.md is the user's guide.
"""
