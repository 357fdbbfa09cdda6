"""What runs inside a workflow's pods: configure, launch (create a job and wait for it), report.

The same image and the same code for Argo and KFP; no Hera or kfp import here.
"""
