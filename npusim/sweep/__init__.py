"""sweep package."""
