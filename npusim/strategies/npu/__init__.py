"""Multi-core NPU strategies: tensor partitions, core placements, memory management."""
