"""`dspark-tune`: Optuna studies over DSpark's knobs and its baselines, and their exports.

Read in this order: ``space`` (what is tuned), ``honour`` (what each engine
runs, and what it holds), ``scenarios`` (a trial as a scenario file),
``objective`` (what a trial scores, the noise rule), ``storage`` and
``runner`` (studies, workers, resume), ``confirm`` (winners on fresh seeds),
``exports`` and ``engines`` (dspark.yaml, SGLang, vLLM, TensorRT-LLM),
``report``, ``tune`` (one run end to end) and ``cli``; ``enginecheck`` feeds
exports to the engines' released code.
docs/tuning.md is the user's guide.
"""
