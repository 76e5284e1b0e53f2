"""The run history: every run of the suite appended to a store (an SQLite file, or PostgreSQL for a
fleet of runners), so that a cell's level, its noise and its changes are learned from the
runs of the user's own runners.

The modules, by job:
- `connect`: a store's URL checked and made into an engine, and a database's failures into one-line
  HistoryErrors;
- `schema`: the tables, the schema version and the migrations between versions;
- `store`: the History: append a run in one transaction, read a cell's series, list runs, accept a change;
  `rows`: a run as it holds one, free of the database;
- `ingest`: a run's records (from the plugin, or a saved run JSON) as the rows of the history;
- `series`: a cell's figure over runs (Series of Points), what the analysis reads;
- `replay`: which runs of a series count, which are held back as suspect and why (`statuses`), and
  `model`: the level per card and the noise the counted runs give;
- `learn`: a cell's level and learned tolerance from its series;
- `changes`: change points in a cell's series;
- `baseline_source`: the history as the verdicts' baseline source, over the committed file;
- `export`, `list_changes`, `report_changes`: a baseline file, and the changes listed, from the history;
- `explain`: what the history decided of one cell (simulated histories of the gate are tests/history_simulation.py).
Its commands (``ampbench history import|runs|accept|explain|changes``) are ``ampbench.cli.history``.
Its pytest side (``--perf-history``, ``--perf-label``: the store checked before the first cell, the run
appended at the session's end) is ``ampbench.plugin.history``.
"""
