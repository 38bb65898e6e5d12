"""Compute parts: systolic arrays, vector units, roofline engines."""
