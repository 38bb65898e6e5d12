"""Iteration-level serving: requests, KV accounting, schedulers and the engine.

Schedulers (``schedulers/``) only form batches from request state; the engine asks a
device backend what each pipeline stage of an iteration costs (vidur's split between
policy and execution-time prediction).
"""
