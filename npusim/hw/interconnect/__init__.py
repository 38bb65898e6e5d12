"""Interconnect parts: on-chip networks and point-to-point links."""
