"""ampbench's pytest plugin, registered by the package's ``pytest11`` entry point (``ampbench =
"ampbench.plugin"``): installing ampbench gives every pytest run of the environment its options and
fixtures. It acts only where a run asks for it (``activation``: pytest's ``required_plugins`` lists
ampbench, or a ``--perf-*`` option is given); in any other run it imports no torch, probes no device,
reads no baseline and opens no history, and prints nothing.

Its modules, by job: `activation` decides whether it acts; `options` declares the ``--perf-*`` options;
`session` turns them into the session's settings at configure time (usage errors before the first
cell), parametrizes the cells (from `parametrize`), says when the run is the CPU smoke pass and writes
recorded baselines; `fixtures` are what a cell test takes; `distributed` holds the ranks of the
distributed cells; `nodes` the hosts their launches span (node 0 runs the tests, the others follow);
`profiles` the hypothesis profiles; `checks` refuses options under which a run would lose its results;
`entries` gives each cell's JSON entry its group and keeps the untimed cells beside the timed ones;
`progress` draws the progress line; `summary` writes the end-of-run tables; `history` checks the run
history's store before the first cell and appends the run at the end; `errors` keeps the cells whose test
stopped with an error as failing records. Not loaded with them: `slowdown`, the speed gate's own check,
which slows chosen cells on purpose (`slowed_steps`) where a run asks for it with ``-p ampbench.slowdown``.
The cell tests themselves are ``ampbench.suite``.

This module only names the plugin's modules: importing it (or any of them for its functions) costs
nothing more.
"""

pytest_plugins = (
    "ampbench.plugin.options",
    "ampbench.plugin.session",
    "ampbench.plugin.fixtures",
    "ampbench.plugin.distributed",
    "ampbench.plugin.nodes",
    # that the run keeps its results (output paths, options that lose them); the progress line; the run
    # history (--perf-history, --perf-label, each run appended at the session's end)
    "ampbench.plugin.checks",
    "ampbench.plugin.entries",
    "ampbench.plugin.progress",
    "ampbench.plugin.history",
    # cells whose test stopped with an error: failing records, in the history and the JSON
    "ampbench.plugin.errors",
)
