"""The serving engines the planner predicts and configures: SGLang, vLLM and TensorRT-LLM.

Everything the project knows about them lives here, one concept a module:

* :mod:`~dspark_sim.engines.model`: a scenario's ``engine:`` (defaults, host terms, the KV an
  engine reserves, overlap), read by the simulator; :mod:`~dspark_sim.engines.releases`: the
  release each default was read from and its citation; ``terms.json``: the shipped host terms;
* :mod:`~dspark_sim.engines.step_cost`: a step priced as the GPU's work plus the engine's host time;
* :mod:`~dspark_sim.engines.knobs`: the one table from a scenario knob to the engine field that
  carries it, read by the config export, the check and the tuner's space;
* :mod:`~dspark_sim.engines.configs`: a scenario written as each engine's config file;
  :mod:`~dspark_sim.engines.check`: those files fed to the engines' own released code;
* :mod:`~dspark_sim.engines.files`: the files the engines' own tools write;
  :mod:`~dspark_sim.engines.fit`: host terms fitted on them (``dspark-sim engine-fit``).

Importing the package imports none of them (the simulation path loads only what it uses).
"""
