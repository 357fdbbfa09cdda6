"""The slurm backend: each run one batch job, its replicas the tasks of one srun step (`backend`), the task
that runs on every node (`task`), the task table (`tasks`) and Slurm's own commands (`control`)."""
