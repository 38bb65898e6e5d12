"""workload package."""
