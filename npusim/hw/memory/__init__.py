"""Memory parts: DRAM channels and systems, SRAM scratchpads, flash."""
