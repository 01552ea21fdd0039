"""`xmfu fleet`: a candidate cluster judged node by node and link by link, on the cluster's own Slurm. spec (what is
asked), schedule (the rounds of node pairs), job (the sbatch script of srun steps), slurm (submit, wait, cancel),
step (what one srun step runs on its node or pair), gather, diagnose (baseline, rules, reason codes), page.

Front door: may import suites/, config/, run.py and every layer below; never the cli.
"""
