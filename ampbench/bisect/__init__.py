"""``ampbench bisect``: the first commit (or package version) at which speed cells got slower.

Its modules, by job: `cells` names the cells the user gives (``test_speed[gpt-amp_fp16]`` or
``gpt:amp_fp16``); `measure` runs one measurement of them (the suite's cell under pytest, or a step
command of the user's) and reads its figures back; `judge` holds a measurement against the good side's
level; `step` is what ``git bisect run`` calls at each commit; `worktree` makes and removes the git
worktree the bisect runs in, so the user's checkout is never touched; `commits` drives ``git bisect``,
`versions` bisects package versions, each in a virtual environment of its own; `outcome` reports the
first bad step and writes the record of every step. The command's arguments: ``ampbench.cli.bisect``.
Nothing here imports torch: the suite runs in the processes the bisect starts.
"""
