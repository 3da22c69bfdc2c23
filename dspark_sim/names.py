"""The product's vocabulary: names that scenario files, commands and modules share, defined once."""
from __future__ import annotations

# Traffic domains; acceptance presets exist per domain.
DOMAINS = ("math", "code", "chat")
# ``speculation.method``: what decides the verify length of each request each step.
METHODS = ("none", "static", "threshold", "schedule", "dspark")
# Drafters: a block drafter proposes ``block_size`` tokens in one parallel pass, a chain
# drafter one token per pass, ``block_size`` passes.
BLOCK_DRAFTERS = ("dspark", "dflash")
CHAIN_DRAFTERS = ("eagle3", "mtp")
DRAFTERS = BLOCK_DRAFTERS + CHAIN_DRAFTERS
