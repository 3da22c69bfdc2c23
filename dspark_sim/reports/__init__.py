"""The docs' generated pages and blocks, made from committed result files (no torch).

``registry.py`` names every block and page with the function that makes it; ``blocks.py``
reads and writes a block between its markers. The other modules turn one result file into
its text: a GPU run's JSON, a simulator benchmark's figures, a committed sweep.
"""
