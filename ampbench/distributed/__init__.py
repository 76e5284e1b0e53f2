"""Mixed precision past one GPU: DDP and FSDP2 cells and the distributed loss-scaling properties, each a
torchrun launch of ranks (NCCL on GPUs, gloo on the CPU).

Its modules, by job: `variants` is the table of communication variants (how each wraps a model, which
cells run where, NCCL's share of a profiled step); `launch` starts a torchrun launch from the pytest
process with a time limit; `speed_worker` is one rank of a distributed speed cell, timing each side in
wall clock and device time per round; `figures` merges the ranks' documents into a cell's figures;
`clocks` says which of those figures each kind of ratio is;
`judging` holds them against the cell's baseline entry and picks the figures that gate it, as the
single-GPU cells are judged (``ampbench.speed.ratio``, ``ampbench.verdict.combined``);
`loss_scaling_worker` is one rank of the distributed loss-scaling properties.
"""
