"""metrics package."""
