"""The train stage's machinery beside its contract: which topology a run gets (`topology`),
`workers: auto`'s probe (`auto_workers`), and running the job in this process or as a local
cluster (`execution`). pipeline.stages.train keeps the config, the checks and the job, and
calls these."""
