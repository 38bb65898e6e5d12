"""Registered iteration schedulers (category ``scheduler``): one file per policy."""
