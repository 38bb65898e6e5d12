"""serving package."""
