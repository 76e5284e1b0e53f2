"""``-p ampbench.slowdown``: the speed gate's own check, a pytest plugin that really slows chosen cells down
(``pytest perf/test_speed.py -p ampbench.slowdown --perf-slowdown resnet50:amp_fp16:0.01``). The plugin is
``ampbench.plugin.slowdown``; this name, the one README.md gives, loads it."""

pytest_plugins = ("ampbench.plugin.slowdown",)
