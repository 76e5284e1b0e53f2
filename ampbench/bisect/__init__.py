"""``ampbench bisect``: the first commit (or package version) at which speed cells got slower.

Its modules, by job: `cells` names the cells the user gives (``test_speed[gpt-amp_fp16]`` or
``gpt:amp_fp16``); `measure` runs one measurement of them (the suite's cell under pytest, or a step
command of the user's) and reads its figures back; `pairs` runs a step as pairs of the good side and the
commit under test on the same card, judged by ``ab.paired.judge_pairs``; `judge` turns the cells'
verdicts into the step's answer, and holds a step to the history's level where ``--history`` gives one
(`levels` reads it); `step` is what ``git bisect run`` calls at each commit; `commits` drives ``git
bisect`` in a worktree of its own (``ampbench.worktree``), with a second one at the good side, and
`versions` bisects package versions, each in a virtual environment of its own; `outcome` reports the first
bad step and writes the record of every step. The command's arguments: ``ampbench.cli.bisect``. Nothing
here imports torch: the suite runs in the processes the bisect starts.
"""
