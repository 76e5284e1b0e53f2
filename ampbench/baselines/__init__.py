"""Per-GPU baseline files, ``baselines/<gpu-slug>.json``: what a run is held against where no run
history is.

Its modules, by job: `file` opens, validates, merges and writes a file atomically (``BaselineFile``);
`entries` types an entry's figures (a speed entry holds one ``RatioEntry`` per ratio; memory,
convergence and distributed entries) and is the only reader of an entry's keys; `rules` and `schema`
say what each figure must be, derived from the entries' fields; `spread` learns each speed cell's
between-run spread from saved runs (``ampbench spread``); `show` renders a file as Markdown
(``ampbench baselines show``); `source` declares what a cell reads and records through
(``BaselineSource``), which the file and the run history over it both are.
"""
