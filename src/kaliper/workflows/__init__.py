"""Cluster front-ends: Argo WorkflowTemplate / Workflow / CronWorkflow (Hera) and the KFP v2 pipeline.

The only part of Kaliper that imports Hera or kfp, and only inside the builder functions, so the step
image (configure, launch, report) needs neither.
"""
