"""Mixed precision past one GPU: DDP and FSDP2 cells and the distributed loss-scaling properties, each a
torchrun launch of ranks (NCCL on GPUs, gloo on the CPU).

Its modules, by job: `variants` is the table of communication variants (how each wraps a model, which
cells run where); `launch` starts a torchrun launch from the pytest process with a time limit;
`speed_worker` is one rank of a distributed speed cell; `loss_scaling_worker` one rank of the
distributed loss-scaling properties. Their cells are judged as the single-GPU ones are
(``ampbench.speed.ratio``, ``ampbench.verdict.combined``).
"""
